package interop

import (
	"bufio"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// PingpongResult is what an rdma-core example prints after its loop
// (identically on both sides):
//
//	640 bytes in 0.01 seconds = 0.49 Mbit/sec
//	5 iters in 0.01 seconds = 2086.60 usec/iter
//
// and, with -c, one "invalid data in page N" line per page whose check
// byte is wrong (printed on stdout; the exit status stays 0, so the harness
// has to look for it).
type PingpongResult struct {
	Bytes       int64   // "N bytes in S seconds": N
	Iters       int64   // "in S seconds = M Mbit/sec\nN iters": N
	Seconds     float64 // the run's seconds
	Mbps        float64 // Mbit/sec
	UsecPerIter float64 // usec/iter
	// InvalidPages are the pages -c found wrong.
	InvalidPages []int
	// RemoteLines counts "remote address:" lines: one per QP whose record
	// arrived (srq prints one per QP).
	RemoteLines int
}

var (
	ppBytesRe   = regexp.MustCompile(`^(\d+) bytes in (\S+) seconds = (\S+) Mbit/sec$`)
	ppItersRe   = regexp.MustCompile(`^(\d+) iters in (\S+) seconds = (\S+) usec/iter$`)
	ppInvalidRe = regexp.MustCompile(`^invalid data in page (\d+)$`)
)

// ParsePingpong reads a pingpong's stdout. It fails when either result
// line is missing.
func ParsePingpong(stdout string) (PingpongResult, error) {
	var r PingpongResult
	var haveBytes, haveIters bool
	sc := bufio.NewScanner(strings.NewReader(stdout))
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		switch {
		case strings.HasPrefix(strings.TrimSpace(line), "remote address:"):
			r.RemoteLines++
		case ppBytesRe.MatchString(line):
			m := ppBytesRe.FindStringSubmatch(line)
			r.Bytes, _ = strconv.ParseInt(m[1], 10, 64)
			r.Seconds = parseNum(m[2])
			r.Mbps = parseNum(m[3])
			haveBytes = true
		case ppItersRe.MatchString(line):
			m := ppItersRe.FindStringSubmatch(line)
			r.Iters, _ = strconv.ParseInt(m[1], 10, 64)
			r.UsecPerIter = parseNum(m[3])
			haveIters = true
		case ppInvalidRe.MatchString(line):
			n, _ := strconv.Atoi(ppInvalidRe.FindStringSubmatch(line)[1])
			r.InvalidPages = append(r.InvalidPages, n)
		}
	}
	switch {
	case !haveBytes && !haveIters:
		return r, fmt.Errorf("no result lines (\"N bytes in T seconds\", \"N iters in T seconds\")")
	case !haveBytes:
		return r, fmt.Errorf("no \"N bytes in T seconds = X Mbit/sec\" line")
	case !haveIters:
		return r, fmt.Errorf("no \"N iters in T seconds = X usec/iter\" line")
	}
	return r, nil
}

// PerftestRow is the result row under perftest's " #bytes #iterations"
// header: a bandwidth row (BW peak, BW average, message rate) or a latency
// row (t_min, t_max, t_typical, t_avg, t_stdev, 99%, 99.9%).
type PerftestRow struct {
	Bytes int64 // #bytes
	Iters int64 // #iterations
	// Latency says which header the row was under.
	Latency bool
	// BWUnit is the bandwidth unit of the header: MB/sec (6.06), MiB/sec
	// (6.24+) or Gb/sec (--report_gbits).
	BWUnit                 string
	BWPeak, BWAvg, MsgRate float64 // a bandwidth row's BW peak, BW average, MsgRate[Mpps]
	TMin, TMax, TTypical   float64 // a latency row's t_min, t_max, t_typical [usec]
	TAvg, TStdev           float64 // t_avg, t_stdev [usec]
	P99, P999              float64 // 99% and 99.9% percentiles [usec]
}

// Figure is the row's headline number and unit: BW average or t_typical.
func (r PerftestRow) Figure() (float64, string) {
	if r.Latency {
		return r.TTypical, "usec t_typical"
	}
	return r.BWAvg, r.BWUnit + " BW average"
}

var bwUnitRe = regexp.MustCompile(`BW average\[([^\]]+)\]`)

// ParsePerftest finds the result row in a perftest tool's stdout. It
// returns ok false when there is no header (read_lat and atomic_lat
// servers print none) and an error when the header is there but the row
// under it is missing or malformed.
func ParsePerftest(stdout string) (row PerftestRow, ok bool, err error) {
	lines := strings.Split(strings.ReplaceAll(stdout, "\r", ""), "\n")
	for i, line := range lines {
		if !strings.Contains(line, "#bytes") || !strings.Contains(line, "#iterations") {
			continue
		}
		row.Latency = strings.Contains(line, "t_typical")
		if m := bwUnitRe.FindStringSubmatch(line); m != nil {
			row.BWUnit = m[1]
		} else if !row.Latency {
			return row, true, fmt.Errorf("result header is neither bandwidth nor latency: %q", strings.TrimSpace(line))
		}
		if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) == "" {
			return row, true, fmt.Errorf("result header without a row")
		}
		f := strings.Fields(lines[i+1])
		want := 5
		if row.Latency {
			want = 9
		}
		if len(f) != want {
			return row, true, fmt.Errorf("result row has %d fields, want %d: %q", len(f), want, strings.TrimSpace(lines[i+1]))
		}
		var perr error
		row.Bytes, perr = strconv.ParseInt(f[0], 10, 64)
		if perr != nil {
			return row, true, fmt.Errorf("result row #bytes %q", f[0])
		}
		row.Iters, perr = strconv.ParseInt(f[1], 10, 64)
		if perr != nil {
			return row, true, fmt.Errorf("result row #iterations %q", f[1])
		}
		v := make([]float64, len(f)-2)
		for j, s := range f[2:] {
			v[j] = parseNum(s)
			if math.IsNaN(v[j]) && !isNaNText(s) {
				return row, true, fmt.Errorf("result row field %d is not a number: %q", j+3, s)
			}
		}
		if row.Latency {
			row.TMin, row.TMax, row.TTypical, row.TAvg, row.TStdev, row.P99, row.P999 =
				v[0], v[1], v[2], v[3], v[4], v[5], v[6]
		} else {
			row.BWPeak, row.BWAvg, row.MsgRate = v[0], v[1], v[2]
		}
		return row, true, nil
	}
	return row, false, nil
}

// parseNum reads a number as C's printf writes it, including inf, -inf,
// nan and -nan (perftest prints those when its clock calibration fails,
// as it does under qemu TCG). Anything else is NaN.
func parseNum(s string) float64 {
	if isNaNText(s) {
		return math.NaN()
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

func isNaNText(s string) bool {
	return strings.EqualFold(strings.TrimLeft(s, "+-"), "nan")
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// CmatoseLines are the lines ucmatose prints on stdout for a run that
// ends with status 0 (cmatose.c's run_server, run_client and main): the
// server sends first, the client receives, then replies; count 0 (-C 0)
// skips the data phases.
func CmatoseLines(server bool, count int) []string {
	var l []string
	if server {
		l = append(l, "cmatose: starting server")
		if count > 0 {
			l = append(l, "initiating data transfers", "completing sends", "receiving data transfers", "data transfers complete")
		}
		l = append(l, "cmatose: disconnecting", "disconnected")
	} else {
		l = append(l, "cmatose: starting client", "cmatose: connecting")
		if count > 0 {
			l = append(l, "receiving data transfers", "sending replies", "data transfers complete")
		}
	}
	return append(l, "test complete", "return status 0")
}

// UdaddyLines are the lines udaddy prints on stdout for a run that ends
// with status 0 (udaddy.c's run_server, run_client and main): the client
// sends first, the server receives, then replies; count 0 (-C 0) skips
// the data phases.
func UdaddyLines(server bool, count int) []string {
	var l []string
	if server {
		l = append(l, "udaddy: starting server")
		if count > 0 {
			l = append(l, "receiving data transfers", "sending replies", "data transfers complete")
		}
	} else {
		l = append(l, "udaddy: starting client", "udaddy: connecting")
		if count > 0 {
			l = append(l, "initiating data transfers", "receiving data transfers", "data transfers complete")
		}
	}
	return append(l, "test complete", "return status 0")
}

// RpingMessage is the text of rping's ping number i at size -S, as rping.c
// fills its start buffer: "rdma-ping-%d: ", then the letters from 'A' + i
// (mod 58) on, cycling from 'A' to 'z', cut to size-1 bytes (the last byte
// is the C string's end). Both sides print it with -v: the client after
// the server WROTE it back, the server after it READ it.
func RpingMessage(i, size int) string {
	b := []byte(fmt.Sprintf("rdma-ping-%d: ", i))
	if len(b) > size-1 {
		return string(b[:max(size-1, 0)])
	}
	for c := byte('A' + i%58); len(b) < size-1; c++ {
		if c > 'z' {
			c = 'A'
		}
		b = append(b, c)
	}
	return string(b)
}

// RpingLines checks the ping lines of one rping side's stdout: prefix is
// "ping data: " (client) or "server ping data: " (server). It returns how
// many such lines there are and the first one that is not the ping it
// should be (in order: ping 0 first).
func RpingLines(stdout, prefix string, size int) (n int, bad string) {
	for _, l := range strings.Split(stdout, "\n") {
		msg, ok := strings.CutPrefix(l, prefix)
		if !ok {
			continue
		}
		if bad == "" && msg != RpingMessage(n, size) {
			bad = fmt.Sprintf("ping %d is %q, want %q", n, clip(msg), clip(RpingMessage(n, size)))
		}
		n++
	}
	return n, bad
}
