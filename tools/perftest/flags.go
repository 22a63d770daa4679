package perftest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/goroce/goroce/nic/fault"
	"github.com/goroce/goroce/tools/internal/getopt"
	"github.com/goroce/goroce/tools/pingpong"
)

// Link is goroce's --link (shared with the pingpong tools).
type Link = pingpong.Link

// Config is one perftest command line with the tool's defaults
// (init_perftest_params) and, after Resolve, its derived values
// (force_dependecies and the MTU/out_reads checks), as perftest 6.24 has
// them; 6.06 and 6.29 agree on every flag here.
type Config struct {
	Test       Test   // which program
	ServerName string // host operand; empty: this side is the server

	Port        int     // -p, --port (18515)
	IBPort      int     // -i, --ib-port (1)
	MTU         int     // -m, --mtu in bytes (0: the port's active MTU)
	Size        uint64  // -s, --size (BW 65536, LAT 2, atomic 8); K/M suffixes
	SizeSet     bool    // -s given (req_size)
	Iters       uint64  // -n, --iters (write_bw 5000, others 1000; >= 5)
	TxDepth     int     // -t, --tx-depth (BW 128, LAT 1)
	RxDepth     int     // -r, --rx-depth (send/write 512, read/atomic 1)
	QPTimeout   int     // -u, --qp-timeout (14)
	SL          int     // -S, --sl (0)
	GIDIndex    int     // -x, --gid-index (-1: none; 0 on Ethernet)
	Method      int32   // RunRegular; -a RunAll; --run_infinitely
	CPUFreq     bool    // -F, --CPU-freq: no cpufreq warning
	Conn        int32   // -c, --connection RC|UC|UD (RC)
	NumQPs      int     // -q, --qp (1; BW tests only)
	Events      bool    // -e, --events (not WRITE)
	InlineSize  int     // -I, --inline_size (-1: device default)
	OutReads    int     // -o, --outs (0: the device's max_qp_rd_atom)
	TOS         int     // -T, --tos (-1)
	HopLimit    int     // -L, --hop_limit (64)
	Duplex      bool    // -b, --bidirectional (BW tests)
	NoPeak      bool    // -N, --noPeak (BW tests)
	CQMod       int     // -Q, --cq-mod (100)
	CQModSet    bool    // -Q was given (its default depends on the test)
	AtomicType  int32   // -A, --atomic_type CMP_AND_SWAP|FETCH_AND_ADD (FETCH_AND_ADD)
	PostList    int     // -l, --post_list (1)
	TestType    int32   // Iterations; -D, --duration makes it Duration
	Duration    int     // -D seconds (5)
	Margin      int     // -f, --margin (-1)
	Cycles      bool    // -C, --report-cycles (LAT)
	Histogram   bool    // -H, --report-histogrm (LAT)
	Unsorted    bool    // -U, --report-unsorted (LAT)
	ReportFmt   int32   // ReportMiB; --report_gbits gives ReportGbits
	ReportBoth  bool    // --report-both
	WriteImm    bool    // --write_with_imm (write tests, 6.24+)
	UseSRQ      bool    // --use-srq (send tests)
	IPv6        bool    // --ipv6 / --ipv6-addr: TCP exchange over IPv6
	NoXchgVers  bool    // --dont_xchg_versions
	WarmUp      bool    // --perform_warm_up
	NoPCIeRO    bool    // --disable_pcie_relaxed
	OldPost     bool    // --use_old_post_send
	TClass      int     // --tclass
	Retry       int     // --retry_count (7)
	PKeyIndex   int     // --pkey_index
	Output      string  // --output bandwidth|message_rate|latency
	LimitBW     float64 // -w, --limit_bw: fail below this average (report units)
	LimitRate   float64 // -y, --limit_msgrate: fail below this message rate (Mpps)
	LatencyGap  int     // --latency_gap: microseconds between latency posts
	FlowLabel   int     // --flow_label: the GRH flow label
	WaitDestroy int     // --wait_destroy: seconds before tearing down
	Version     bool    // -V, --version
	Help        bool    // -h, --help
	// RDMACM is -R, --rdma_cm (work_rdma_cm): the QPs are connected
	// through the RDMA CM, and, as force_dependecies turns use_rdma_cm on
	// with it, the whole data exchange runs over an RDMA CM connection
	// instead of TCP (create_comm_struct, establish_connection).
	RDMACM bool

	// Device is -d: roced takes the local interface or IP address to use
	// (the real tool takes an IB device name). Empty: the interface that
	// routes to the peer, or loopback for a server with no peer yet.
	Device string
	// Link is goroce's --link (udp, afpacket or afxdp; default udp).
	Link Link
	// Claim is goroce's --perftest_version: the version roced claims as a
	// client, its ceiling as a server, and the output dialect.
	Claim Version
	// Pcap is goroce's --pcap: a pcap or pcapng file receiving every
	// RoCEv2 frame the run sends and receives.
	Pcap string
	// Faults are goroce's fault flags (--loss, --fault-rule...).
	Faults fault.Config
}

// IsServer reports whether this side waits for a client.
func (c *Config) IsServer() bool { return c.ServerName == "" }

// Role is the TCP role.
func (c *Config) Role() Role {
	if c.IsServer() {
		return Server
	}
	return Client
}

// Verb is the verb on the wire (WRITE becomes WRITE_IMM with
// --write_with_imm).
func (c *Config) Verb() int32 {
	if c.WriteImm {
		return VerbWriteImm
	}
	return c.Test.Verb()
}

// ErrUsage wraps command lines the tool rejects.
var ErrUsage = errors.New("usage")

// Defaults is init_perftest_params for t, plus goroce's defaults.
func Defaults(t Test) Config {
	c := Config{
		Test: t, Port: DefaultPort, IBPort: 1, Size: 2, Iters: 1000, TxDepth: 1,
		RxDepth: 1, QPTimeout: 14, GIDIndex: -1, NumQPs: 1, InlineSize: -1,
		TOS: -1, HopLimit: 64, CQMod: 100, Duration: 5, Margin: -1,
		ReportFmt: ReportMiB, PostList: 1, Retry: 7,
		Link: pingpong.LinkUDP, Claim: DefaultClientVersion,
	}
	if t.BW() {
		c.Size, c.TxDepth = 65536, 128
	}
	switch t.Verb() {
	case VerbSend, VerbWrite:
		c.RxDepth = 512
	case VerbAtomic:
		c.AtomicType, c.Size = FetchAndAdd, 8
	}
	if t == WriteBW {
		c.Iters = 5000
	}
	return c
}

func perftestOptions() []getopt.Option {
	req, no := getopt.RequiredArg, getopt.NoArg
	short := []struct {
		s    byte
		long string
		arg  getopt.ArgKind
	}{
		{'p', "port", req}, {'d', "ib-dev", req}, {'i', "ib-port", req}, {'m', "mtu", req},
		{'s', "size", req}, {'n', "iters", req}, {'t', "tx-depth", req}, {'u', "qp-timeout", req},
		{'S', "sl", req}, {'x', "gid-index", req}, {'a', "all", no}, {'F', "CPU-freq", no},
		{'c', "connection", req}, {'q', "qp", req}, {'e', "events", no}, {'I', "inline_size", req},
		{'o', "outs", req}, {'z', "comm_rdma_cm", no}, {'R', "rdma_cm", no}, {'T', "tos", req},
		{'L', "hop_limit", req}, {'h', "help", no}, {'r', "rx-depth", req}, {'b', "bidirectional", no},
		{'Q', "cq-mod", req}, {'N', "noPeak", no}, {'V', "version", no}, {'C', "report-cycles", no},
		{'H', "report-histogrm", no}, {'U', "report-unsorted", no}, {'A', "atomic_type", req},
		{'O', "dualport", no}, {'l', "post_list", req}, {'D', "duration", req}, {'f', "margin", req},
		{'g', "mcg", no}, {'M', "MGID", req}, {'w', "limit_bw", req}, {'y', "limit_msgrate", req},
	}
	var out []getopt.Option
	for _, o := range short {
		out = append(out, getopt.Option{Short: o.s, Long: o.long, Arg: o.arg})
	}
	for _, l := range []string{"report_gbits", "run_infinitely", "use-srq", "ipv6", "ipv6-addr",
		"dont_xchg_versions", "write_with_imm", "perform_warm_up", "report-both",
		"disable_pcie_relaxed", "use_old_post_send", "odp", "use_hugepages", "mr_per_qp",
		"cpu_util", "out_json", "report-per-port", "connectionless", "reversed"} {
		out = append(out, getopt.Option{Long: l, Arg: no})
	}
	for _, l := range []string{"tclass", "retry_count", "pkey_index", "output", "latency_gap",
		"flow_label", "bind_source_ip", "recv_post_list", "out_json_file", "wait_destroy",
		"link", "perftest_version", "pcap"} {
		out = append(out, getopt.Option{Long: l, Arg: req})
	}
	for _, l := range fault.Flags {
		out = append(out, getopt.Option{Long: l, Arg: req})
	}
	return out
}

// unsupported are options roced parses but whose machinery it does not
// have (RDMA CM, multicast, dual port, GPU memory...): refused up front
// rather than silently ignored.
var unsupported = map[string]string{
	"comm_rdma_cm": "RDMA CM data exchange without RDMA CM QPs (-z; -R has both)",
	"mcg":          "multicast (-g)", "MGID": "multicast (-M)", "dualport": "dual-port mode (-O)",
	"connectionless": "--connectionless", "reversed": "--reversed", "report-per-port": "--report-per-port",
	"odp": "on-demand paging (--odp)", "use_hugepages": "--use_hugepages", "mr_per_qp": "--mr_per_qp",
	"cpu_util": "--cpu_util", "out_json": "--out_json", "out_json_file": "--out_json_file",
	"bind_source_ip": "--bind_source_ip", "recv_post_list": "--recv_post_list",
}

// ParseFlags parses a perftest command line (without the program name).
// Errors the tool would report and exit on are returned; those it answers
// with its usage text wrap ErrUsage.
func ParseFlags(t Test, args []string) (Config, error) {
	c := Defaults(t)
	found, operands, err := getopt.Parse(args, perftestOptions())
	if err != nil {
		return c, fmt.Errorf("%s: %w: %w", t.Binary(), ErrUsage, err)
	}
	fail := func(format string, a ...any) (Config, error) {
		return c, fmt.Errorf("%s: "+format, append([]any{t.Binary()}, a...)...)
	}
	seen := map[string]bool{}
	verb := t.Verb()
	for _, m := range found {
		name := m.Option.Name()
		if seen[name] && name != "fault-rule" { // the one option meant to repeat
			return fail("Duplicated argument: %s", name)
		}
		seen[name] = true
		if what, ok := unsupported[name]; ok {
			return fail("%s is not supported by roced", what)
		}
		n, ok := getopt.Strtol(m.Value)
		num := func(lo, hi int64, what string) (int, error) {
			if m.HasValue && !ok {
				// perftest's words for the field, and the flag as typed,
				// which its words do not name.
				return 0, fmt.Errorf("%s: invalid %s %q (%s)", t.Binary(), what, m.Value, m.Spelling)
			}
			if n < lo || n > hi {
				return 0, fmt.Errorf("%s: %s should be between %d and %d", t.Binary(), what, lo, hi)
			}
			return int(n), nil
		}
		var e error
		switch name {
		case "port":
			c.Port, e = num(0, 65535, "Port")
		case "ib-dev":
			c.Device = m.Value
		case "ib-port":
			c.IBPort, e = num(1, 255, "IB Port")
		case "mtu":
			c.MTU, e = num(0, 1<<31-1, "MTU")
			if e == nil && MTUFromBytes(c.MTU) == 0 {
				e = fmt.Errorf("%s: Invalid MTU %d: 256, 512, 1024, 2048 or 4096", t.Binary(), c.MTU)
			}
		case "size":
			c.Size, e = parseSize(m.Value)
			c.SizeSet = true
		case "iters":
			var v int
			v, e = num(5, 1<<32, "Iteration num")
			c.Iters = uint64(v)
		case "tx-depth":
			c.TxDepth, e = num(1, 1<<15, "Tx depth")
		case "qp-timeout":
			c.QPTimeout, e = num(0, 255, "QP Timeout")
		case "sl":
			c.SL, e = num(0, 15, "Service Level")
		case "gid-index":
			c.GIDIndex, e = num(0, 255, "Gid index")
		case "all":
			c.Method = RunAll
		case "run_infinitely":
			c.Method = RunInfinitely
		case "CPU-freq":
			c.CPUFreq = true
		case "connection":
			c.Conn, e = parseConn(verb, m.Value)
		case "qp":
			if !t.BW() {
				return fail("Multiple QPs only available on bw tests")
			}
			c.NumQPs, e = num(1, 16384, "num of Qps")
		case "events":
			if verb == VerbWrite {
				return fail("Events feature not available on WRITE verb")
			}
			c.Events = true
		case "inline_size":
			if verb == VerbRead || verb == VerbAtomic {
				return fail("Inline feature not available on READ/Atomic verbs")
			}
			c.InlineSize, e = num(0, 912, "Max inline")
		case "outs":
			if verb != VerbRead && verb != VerbAtomic {
				return fail("Setting Outstanding reads only available on READ verb")
			}
			c.OutReads, e = num(-1<<31, 1<<31-1, "Outstanding Reads")
		case "tos":
			c.TOS, e = num(0, 256, "TOS")
		case "hop_limit":
			c.HopLimit, e = num(0, 255, "Hop Limit")
		case "rx-depth":
			c.RxDepth, e = num(1, 1<<15, "Rx depth")
			if e == nil && verb != VerbSend && verb != VerbWrite && c.RxDepth > 1 {
				return fail("On RDMA verbs rx depth can be only 1")
			}
		case "bidirectional":
			if !t.BW() {
				return fail("Bidirectional is only available in BW test")
			}
			c.Duplex = true
		case "noPeak":
			if !t.BW() {
				return fail("NoPeak only valid for BW tests")
			}
			c.NoPeak = true
		case "cq-mod":
			c.CQMod, e = num(1, 1024, "CQ moderation")
			c.CQModSet = true
		case "atomic_type":
			if verb != VerbAtomic {
				return fail("You are not running the atomic_lat/bw test!")
			}
			switch m.Value {
			case "CMP_AND_SWAP":
				c.AtomicType = CmpAndSwap
			case "FETCH_AND_ADD":
				c.AtomicType = FetchAndAdd
			default:
				return fail("Invalid Atomic type! please choose from {CMP_AND_SWAP,FETCH_AND_ADD}")
			}
		case "post_list":
			c.PostList, e = num(1, 1<<31-1, "Send Post List size")
		case "duration":
			c.Duration, e = num(1, 1<<31-1, "Duration period")
			c.TestType = Duration
		case "margin":
			c.Margin, e = num(0, 1<<31-1, "Margin")
		case "report-cycles", "report-histogrm", "report-unsorted":
			if t.BW() {
				return fail("Available only on Latency tests")
			}
			c.Cycles = c.Cycles || name == "report-cycles"
			c.Histogram = c.Histogram || name == "report-histogrm"
			c.Unsorted = c.Unsorted || name == "report-unsorted"
		case "report_gbits":
			c.ReportFmt = ReportGbits
		case "report-both":
			c.ReportBoth = true
		case "write_with_imm":
			if t != WriteBW && t != WriteLat {
				return fail("--write_with_imm is only for the write tests")
			}
			c.WriteImm = true
		case "use-srq":
			c.UseSRQ = true
		case "ipv6", "ipv6-addr":
			c.IPv6 = true
		case "dont_xchg_versions":
			c.NoXchgVers = true
		case "perform_warm_up":
			c.WarmUp = true
		case "disable_pcie_relaxed":
			c.NoPCIeRO = true
		case "use_old_post_send":
			c.OldPost = true
		case "tclass":
			c.TClass, e = num(0, 255, "tclass")
		case "retry_count":
			c.Retry, e = num(0, 7, "retry count")
		case "pkey_index":
			c.PKeyIndex, e = num(0, 65535, "pkey index")
		case "output":
			switch m.Value {
			case "bandwidth", "message_rate", "latency":
				c.Output = m.Value
			default:
				return fail("Invalid output type %q (bandwidth, message_rate or latency)", m.Value)
			}
		case "limit_bw", "limit_msgrate":
			f, err := strconv.ParseFloat(m.Value, 64)
			if err != nil || f < 0 {
				return fail("Invalid %s value %q (%s)", name, m.Value, m.Spelling)
			}
			if name == "limit_bw" {
				c.LimitBW = f
			} else {
				c.LimitRate = f
			}
		case "latency_gap":
			c.LatencyGap, e = num(0, 1<<31-1, "Latency gap")
		case "flow_label":
			c.FlowLabel, e = num(0, 1<<20-1, "Flow label")
		case "wait_destroy":
			c.WaitDestroy, e = num(0, 1<<31-1, "wait_destroy")
		case "rdma_cm":
			c.RDMACM = true
		case "version":
			c.Version = true
		case "help":
			c.Help = true
		case "link":
			var l pingpong.Link
			if l, e = pingpong.ParseLink(m.Value); e == nil {
				c.Link = l
			}
		case "pcap":
			c.Pcap = m.Value
		case "loss", "dup", "reorder", "corrupt", "delay", "seed", "fault-rule":
			if err := c.Faults.SetFlag(name, m.Value); err != nil {
				return fail("%v", err)
			}
		case "perftest_version":
			v := Version(m.Value)
			if _, e = v.Marshal(); e == nil && !v.atLeast(minPeer) {
				e = fmt.Errorf("--perftest_version %q: below 5.70", m.Value)
			}
			c.Claim = v
		}
		if e != nil {
			return c, e
		}
	}
	switch len(operands) {
	case 0:
	case 1:
		c.ServerName = operands[0]
	default:
		return c, fmt.Errorf("%s: %w: Invalid Command line. Please check command rerun", t.Binary(), ErrUsage)
	}
	if c.NoXchgVers {
		return fail("--dont_xchg_versions is not supported by roced: the version step decides the protocol")
	}
	// force_dependencies' post list rules that need no device.
	if c.PostList > 1 {
		if !t.BW() {
			return fail("Post list is supported in BW tests only")
		}
		if c.TestType == Iterations && c.Iters%uint64(c.PostList) != 0 {
			return fail("Number of iterations must be a multiple of post list size")
		}
		if c.CQModSet && c.PostList%c.CQMod != 0 {
			return fail("Post list size must be a multiple of CQ moderation")
		}
	}
	if c.RDMACM && c.Conn == ConnUC {
		// force_dependecies' -R rule: librdmacm has no UC. RC connects
		// through REQ/REP/RTU, UD through SIDR (the UDP port space).
		return fail("UC is not supported in librdmacm")
	}
	if c.TestType == Duration && c.Events {
		return fail("Duration mode doesn't work with events.")
	}
	if c.TestType == Duration && c.Method == RunAll {
		return fail("Duration mode currently doesn't support running on all sizes.")
	}
	if c.LatencyGap > 0 && t.BW() {
		return fail("Latency gap feature is only for latency tests")
	}
	return c, nil
}

// parseSize reads -s like the tool: strtol with base 0 and a K or M
// suffix, between 1 and UINT_MAX/2.
func parseSize(s string) (uint64, error) {
	factor := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		s, factor = s[:len(s)-1], 1024
	case strings.HasSuffix(s, "M"):
		s, factor = s[:len(s)-1], 1024*1024
	}
	v, ok := getopt.Strtol(s)
	if !ok {
		// strtol's 0 would be refused below in words that hide the typo.
		return 0, fmt.Errorf("invalid Message Size %q (-s)", s)
	}
	if v > (1<<32-1)/2 { // before the K/M factor, which could wrap it into range
		v = 0
	}
	v *= factor
	if v < 1 || v > (1<<32-1)/2 {
		return 0, fmt.Errorf("Message Size should be between 1 and %d", (1<<32-1)/2)
	}
	return uint64(v), nil
}

// parseConn is change_conn_type for the transports roced implements.
func parseConn(verb int32, s string) (int32, error) {
	switch s {
	case "RC":
		return ConnRC, nil
	case "UC":
		if verb == VerbRead || verb == VerbAtomic {
			return 0, errors.New("UC connection not possible in READ/ATOMIC verbs")
		}
		return ConnUC, nil
	case "UD":
		if verb != VerbSend {
			return 0, errors.New("UD connection only possible in SEND verb")
		}
		return ConnUD, nil
	case "XRC", "DC", "SRD", "RawEth":
		return 0, fmt.Errorf("connection type %s is not supported by roced", s)
	}
	return 0, errors.New("Invalid Connection type. Please choose from {RC,UC,UD,XRC,DC,SRD}")
}

// Resolve applies the tool's derived settings once the device is known:
// portMTU is the active MTU, maxReads the device's max_qp_rd_atom. It
// returns the notices the tool prints on stdout while doing so, in the
// order printed, for the dialect v (6.06 prints fewer).
func (c *Config) Resolve(portMTU MTU, maxReads int, v Version) []string {
	var notes []string
	verb := c.Verb()
	if verb == VerbWrite {
		c.RxDepth = 1
	}
	if c.Method != RunInfinitely && c.TestType == Iterations {
		c.TxDepth = min(c.TxDepth, int(c.Iters))
		if (verb == VerbSend || verb == VerbWriteImm) && c.RxDepth > int(c.Iters) {
			c.RxDepth = int(c.Iters)
		}
		if (c.Conn == ConnUD || c.Conn == ConnUC) && c.RxDepth == 512 {
			c.RxDepth = min(int(c.Iters), 16000)
		}
	}
	if c.Size > 8192 && c.Conn != ConnUD && c.Method != RunAll && !c.Events && !c.CQModSet {
		c.CQMod = 1
	}
	if c.PostList > 1 && !c.CQModSet {
		c.CQMod = c.PostList
		notes = append(notes, resultLine, "Post List requested - CQ moderation will be the size of the post list")
	}
	c.CQMod = min(c.CQMod, c.TxDepth)
	if verb == VerbRead || verb == VerbAtomic {
		c.InlineSize = 0
	}
	if c.Method == RunAll {
		c.Size = 8388608
	}
	if verb == VerbAtomic {
		c.Size = 8 // whatever -s or -a said: an atomic is one 64-bit word
	}
	if c.TestType == Duration {
		c.Iters = 0
		if !c.NoPeak && c.Test.BW() {
			notes = append(notes, " WARNING: BW peak won't be measured in this run.")
		}
		c.NoPeak = true
	}
	if (verb == VerbSend || verb == VerbWriteImm) && c.Test.BW() && c.IsServer() && !c.Duplex {
		if !c.NoPeak && v.atLeast(6.24) {
			notes = append(notes, " WARNING: BW peak won't be measured in this run.")
		}
		c.NoPeak = true
	}
	if (verb == VerbSend || verb == VerbWriteImm) && c.RxDepth%2 == 1 && c.Method == RunRegular {
		c.RxDepth++
	}
	// goroce is not a device perftest knows: inline is off, as on rxe.
	if c.InlineSize != -1 {
		notes = append(notes, resultLine)
	}
	c.InlineSize = 0
	if verb == VerbRead || verb == VerbAtomic {
		if c.OutReads <= 0 || c.OutReads > maxReads {
			c.OutReads = maxReads
		}
	} else {
		c.OutReads = 1
	}
	if c.GIDIndex == -1 {
		c.GIDIndex = 0 // Ethernet link layer
	}
	if portMTU == 0 {
		portMTU = 3
	}
	if c.MTU == 0 {
		c.MTU = portMTU.Bytes()
	}
	return notes
}

// ErrUDSize is check_mtu's refusal of a UD message larger than the
// negotiated MTU given with -s.
var ErrUDSize = errors.New("Max message size in UD cannot be greater than MTU")

// FitUD is check_mtu's UD rule, applied once both sides agreed on mtu: a
// UD message must fit one packet. A size the user did not ask for (the
// default, or -a) shrinks to the MTU with the two lines returned (the tools
// write them on stderr); an explicit -s above the MTU is ErrUDSize, on
// which the tools exit 1 after the MTU step. 6.06 and 6.24 alike.
func (c *Config) FitUD(mtu MTU) ([]string, error) {
	if c.Conn != ConnUD || c.Size <= uint64(mtu.Bytes()) {
		return nil, nil
	}
	if c.SizeSet && c.Method != RunAll {
		return nil, ErrUDSize
	}
	c.Size = uint64(mtu.Bytes())
	return []string{fmt.Sprintf(" Max msg size in UD is MTU %d", mtu.Bytes()), " Changing to this MTU"}, nil
}

// InlineNotice is the stderr line that goes with the dashed line Resolve
// returns for read/atomic tests ("Device not recognized...").
const InlineNotice = "Device not recognized to implement inline feature. Disabling it"

// Params is the negotiate_params struct this configuration sends.
func (c *Config) Params(attr DeviceAttr) Params {
	p := Params{
		TestMethod: c.Method, ConnectionType: c.Conn, Verb: c.Verb(), Tst: TstLat,
		TestType: c.TestType, ReportFmt: c.ReportFmt, Size: c.Size, Iters: c.Iters,
		NumQPs: int32(c.NumQPs), Duration: int32(c.Duration), Attr: attr,
	}
	if c.Test.BW() {
		p.Tst = TstBW
	}
	if c.Test.Verb() == VerbAtomic {
		p.AtomicType = c.AtomicType
	}
	if c.WriteImm {
		p.UseWriteWithImm = 1
	}
	if c.RDMACM {
		p.UseRDMACM = 1 // -R forces use_rdma_cm
	}
	return p
}

// Shape is the plan-relevant part of the configuration.
func (c *Config) Shape(mtu MTU) Shape {
	return Shape{
		Test: c.Test, Role: c.Role(), NumQPs: c.NumQPs, Method: c.Method, TestType: c.TestType,
		Duplex: c.Duplex, WriteImm: c.WriteImm, Conn: c.Conn, MTU: mtu, Size: c.Size,
		RDMACM: c.RDMACM,
	}
}
