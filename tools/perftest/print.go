package perftest

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The tools' RESULT_LINE, without its newline.
const resultLine = "---------------------------------------------------------------------------------------"

// ResultLine is the dashed separator line.
func ResultLine() string { return resultLine }

// WaitingBanner is what a server prints before it accepts the client.
func WaitingBanner() []string {
	return []string{"", "************************************", "* Waiting for client to connect... *", "************************************"}
}

// DisablingDynamicPolling is the first stdout line of a 6.29 tool on a
// device without dynamic CQ polling (rxe, goroce).
const DisablingDynamicPolling = "Disabling dynamic polling"

// RunInfo is what the banner needs beyond the command line.
type RunInfo struct {
	Device string // the -d value or the interface roced picked
	MTU    MTU    // negotiated (check_mtu)
}

var testTitles = map[int32]string{
	VerbSend: "Send", VerbWrite: "RDMA_Write", VerbWriteImm: "RDMA_Write_with_Imm",
	VerbRead: "RDMA_Read", VerbAtomic: "Atomic",
}

var connNames = []string{"RC", "UC", "UD", "RawEth", "XRC", "DC", "SRD"}

func onOff(b bool) string {
	if b {
		return "ON"
	}
	return "OFF"
}

// Banner is ctx_print_test_info: the dashed block both sides print once
// the connection is set up, in the layout of version v.
func (c *Config) Banner(in RunInfo, v Version) []string {
	d := v.dialect()
	title := "                    " + testTitles[c.Verb()] + " "
	if c.Test.Verb() == VerbAtomic {
		title += [...]string{"CMP_AND_SWAP", "FETCH_AND_ADD"}[c.AtomicType] + " "
	}
	if c.Test.BW() {
		if c.Duplex {
			title += "Bidirectional "
		}
		if c.PostList > 1 {
			title += "Post List "
		}
		title += "BW "
	} else {
		title += "Latency "
	}
	out := []string{resultLine, title + "Test"}
	out = append(out,
		fmt.Sprintf(" Dual-port       : %s\t\tDevice         : %s", "OFF", in.Device),
		fmt.Sprintf(" Number of qps   : %d\t\tTransport type : %s", c.NumQPs, "IB"),
		fmt.Sprintf(" Connection type : %s\t\tUsing SRQ      : %s", connNames[c.Conn], onOff(c.UseSRQ)))
	// ib_write_lat turns PCIe relaxed ordering off by itself.
	pcie := onOff(!(c.NoPCIeRO || c.Test == WriteLat))
	switch d {
	case V606:
		out = append(out, " PCIe relax order: "+pcie, " ibv_wr* API     : OFF")
	case V624, V628:
		out = append(out, " PCIe relax order: "+pcie+"\t\tLock-free      : OFF",
			" ibv_wr* API     : OFF\t\tUsing DDP      : OFF")
	default:
		out = append(out, " PCIe relax order: "+pcie+"\t\tLock-free      : OFF",
			" ibv_wr* API     : OFF\t\tUsing Enhanced Reorder      : OFF")
	}
	if !c.IsServer() || c.Duplex {
		out = append(out, fmt.Sprintf(" TX depth        : %d", c.TxDepth))
	}
	if c.PostList > 1 {
		out = append(out, fmt.Sprintf(" Post List       : %d", c.PostList))
	}
	if (c.Verb() == VerbSend || c.Verb() == VerbWriteImm) && (c.IsServer() || c.Duplex) {
		out = append(out, fmt.Sprintf(" RX depth        : %d", c.RxDepth))
	}
	if c.Test.BW() {
		out = append(out, fmt.Sprintf(" CQ Moderation   : %d", c.CQMod))
		if d == V629 {
			out = append(out, " CQE Poll Batch  : 16")
		}
	}
	out = append(out, fmt.Sprintf(" Mtu             : %d[B]", in.MTU.Bytes()), " Link type       : Ethernet")
	if c.GIDIndex != -1 {
		out = append(out, fmt.Sprintf(" GID index       : %d", c.GIDIndex))
	}
	if v := c.Verb(); v != VerbRead && v != VerbAtomic {
		out = append(out, fmt.Sprintf(" Max inline data : %d[B]", c.InlineSize))
	} else {
		out = append(out, fmt.Sprintf(" Outstand reads  : %d", c.OutReads))
	}
	if c.RDMACM {
		out = append(out, " rdma_cm QPs\t : ON", " Data ex. method : rdma_cm")
	} else {
		out = append(out, " rdma_cm QPs\t : OFF", " Data ex. method : Ethernet")
	}
	if d == V629 {
		out = append(out, " NUMA node       : 0")
	}
	out = append(out, resultLine)
	if c.RDMACM && c.IsServer() {
		// ctx_print_test_info's note to a server whose QPs wait for the
		// client's CM request.
		out = append(out, " Waiting for client rdma_cm QP to connect",
			" Please run the same command with the IB/RoCE interface IP", resultLine)
	}
	return out
}

// cHex formats like C's "%#0Nx": no "0x" for zero, and the prefix counts
// towards the width.
func cHex(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", width, 0)
	}
	return "0x" + fmt.Sprintf("%0*x", max(width-2, 0), v)
}

// AddressLines is ctx_print_pingpong_data for one record; side is "local"
// or "remote".
func (c *Config) AddressLines(side string, r Record) []string {
	line := fmt.Sprintf(" %s address: LID %s QPN %s PSN %s", side, cHex(uint64(r.LID), 4), cHex(uint64(r.QPN), 6), cHex(uint64(r.PSN), 6))
	switch c.Verb() {
	case VerbRead:
		line += " OUT " + cHex(uint64(r.OutReads), 4)
		fallthrough
	case VerbWrite:
		line += " RKey " + cHex(uint64(r.RKey), 8) + " VAddr " + cHex(r.VAddr, 16)
	}
	out := []string{line}
	if c.GIDIndex > -1 {
		g := make([]string, 16)
		for i, b := range r.GID {
			g[i] = fmt.Sprintf("%02d", b)
		}
		out = append(out, " GID: "+strings.Join(g, ":"))
	}
	return out
}

func bwUnit(v Version, gbits bool) string {
	switch {
	case gbits:
		return "Gb"
	case v.dialect() == V606:
		return "MB"
	}
	return "MiB"
}

// ResultHeader is the dashed line and column titles before the results.
func (c *Config) ResultHeader(v Version) []string {
	if !c.Test.BW() {
		if c.TestType == Duration {
			return []string{resultLine, " #bytes        #iterations       t_avg[usec]    tps average"}
		}
		return []string{resultLine, " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "}
	}
	u := bwUnit(v, c.ReportFmt == ReportGbits)
	return []string{resultLine, fmt.Sprintf(" #bytes     #iterations    BW peak[%s/sec]    BW average[%s/sec]   MsgRate[Mpps]", u, u)}
}

// cFloat formats like C's printf for %[-]W.Pf, including glibc's "inf",
// "-inf", "nan" and "-nan".
func cFloat(v float64, width, prec int, left bool) string {
	var s string
	switch {
	case math.IsInf(v, 1):
		s = "inf"
	case math.IsInf(v, -1):
		s = "-inf"
	case math.IsNaN(v):
		s = "nan"
		if math.Signbit(v) {
			s = "-nan"
		}
	default:
		s = strconv.FormatFloat(v, 'f', prec, 64)
	}
	if left {
		return fmt.Sprintf("%-*s", width, s)
	}
	return fmt.Sprintf("%*s", width, s)
}

// BWRow is the result row of a bandwidth test (REPORT_FMT, or
// REPORT_FMT_EXT when --report_gbits and the average is below 0.1).
func (c *Config) BWRow(r BWReport, v Version) string {
	if c.ReportFmt == ReportGbits && r.BWAvg < 0.1 {
		return fmt.Sprintf(" %-7d    %d           %s            %s            %s", r.Size, r.Iters,
			cFloat(r.BWPeak, 7, 6, true), cFloat(r.BWAvg, 7, 6, true), cFloat(r.MsgRate, 7, 6, true))
	}
	gap := "\t\t     "
	if v.dialect() == V606 {
		gap = "\t\t   "
	}
	return fmt.Sprintf(" %-7d    %-10d       %s            %s%s%s", r.Size, r.Iters,
		cFloat(r.BWPeak, 7, 2, true), cFloat(r.BWAvg, 7, 2, true), gap, cFloat(r.MsgRate, 7, 6, true))
}

// LatReport is one latency result row, in microseconds.
type LatReport struct {
	Size, Iters                   uint64  // #bytes and #iterations
	Min, Max, Typical, Avg, Stdev float64 // t_min, t_max, t_typical, t_avg, t_stdev
	Percentile99, Percentile999   float64 // the 99% and 99.9% percentiles
	TPSAverage                    float64 // duration mode only
}

// LatRow is the result row of a latency test (REPORT_FMT_LAT, or
// REPORT_FMT_LAT_DUR with -D).
func (c *Config) LatRow(r LatReport) string {
	f := func(x float64) string { return cFloat(x, 7, 2, true) }
	if c.TestType == Duration {
		return fmt.Sprintf(" %-7d       %d            %s        %s", r.Size, r.Iters, f(r.Avg), f(r.TPSAverage))
	}
	return fmt.Sprintf(" %-7d %d          %s        %s      %s  \t       %s     \t%s\t\t%s \t\t%s",
		r.Size, r.Iters, f(r.Min), f(r.Max), f(r.Typical), f(r.Avg), f(r.Stdev), f(r.Percentile99), f(r.Percentile999))
}
