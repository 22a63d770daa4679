package interop

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/goroce/goroce/tools/cmtime"
)

// Figure is a number a case measured.
type Figure struct {
	Value float64 `json:"value"` // the number as the tool printed it
	Unit  string  `json:"unit"`  // its unit: "MiB/sec", "usec", "Mbit/sec"
	// Side is which side printed it: server or client.
	Side string `json:"side"`
}

// String formats the figure as the tool printed it, with its unit.
func (f Figure) String() string {
	// perftest prints the message rate with six decimals, everything else
	// with two; pings are counted.
	prec := 2
	switch f.Unit {
	case "Mpps":
		prec = 6
	case "pings": // a count
		prec = 0
	}
	return strconv.FormatFloat(f.Value, 'f', prec, 64) + " " + f.Unit
}

// MarshalJSON writes inf and nan as strings (JSON has no such numbers).
func (f Figure) MarshalJSON() ([]byte, error) {
	v := strconv.FormatFloat(f.Value, 'g', -1, 64)
	if !finite(f.Value) {
		v = strconv.Quote(v)
	}
	return []byte(fmt.Sprintf(`{"value":%s,"unit":%q,"side":%q}`, v, f.Unit, f.Side)), nil
}

// Verdict is the judgement on one case.
type Verdict struct {
	Pass bool // the case passed
	// Reasons say why it failed, one per fault found.
	Reasons []string
	// Notes are facts worth reporting that do not fail the case.
	Notes []string
	// Figures: the headline first (Mbit/s and usec/iter for pingpongs,
	// BW average or t_typical for perftest), from the client when it has
	// finite ones.
	Figures []Figure
}

// SideRun is one side's part in a case, as the judge sees it.
type SideRun struct {
	Role   string // "server" or "client"
	Who    string // the implementation (Side.Who)
	Strict bool   // its figures must be finite and consistent (Side.Strict)
	// Roced says the side ran roced's own tools, which time with the
	// monotonic clock and estimate no CPU frequency: perftest's clock
	// warning (ClockWarning) can never excuse their figures.
	Roced bool
	Out   Output // what the side left behind
	// RdmaCore is the side's Side.RdmaCore: the release whose exchange
	// the case speaks, where that changed (cmtime).
	RdmaCore string
}

// Judge decides a case from the exit statuses and the tools' own checks:
// both sides must exit 0 in time; a pingpong must print its two result
// lines with the right byte and iteration counts and no "invalid data"
// line from -c; a perftest side must print the result row it is expected
// to print, with the right #bytes and #iterations and, on the measuring
// side, a positive figure; an rping side must print (-v) every ping, each
// the text rping.c makes of it, and the client's -V must find no mismatch.
func Judge(sc Scenario, server, client SideRun) Verdict {
	var v Verdict
	judged := 0
	figs := map[string][]Figure{}
	for _, s := range []SideRun{server, client} {
		if s.Out.NotCaptured {
			v.Notes = append(v.Notes, s.Role+" ("+s.Who+") was run by hand: its output is not checked")
			continue
		}
		judged++
		if sc.Tool.Exchange == CmtimeConnects && s.Role == "server" && cmtimeRelease(server, client) == cmtime.V44 &&
			s.Out.Stopped && s.Out.StartErr == "" && !s.Out.TimedOut {
			// 44's server runs until killed; the harness stopped it once
			// its client was done, as it should. It prints nothing.
			reasons, f := judgeCmtime(sc, s, cmtime.V44)
			v.Reasons = append(v.Reasons, reasons...)
			figs[s.Role] = f
			continue
		}
		if sc.Tool.Family == CM && sc.Tool.Exchange == RpingLoop && s.Who != "roced" && rpingTeardownRace(s) {
			v.Notes = append(v.Notes, s.Role+" ("+s.Who+") exited 255 after its DISCONNECT EVENT with \"rdma_get_cm_event: Bad file descriptor\": rping's own teardown race (its CM thread reading the event channel its main thread destroyed; interop/README.md, \"RDMA CM\"), judged as exit 0")
			s.Out.Exit = 0
		}
		if r := judgeExit(s); len(r) > 0 {
			// A side that failed or was killed has no results; listing
			// every missing line would only bury the real reason.
			v.Reasons = append(v.Reasons, r...)
			continue
		}
		var reasons, notes []string
		var f []Figure
		switch sc.Tool.Family {
		case Pingpong:
			reasons, f = judgePingpong(sc, s)
		case CM:
			switch sc.Tool.Exchange {
			case ExampleSends:
				reasons, f = judgeExample(sc, s)
			case CmatoseSends:
				reasons, f = judgeCmatose(sc, s)
			case UdaddySends:
				reasons, f = judgeUdaddy(sc, s)
			case CmtimeConnects:
				reasons, f = judgeCmtime(sc, s, cmtimeRelease(server, client))
			default:
				reasons, f = judgeRping(sc, s)
			}
		default:
			reasons, notes, f = judgePerftest(sc, s)
		}
		v.Reasons = append(v.Reasons, reasons...)
		v.Notes = append(v.Notes, notes...)
		figs[s.Role] = f
	}
	if judged == 0 {
		v.Reasons = append(v.Reasons, "neither side's output was captured")
	}
	v.Figures = pickFigures(figs["client"], figs["server"])
	v.Pass = len(v.Reasons) == 0
	return v
}

const stoppedReason = "was stopped by the harness: still running when the case was over"

// RpingTeardownRace is rpingTeardownRace for a real rping in role
// ("server" or "client") that exited with exit and wrote stderr, for the
// tests that run rping outside a case: they judge it as the matrix does.
func RpingTeardownRace(role string, exit int, stderr string) bool {
	return rpingTeardownRace(SideRun{Role: role, Out: Output{Exit: exit, Stderr: stderr}})
}

// rpingTeardownRace reports whether a real rping ended in its own
// teardown race: after "DISCONNECT EVENT..." (the connection was over),
// its CM thread's rdma_get_cm_event on the event channel the main thread
// had destroyed failed with EBADF, and it exited(-1) before main's exit(0)
// (rdma-core's rping.c, cm_thread). Nothing else may be on stderr but,
// on a server, the line its ping loop prints when it ends on the
// disconnect ("wait for RDMA_READ_ADV state 10", DISCONNECTED: every
// server run ends so).
func rpingTeardownRace(s SideRun) bool {
	o := s.Out
	if o.Exit != 255 || o.TimedOut || o.Stopped || o.StartErr != "" {
		return false
	}
	lines := strings.Split(strings.TrimSpace(o.Stderr), "\n")
	if s.Role == "server" && len(lines) == 3 && lines[1] == "wait for RDMA_READ_ADV state 10" {
		lines = []string{lines[0], lines[2]}
	}
	return len(lines) == 2 && lines[0] == s.Role+" DISCONNECT EVENT..." && lines[1] == "rdma_get_cm_event: Bad file descriptor"
}

func judgeExit(s SideRun) []string {
	o := s.Out
	tag := s.Role + " (" + s.Who + ")"
	switch {
	case o.StartErr != "":
		return []string{tag + " did not run: " + o.StartErr}
	case o.TimedOut:
		return []string{fmt.Sprintf("%s timed out after %.0fs%s", tag, o.Seconds, stderrHint(o.Stderr))}
	case o.Stopped:
		return []string{tag + " " + stoppedReason}
	case o.Exit != 0:
		return []string{fmt.Sprintf("%s exit status %d%s", tag, o.Exit, stderrHint(o.Stderr))}
	}
	return nil
}

// stderrHint is the first non-empty stderr line, and the last one too when
// there are more (the first usually names the cause: "unknown command",
// "Failed status ...", a record error; the last what the tool gave up on),
// as a ": why" suffix.
func stderrHint(s string) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, clip(l))
		}
	}
	switch len(lines) {
	case 0:
		return ""
	case 1:
		return ": " + lines[0]
	}
	return ": " + lines[0] + " ... " + lines[len(lines)-1]
}

func clip(s string) string {
	const max = 160
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}

func judgePingpong(sc Scenario, s SideRun) (reasons []string, figs []Figure) {
	tag := s.Role + " (" + s.Who + ")"
	r, err := ParsePingpong(s.Out.Stdout)
	if err != nil {
		return []string{tag + ": " + err.Error()}, nil
	}
	if want := int64(sc.Size) * int64(sc.Iters) * 2; r.Bytes != want {
		reasons = append(reasons, fmt.Sprintf("%s: %d bytes, want %d (size %d x %d iters x 2)", tag, r.Bytes, want, sc.Size, sc.Iters))
	}
	if r.Iters != int64(sc.Iters) {
		reasons = append(reasons, fmt.Sprintf("%s: %d iters, want %d", tag, r.Iters, sc.Iters))
	}
	if len(r.InvalidPages) > 0 {
		reasons = append(reasons, fmt.Sprintf("%s: data check (-c) failed: invalid data in page(s) %v", tag, r.InvalidPages))
	}
	if r.RemoteLines == 0 {
		reasons = append(reasons, tag+": no \"remote address:\" line")
	}
	// A short run of 1-byte messages rightly prints 0.00 Mbit/sec; the
	// time per iteration is what must be there.
	if s.Strict && !(finite(r.Mbps) && r.Mbps >= 0 && finite(r.UsecPerIter) && r.UsecPerIter > 0) {
		reasons = append(reasons, fmt.Sprintf("%s: figures not finite and positive: %v Mbit/sec, %v usec/iter", tag, r.Mbps, r.UsecPerIter))
	} else if finite(r.Mbps) && finite(r.UsecPerIter) && r.UsecPerIter > 0 && r.Iters > 0 {
		// Both figures come from one measured time, so they agree within
		// printf's rounding (%.2f).
		want := float64(r.Bytes) * 8 / (r.UsecPerIter * float64(r.Iters))
		if math.Abs(r.Mbps-want) > 0.006+want*0.01 {
			reasons = append(reasons, fmt.Sprintf("%s: %v Mbit/sec disagrees with %d bytes at %v usec/iter x %d (%.2f Mbit/sec)",
				tag, r.Mbps, r.Bytes, r.UsecPerIter, r.Iters, want))
		}
	}
	figs = []Figure{{Value: r.Mbps, Unit: "Mbit/s", Side: s.Role}, {Value: r.UsecPerIter, Unit: "usec/iter", Side: s.Role}}
	return reasons, figs
}

// judgeExample checks one side of librdmacm's rdma_server/rdma_client
// example: its stdout is exactly "NAME: start" and "NAME: end 0". The
// examples check nothing else (they do not look at a completion's
// status), so the exit status and these lines are all they tell.
func judgeExample(sc Scenario, s SideRun) (reasons []string, figs []Figure) {
	name := sc.Tool.Command(s.Role == "server", false)
	want := name + ": start\n" + name + ": end 0\n"
	if got := strings.ReplaceAll(s.Out.Stdout, "\r\n", "\n"); got != want {
		reasons = append(reasons, fmt.Sprintf("%s (%s): stdout %q, want %q", s.Role, s.Who, got, want))
	}
	return reasons, []Figure{{Value: 1, Unit: "exchange", Side: s.Role}}
}

// judgeCmatose checks one ucmatose side: its stdout is exactly the lines
// cmatose prints for a run that moved every message and ended with status
// 0 (CmatoseLines). cmatose counts completions without looking at their
// status, so these lines and the exit status are what it tells.
func judgeCmatose(sc Scenario, s SideRun) (reasons []string, figs []Figure) {
	return judgeLines(sc, s, CmatoseLines(s.Role == "server", sc.Iters), "connections")
}

// judgeUdaddy checks one udaddy side as judgeCmatose checks a ucmatose
// one, on udaddy's lines (UdaddyLines); the figure is -c, the UD services
// resolved.
func judgeUdaddy(sc Scenario, s SideRun) (reasons []string, figs []Figure) {
	return judgeLines(sc, s, UdaddyLines(s.Role == "server", sc.Iters), "services")
}

// judgeLines checks that a side's stdout is exactly lines; its figure is
// the scenario's -c, in unit.
func judgeLines(sc Scenario, s SideRun, lines []string, unit string) (reasons []string, figs []Figure) {
	want := strings.Join(lines, "\n") + "\n"
	if got := strings.ReplaceAll(s.Out.Stdout, "\r\n", "\n"); got != want {
		reasons = append(reasons, fmt.Sprintf("%s (%s): stdout %q, want %q", s.Role, s.Who, got, want))
	}
	return reasons, []Figure{{Value: float64(cmatoseConns(sc.Flags)), Unit: unit, Side: s.Role}}
}

// cmtimeRelease is the cmtime the case speaks: 44's where either side
// says so (the lab's bookworm guest), else 56's.
func cmtimeRelease(server, client SideRun) cmtime.Version {
	if server.RdmaCore == "44" || client.RdmaCore == "44" {
		return cmtime.V44
	}
	return cmtime.V56
}

// judgeCmtime checks one cmtime side: its stdout, with the figures of its
// tables set aside, is exactly what cmtime of release v prints for its
// role (a client given -b binds): 56's rounds and two tables, 44's
// client's steps and table, nothing from 44's server. The client's
// figure is its connections per second (the QP test's cm connect step,
// or 44's connect), the server's the connections made.
func judgeCmtime(sc Scenario, s SideRun, v cmtime.Version) (reasons []string, figs []Figure) {
	n := flagInt(sc.Flags, "-c", cmtime.DefaultConnections)
	want := cmtime.WantSkeleton(v, s.Role == "server", n, slices.Contains(s.Out.Argv, "-b"))
	if got := cmtime.Skeleton(s.Out.Stdout); got != want {
		reasons = append(reasons, fmt.Sprintf("%s (%s): stdout %q, want the lines %q (figures as #)", s.Role, s.Who, s.Out.Stdout, want))
	}
	if s.Role == "client" {
		if rate, ok := cmtime.ConnectRate(s.Out.Stdout, n); ok {
			return reasons, []Figure{{Value: rate, Unit: "conn/s", Side: s.Role}}
		}
	}
	return reasons, []Figure{{Value: float64(n), Unit: "connections", Side: s.Role}}
}

// cmatoseConns is a scenario's -c.
func cmatoseConns(flags []string) int { return flagInt(flags, "-c", 1) }

// flagInt is the value of a scenario's flag name, def where not given.
func flagInt(flags []string, name string, def int) int {
	n := def
	for i := 0; i+1 < len(flags); i++ {
		if flags[i] == name {
			n, _ = strconv.Atoi(flags[i+1])
		}
	}
	return n
}

// judgeRping checks one rping side: -C ping lines, each ping's text in
// order (RpingMessage), and no "data mismatch" from the client's -V (rping
// also exits non-zero then, which judgeExit has already reported). The
// figure is the pings counted. "DISCONNECT EVENT..." is not required: a
// real rping client prints it only when the DREP's event beats its own
// teardown (interop/README.md, "RDMA CM").
func judgeRping(sc Scenario, s SideRun) (reasons []string, figs []Figure) {
	tag := s.Role + " (" + s.Who + ")"
	prefix := "ping data: "
	if s.Role == "server" {
		prefix = "server ping data: "
	}
	n, bad := RpingLines(s.Out.Stdout, prefix, sc.Size)
	if n != sc.Iters {
		reasons = append(reasons, fmt.Sprintf("%s: %d %q lines, want %d (-C %d)", tag, n, strings.TrimSpace(prefix), sc.Iters, sc.Iters))
	}
	if bad != "" {
		reasons = append(reasons, tag+": "+bad)
	}
	if strings.Contains(s.Out.Stderr, "data mismatch") {
		reasons = append(reasons, tag+": -V found a data mismatch")
	}
	return reasons, []Figure{{Value: float64(n), Unit: "pings", Side: s.Role}}
}

func judgePerftest(sc Scenario, s SideRun) (reasons, notes []string, figs []Figure) {
	tag := s.Role + " (" + s.Who + ")"
	want := sc.Tool.ClientRow
	if s.Role == "server" && !sc.Bidir() { // with -b both sides measure
		want = sc.Tool.ServerRow
	}
	row, ok, err := ParsePerftest(s.Out.Stdout)
	if err != nil {
		return []string{tag + ": " + err.Error()}, nil, nil
	}
	// With -R, the banner must say the exchange went over the RDMA CM: a
	// side that ignored -R and used TCP would otherwise pass.
	if sc.ViaCM() && !rdmaCMBanner(s.Out.Stdout) {
		reasons = append(reasons, tag+": no \" Data ex. method : rdma_cm\" line: the run did not go through the RDMA CM")
	}
	// With -b, the title must say so: a side that ignored -b would
	// otherwise pass on the other side's traffic alone.
	if sc.Bidir() && !bidirBanner(s.Out.Stdout) {
		reasons = append(reasons, tag+": no \"Bidirectional\" in the test's title: the side did not run -b")
	}
	if !ok {
		if want != NoRow {
			return append(reasons, tag+": no result row (\" #bytes #iterations ...\" header and its row)"), nil, nil
		}
		return reasons, nil, nil
	}
	if row.Latency != sc.Tool.Latency {
		kind := map[bool]string{true: "latency", false: "bandwidth"}
		reasons = append(reasons, fmt.Sprintf("%s: a %s row, want %s", tag, kind[row.Latency], kind[sc.Tool.Latency]))
	}
	size := int64(sc.Size)
	if sc.Tool.Atomic {
		size = AtomicSize
	}
	if row.Bytes != size {
		reasons = append(reasons, fmt.Sprintf("%s: #bytes %d, want %d", tag, row.Bytes, size))
	}
	if row.Iters != int64(sc.Iters) {
		reasons = append(reasons, fmt.Sprintf("%s: #iterations %d, want %d", tag, row.Iters, sc.Iters))
	}
	if want != FullRow {
		return reasons, nil, nil
	}
	val, unit := row.Figure()
	// The measured quantity: t_typical, or the message rate (printed with
	// six decimals, where a bandwidth of 1-byte messages rounds to 0.00).
	measured, what := val, unit
	if !row.Latency {
		measured, what = row.MsgRate, "MsgRate[Mpps]"
	}
	if !finite(measured) || measured <= 0 {
		if warn := ClockWarning(s.Out); s.Strict && !s.Roced && warn != "" && len(reasons) == 0 && clockless(row) {
			// A real perftest (over libgoroce) whose own CPU-frequency
			// estimate failed under load: it printed so and divided by a
			// zero MHz. The row's counts and the exit status, checked
			// above, prove the run; the figure says nothing about goroce.
			notes = append(notes, fmt.Sprintf("%s prints %s %v: perftest's own CPU-frequency estimate failed (%q); the row's counts are right", tag, what, measured, warn))
		} else if s.Strict {
			reasons = append(reasons, fmt.Sprintf("%s: %s is %v, want a positive number", tag, what, measured))
		} else {
			// The reference tool's clock under TCG (perftest 6.06 prints
			// inf, -nan or zeros there); the counts above prove the run.
			notes = append(notes, fmt.Sprintf("%s prints %s %v (its clock under emulation)", tag, what, measured))
		}
	} else if s.Strict {
		reasons = append(reasons, rowConsistency(tag, row, size)...)
	}
	figs = []Figure{{Value: val, Unit: unit, Side: s.Role}}
	if !row.Latency {
		figs = append(figs, Figure{Value: row.MsgRate, Unit: "Mpps", Side: s.Role})
	}
	return reasons, notes, figs
}

// clockWarningRe is the line perftest prints (get_clock.c's
// sample_get_cpu_mhz, on stderr) when its linear fit of cycles against
// time is too poor to trust: it then takes the CPU's MHz as 0, and every
// figure it derives from cycles comes out inf (latency) or 0 (bandwidth).
var clockWarningRe = regexp.MustCompile(`^Correlation coefficient r\^2: (\S+) < 0\.9$`)

// ClockWarning is perftest's "Correlation coefficient r^2: X < 0.9" line
// in a side's output (stderr, or stdout where the two were captured as
// one), "" when the tool printed none or X is not below 0.9.
func ClockWarning(o Output) string {
	for _, l := range strings.Split(o.Stderr+"\n"+o.Stdout, "\n") {
		l = strings.TrimSpace(l)
		m := clockWarningRe.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if r2, err := strconv.ParseFloat(m[1], 64); err == nil && r2 < 0.9 {
			return l
		}
	}
	return ""
}

// clockless reports whether a row has the shape perftest gives it with a
// CPU frequency of 0: a latency row whose t_typical is not finite, a
// bandwidth row whose BW peak, BW average and message rate are all 0. A
// row with any real figure did not come from the failed estimate.
func clockless(row PerftestRow) bool {
	if row.Latency {
		return !finite(row.TTypical) && !finite(row.TMin) && !finite(row.TAvg)
	}
	return row.BWPeak == 0 && row.BWAvg == 0 && row.MsgRate == 0
}

// bidirBanner reports whether perftest's title line says the test is
// bidirectional ("RDMA_Write Bidirectional BW Test").
func bidirBanner(stdout string) bool {
	for _, l := range strings.Split(stdout, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[len(f)-1] == "Test" && slices.Contains(f, "Bidirectional") {
			return true
		}
	}
	return false
}

// rdmaCMBanner reports whether perftest's banner names rdma_cm as the data
// exchange method (" Data ex. method : rdma_cm", spaces as printed).
func rdmaCMBanner(stdout string) bool {
	for _, l := range strings.Split(stdout, "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "Data ex. method" && strings.TrimSpace(v) == "rdma_cm" {
			return true
		}
	}
	return false
}

// rowConsistency checks that a row's figures agree with each other as
// perftest computes them: t_min <= t_typical <= t_max; BW average =
// MsgRate x size (perftest's MB/sec, like its MiB/sec, is 2^20 bytes).
func rowConsistency(tag string, row PerftestRow, size int64) []string {
	if row.Latency {
		if !(row.TMin <= row.TTypical && row.TTypical <= row.TMax) {
			return []string{fmt.Sprintf("%s: t_typical %v outside [t_min %v, t_max %v]", tag, row.TTypical, row.TMin, row.TMax)}
		}
		return nil
	}
	if row.BWUnit != "MB/sec" && row.BWUnit != "MiB/sec" {
		return nil
	}
	want := row.MsgRate * 1e6 * float64(size) / (1 << 20)
	// Both figures are printed rounded: BW to 0.01, MsgRate to 1e-6 Mpps,
	// which at a slow rate is several percent (an impaired 64 KiB run:
	// 0.000036 Mpps stands for anything from 2.22 to 2.28 MiB/sec).
	rounding := 0.005 + 0.5e-6*1e6*float64(size)/(1<<20)
	if math.Abs(row.BWAvg-want) > rounding+0.001+want*0.01 {
		return []string{fmt.Sprintf("%s: BW average %v %s disagrees with MsgRate %v Mpps x %d bytes (%.2f)",
			tag, row.BWAvg, row.BWUnit, row.MsgRate, size, want)}
	}
	if row.BWPeak < 0 {
		return []string{fmt.Sprintf("%s: BW peak %v is negative", tag, row.BWPeak)}
	}
	return nil
}

// pickFigures prefers the client's figures (the measuring side) and falls
// back to the server's when the client's are missing or not finite.
func pickFigures(client, server []Figure) []Figure {
	ok := func(f []Figure) bool { return len(f) > 0 && finite(f[0].Value) }
	switch {
	case ok(client):
		return client
	case ok(server):
		return server
	case len(client) > 0:
		return client
	}
	return server
}

// FigureText is the figures as one table cell.
func FigureText(f []Figure) string {
	var s []string
	for _, x := range f {
		if finite(x.Value) {
			s = append(s, x.String())
		} else {
			s = append(s, fmt.Sprint(math.Round(x.Value*100)/100)+" "+x.Unit)
		}
	}
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ", ") + " (" + f[0].Side + ")"
}
