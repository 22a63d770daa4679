package interop

import (
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The guest bench (interop -peer lab-guestbench) measures goroce against
// itself beside rxe against itself, on the same veth pair inside the same
// lab guest: ib_write_bw and ib_send_lat between rxeA and rxeB, then, with
// rxe unloaded so that UDP port 4791 is free, a static roced's write_bw and
// send_lat between the veths' two addresses with the same flags. Both run
// on the guest's vCPUs, so the comparison is like for like whatever the
// emulation costs.

// BenchTest is one measurement of the guest bench: a perftest tool at a
// message size, run by each pair with the same flags.
type BenchTest struct {
	Tool  string // roced's command: write_bw, send_lat
	Size  int    // -s
	Iters int    // -n before -iters-scale: perftest's own default for the tool
}

// GuestBenchTests are the sizes that matter: 64 KiB bandwidth (the
// README's roced write_bw rows, perftest's defaults), and the latency of
// the smallest message (2 B, ib_send_lat's default) and of a 64 B one.
var GuestBenchTests = []BenchTest{
	{Tool: "write_bw", Size: 64 << 10, Iters: 5000},
	{Tool: "send_lat", Size: 2, Iters: 1000},
	{Tool: "send_lat", Size: 64, Iters: 1000},
}

// Name is TOOL/sSIZE.
func (t BenchTest) Name() string { return fmt.Sprintf("%s/s%d", t.Tool, t.Size) }

// Case is the test as a matrix case on RC at mtu: the server on the
// peer's Ref side (rxeB, or roced on vethB), the client on its Subject.
func (t BenchTest) Case(mtu int, scale float64) (Case, error) {
	tool, ok := ToolByName(t.Tool)
	if !ok || tool.Family != Perftest || tool.Atomic {
		return Case{}, fmt.Errorf("bench test %s: not a perftest tool with a size", t.Name())
	}
	n := t.Iters
	if scale > 0 {
		n = max(int(math.Round(float64(n)*scale)), 5) // perftest's minimum
	}
	// -u: the lab matrix's ACK timeout on both sides. rxe takes retry_cnt
	// 7 as infinite, roced as seven retries, and the TCG guest's vCPUs
	// stall for longer than the tools' 67 ms under load (LabQPTimeout):
	// without it roced's send_lat ended now and then with status 12.
	flags := []string{"-u", strconv.Itoa(LabQPTimeout)}
	return Case{Scenario: Scenario{Tool: tool, Transport: RC, Size: t.Size, Iters: n, MTU: mtu, Flags: flags}, Dir: PeerServer}, nil
}

// The bench's pairs, as they are called in its table and JSON.
const (
	BenchRxe         = "rxe"
	BenchRoced       = "roced"
	BenchRocedOneCPU = "roced GOMAXPROCS=1"
)

// BenchRun is one pair's run of a test in one round.
type BenchRun struct {
	// Value is the client's headline figure: BW average in MiB/s (2^20
	// bytes; what perftest 6.06 calls MB/sec), or t_typical in usec.
	// Missing when the run failed or the tool printed inf or nan.
	Value *float64 `json:"value,omitempty"`
	// Printed is the figure as the tool printed it ("18.70", "-nan").
	Printed string `json:"printed,omitempty"`
	// P99 is a latency run's 99% percentile in usec.
	P99 *float64 `json:"p99_usec,omitempty"`
	// VethBytes is what vethB received during the run (the A-to-B
	// direction, where the client's messages go): at least size x iters
	// proves the traffic crossed the veth.
	VethBytes int64    `json:"vethB_rx_bytes"`
	Errors    []string `json:"errors,omitempty"`      // why the run has no figure, or is suspect
	Client    []string `json:"client_argv,omitempty"` // the client's command line
	Dir       string   `json:"artifacts,omitempty"`   // the run's outputs
}

// BenchRow is one test run by every pair.
type BenchRow struct {
	Test    string `json:"test"`    // BenchTest.Name
	Tool    string `json:"tool"`    // roced's command
	Size    int    `json:"size"`    // -s
	Iters   int    `json:"iters"`   // -n, scaled
	Latency bool   `json:"latency"` // a latency test (t_typical), else bandwidth
	// Unit of every Value: "MiB/s" or "usec".
	Unit string `json:"unit"`
	// Runs by pair (BenchRxe, BenchRoced, BenchRocedOneCPU), one per round.
	Runs map[string][]*BenchRun `json:"runs"`
}

// Figure is the median of pair's figures over the rounds that gave one.
func (r *BenchRow) Figure(pair string) (float64, bool) {
	return median(r.Runs[pair], func(b *BenchRun) *float64 { return b.Value })
}

// median is the median of the runs' non-nil values of f.
func median(runs []*BenchRun, f func(*BenchRun) *float64) (float64, bool) {
	var v []float64
	for _, b := range runs {
		if x := f(b); x != nil {
			v = append(v, *x)
		}
	}
	if len(v) == 0 {
		return 0, false
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2], true
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2, true
}

// Ratio is how many times as fast pair is as rxe: bandwidth over rxe's,
// or rxe's latency over the pair's (medians). 1 or more: at least as
// fast. ok false when either figure is missing.
func (r *BenchRow) Ratio(pair string) (float64, bool) {
	a, ok1 := r.Figure(BenchRxe)
	b, ok2 := r.Figure(pair)
	if !ok1 || !ok2 || a <= 0 || b <= 0 {
		return 0, false
	}
	if r.Latency {
		return a / b, true
	}
	return b / a, true
}

// BenchFigure reads a perftest client's stdout: the BW average in MiB/s
// or t_typical in usec (latency), as printed, and a latency's 99%
// percentile. value is nil when the tool printed inf or nan.
func BenchFigure(stdout string, latency bool) (value, p99 *float64, printed string, err error) {
	row, ok, err := ParsePerftest(stdout)
	switch {
	case err != nil:
		return nil, nil, "", err
	case !ok:
		return nil, nil, "", errors.New("no result row")
	case row.Latency != latency:
		return nil, nil, "", fmt.Errorf("a %s row where a %s row was expected", kind(row.Latency), kind(latency))
	}
	v := row.BWAvg
	if latency {
		v = row.TTypical
		if finite(row.P99) {
			p99 = &row.P99
		}
	} else {
		// perftest's MB is 2^20 bytes: 6.06 prints MB/sec, 6.24 on
		// MiB/sec for the same number.
		switch row.BWUnit {
		case "MB/sec", "MiB/sec":
		default:
			return nil, nil, "", fmt.Errorf("bandwidth in %s: the bench compares MiB/s (no --report_gbits)", row.BWUnit)
		}
	}
	printed = formatFigure(v)
	if finite(v) {
		value = &v
	}
	return value, p99, printed, nil
}

// benchUnit is the unit of a row's figures.
func benchUnit(latency bool) string {
	if latency {
		return "usec"
	}
	return "MiB/s"
}

func kind(latency bool) string {
	if latency {
		return "latency"
	}
	return "bandwidth"
}

func formatFigure(v float64) string {
	if !finite(v) {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// GuestBenchReport is a whole bench run on one guest.
type GuestBenchReport struct {
	Suite   string            `json:"suite"`          // the guest's Debian suite
	Info    map[string]string `json:"info,omitempty"` // the guest's kernel and package versions (Lab.Info)
	Started time.Time         `json:"started"`        // when the run began
	Seconds float64           `json:"seconds"`        // how long it took
	// HostLoad and GuestLoad are /proc/loadavg's first three fields at
	// the start and at the end of the run.
	HostLoad  [2]string `json:"host_load"`
	GuestLoad [2]string `json:"guest_load"` // see HostLoad
	// Rounds is how many times each pair ran every test.
	Rounds int `json:"rounds"`
	// RocedEnv is what every roced command had in its environment
	// (GuestBenchOptions.RocedEnv).
	RocedEnv []string `json:"roced_env,omitempty"`
	// RocedLink is every roced's --link (GuestBenchOptions.Link; empty:
	// its default, udp).
	RocedLink string      `json:"roced_link,omitempty"`
	Rows      []*BenchRow `json:"rows"` // one per test
}

// BenchPairs are the pairs of the table's columns, in order.
var BenchPairs = []string{BenchRxe, BenchRoced, BenchRocedOneCPU}

// OK reports whether every pair gave every test a figure.
func (r *GuestBenchReport) OK() bool {
	for _, row := range r.Rows {
		for _, p := range BenchPairs {
			if len(row.Runs[p]) == 0 {
				return false
			}
			for _, run := range row.Runs[p] {
				if run.Value == nil || len(run.Errors) > 0 {
					return false
				}
			}
		}
	}
	return len(r.Rows) > 0
}

// WriteTable prints the report as a Markdown table, one row per test,
// then the load and every run's errors.
func (r *GuestBenchReport) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "guest %s (kernel %s, perftest %s), %s; host load %s -> %s, guest load %s -> %s\n\n",
		r.Suite, orDash(r.Info["guest_kernel"]), orDash(r.Info["perftest"]), r.Started.UTC().Format("2006-01-02 15:04 MST"),
		orDash(r.HostLoad[0]), orDash(r.HostLoad[1]), orDash(r.GuestLoad[0]), orDash(r.GuestLoad[1]))
	if len(r.RocedEnv) > 0 || r.RocedLink != "" {
		with := r.RocedEnv
		if r.RocedLink != "" {
			with = append(with[:len(with):len(with)], "--link "+r.RocedLink)
		}
		fmt.Fprintf(w, "every roced with %s\n\n", strings.Join(with, " "))
	}
	fmt.Fprintln(w, "| test | size | iters | rxe | roced | roced GOMAXPROCS=1 | roced / rxe | roced GOMAXPROCS=1 / rxe |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, row := range r.Rows {
		cells := []string{row.Tool, sizeText(row.Size), strconv.Itoa(row.Iters)}
		for _, p := range BenchPairs {
			cells = append(cells, row.cell(p))
		}
		for _, p := range BenchPairs[1:] {
			if v, ok := row.Ratio(p); ok {
				cells = append(cells, strconv.FormatFloat(v, 'f', 2, 64)+"x")
			} else {
				cells = append(cells, "-")
			}
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	fmt.Fprintf(w, "\nthe median over %d round(s) of: bandwidth, the client's BW average; latency, the client's t_typical (its 99%% percentile in brackets);\n", r.Rounds)
	fmt.Fprintln(w, "ratio: how many times as fast roced is as rxe (1 or more: at least as fast)")
	for _, row := range r.Rows {
		for _, p := range BenchPairs {
			for i, run := range row.Runs[p] {
				for _, e := range run.Errors {
					fmt.Fprintf(w, "%s %s round %d: %s\n", row.Test, p, i+1, e)
				}
			}
		}
	}
}

// cell is pair's median figure with its unit, or why there is none; "!"
// marks a cell one of whose runs has errors (listed under the table).
func (r *BenchRow) cell(pair string) string {
	runs := r.Runs[pair]
	if len(runs) == 0 {
		return "not run"
	}
	bad := ""
	for _, run := range runs {
		if len(run.Errors) > 0 || run.Value == nil {
			bad = " !"
		}
	}
	v, ok := r.Figure(pair)
	if !ok {
		for _, run := range runs {
			if run.Printed != "" {
				return run.Printed + bad // inf, nan: the tool's clock, said as printed
			}
		}
		return "FAIL"
	}
	s := formatFigure(v) + " " + r.Unit
	if p99, ok := median(runs, func(b *BenchRun) *float64 { return b.P99 }); ok {
		s += " (" + formatFigure(p99) + ")"
	}
	return s + bad
}

func sizeText(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return strconv.Itoa(n/1024) + " KiB"
	}
	return strconv.Itoa(n) + " B"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// WriteJSON writes the report to file.
func (r *GuestBenchReport) WriteJSON(file string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(b, '\n'), 0o644)
}

// GuestBenchOptions tune a bench run.
type GuestBenchOptions struct {
	// Roced is the static roced binary on this host.
	Roced string
	// Tests to run (default GuestBenchTests).
	Tests []BenchTest
	// MTU is the path MTU both sides get (-m; default 1024, rxe's on the
	// guest's 1500-byte veth).
	MTU int
	// ItersScale multiplies each test's -n (0: as it is).
	ItersScale float64
	// Timeout bounds each side's command (default 5 minutes: the TCG
	// guest moves a few MB/s).
	Timeout time.Duration
	// RocedEnv are NAME=VALUE settings every roced command gets
	// (GOROCE_BUSY_POLL=5000, say).
	RocedEnv []string
	// Link is every roced's --link (udp, afpacket, afxdp; empty: its
	// default).
	Link string
	// Rounds is how many times every pair runs every test (default 1):
	// rxe's runs, then roced's, in each round.
	Rounds int
	// Port is the first run's TCP port; each run takes the next.
	Port int
	// Artifacts is where each run's outputs go (empty: nowhere).
	Artifacts string
	// Progress gets one line per run.
	Progress io.Writer
}

// Where the bench puts roced: its directory in the lab's share, and the
// binary in the guest.
const (
	benchGuestBin = "/tmp/goroce-bench-roced"
)

// CheckStatic fails unless path is an ELF executable without a program
// interpreter: a binary the guest runs without the host's libc.
func CheckStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("roced %s: %v", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("roced %s is dynamically linked: build it with CGO_ENABLED=0", path)
		}
	}
	return nil
}

// RunGuestBench runs the bench on the lab's running guest. It returns an
// error when the guest could not be set up or put back as it was; a test
// that fails is a row without its figure.
func RunGuestBench(ctx context.Context, l *Lab, o GuestBenchOptions) (rep *GuestBenchReport, err error) {
	if len(o.Tests) == 0 {
		o.Tests = GuestBenchTests
	}
	if o.MTU == 0 {
		o.MTU = 1024
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.Port == 0 {
		o.Port = DefaultPort
	}
	if o.Rounds < 1 {
		o.Rounds = 1
	}
	if err := CheckStatic(o.Roced); err != nil {
		return nil, err
	}
	cases := make([]Case, len(o.Tests))
	for i, t := range o.Tests {
		if cases[i], err = t.Case(o.MTU, o.ItersScale); err != nil {
			return nil, err
		}
	}
	for _, e := range o.RocedEnv {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return nil, fmt.Errorf("roced environment %q: want NAME=VALUE", e)
		}
	}
	rep = &GuestBenchReport{Suite: l.Suite, Started: time.Now(), RocedEnv: o.RocedEnv, RocedLink: o.Link}
	rep.HostLoad[0], rep.GuestLoad[0] = l.loads(ctx)
	defer func() {
		if rep == nil { // a set-up error: no report
			return
		}
		rep.HostLoad[1], rep.GuestLoad[1] = l.loads(context.Background())
		rep.Seconds = time.Since(rep.Started).Seconds()
	}()

	if err := l.installRoced(ctx, o.Roced); err != nil {
		return nil, err
	}
	defer func() {
		// The guest as it was: without the bench's binary.
		if _, rerr := l.run(context.Background(), "exec", "rm -f "+benchGuestBin); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	pair, err := LabPairPeer(ctx, l)
	if err != nil {
		return nil, err
	}
	rep.Info = pair.Info
	for i, t := range o.Tests {
		c := cases[i]
		rep.Rows = append(rep.Rows, &BenchRow{Test: t.Name(), Tool: t.Tool, Size: t.Size, Iters: c.Iters,
			Latency: c.Tool.Latency, Unit: benchUnit(c.Tool.Latency),
			Runs: map[string][]*BenchRun{}})
	}
	port := o.Port
	runAll := func(round int, name string, p *Peer) {
		for i, c := range cases {
			// Ports stay below 65536 whatever the rounds.
			rep.Rows[i].Runs[name] = append(rep.Rows[i].Runs[name], l.benchRun(ctx, p, c, o.Port+(port-o.Port)%1000, round, name, o))
			port++
		}
	}
	for round := 1; round <= o.Rounds && ctx.Err() == nil; round++ {
		runAll(round, BenchRxe, pair)
		if err := l.rocedRound(ctx, func() {
			runAll(round, BenchRoced, guestRocedPeer(l, o, false))
			runAll(round, BenchRocedOneCPU, guestRocedPeer(l, o, true))
		}); err != nil {
			return rep, err
		}
		rep.Rounds = round
	}
	return rep, ctx.Err()
}

// rocedRound runs fn with UDP port 4791 free in the guest: rxe's devices
// deleted and rdma_rxe unloaded, then put back whatever happened.
func (l *Lab) rocedRound(ctx context.Context, fn func()) (err error) {
	devs, err := l.freeRoCEPort(ctx)
	defer func() {
		if rerr := l.restoreRxe(context.Background(), devs); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	if err != nil {
		return err
	}
	fn()
	return nil
}

// GuestBenchList prints each run of the bench with its two command
// lines, running nothing.
func GuestBenchList(w io.Writer, l *Lab, o GuestBenchOptions) error {
	if len(o.Tests) == 0 {
		o.Tests = GuestBenchTests
	}
	if o.MTU == 0 {
		o.MTU = 1024
	}
	if o.Port == 0 {
		o.Port = DefaultPort
	}
	port := o.Port
	for _, np := range []struct {
		name string
		p    *Peer
	}{{BenchRxe, pairPeer(l)}, {BenchRoced, guestRocedPeer(l, o, false)}, {BenchRocedOneCPU, guestRocedPeer(l, o, true)}} {
		for _, t := range o.Tests {
			c, err := t.Case(o.MTU, o.ItersScale)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "%s %s\n  server: %s\n  client: %s\n", t.Name(), np.name,
				ShellJoin(np.p.Ref.Argv(c.Scenario, port, "")), ShellJoin(np.p.Subject.Argv(c.Scenario, port, np.p.Ref.Addr)))
			port++
		}
	}
	return nil
}

// guestRocedPeer is roced on vethA (the client) against roced on vethB
// (the server), both in the guest, each with o.RocedEnv in its
// environment, o.Link its --link and, if oneCPU, GOMAXPROCS=1.
func guestRocedPeer(l *Lab, o GuestBenchOptions, oneCPU bool) *Peer {
	env := o.RocedEnv
	var extra []string
	if o.Link != "" {
		extra = []string{"--link", o.Link}
	}
	var prefix []string
	if len(env) > 0 || oneCPU {
		prefix = append([]string{"env"}, env...)
		if oneCPU {
			prefix = append(prefix, "GOMAXPROCS=1")
		}
	}
	g := l.Guest()
	mk := func(who, addr string) Side {
		return Side{Who: who, Runner: g, Roced: benchGuestBin, Dev: addr, GID: 1, Addr: addr, Strict: true, Prefix: prefix, Extra: extra}
	}
	return &Peer{Name: "guest-roced-" + l.Suite, Subject: mk("roced "+pairAddrA, pairAddrA), Ref: mk("roced "+pairAddrB, pairAddrB)}
}

// benchRun runs one case on p, with vethB's received bytes read before
// and after it.
func (l *Lab) benchRun(ctx context.Context, p *Peer, c Case, port, round int, name string, o GuestBenchOptions) *BenchRun {
	run := &BenchRun{}
	var art string
	if o.Artifacts != "" {
		art = filepath.Join(o.Artifacts, fmt.Sprintf("round%d", round), strings.ReplaceAll(name, " ", "_"))
	}
	before, err := l.vethRx(ctx)
	if err != nil {
		run.Errors = append(run.Errors, err.Error())
		return run
	}
	res := Run(ctx, p, []Case{c}, Options{Port: port, Timeout: o.Timeout, ListenTimeout: time.Minute,
		Grace: 30 * time.Second, Artifacts: art}).Results[0]
	if after, err := l.vethRx(ctx); err != nil {
		run.Errors = append(run.Errors, err.Error())
	} else {
		run.VethBytes = after - before
	}
	run.Dir = res.Dir
	if res.Client != nil {
		run.Client = res.Client.Argv
	}
	if res.Result != Pass {
		run.Errors = append(run.Errors, res.Reasons...)
	}
	if res.Client != nil {
		v, p99, printed, err := BenchFigure(res.Client.Stdout, c.Tool.Latency)
		if err != nil {
			run.Errors = append(run.Errors, "client: "+err.Error())
		}
		run.Value, run.P99, run.Printed = v, p99, printed
	}
	if want := int64(c.Size) * int64(c.Iters); run.VethBytes < want {
		run.Errors = append(run.Errors, fmt.Sprintf("vethB received %d bytes, less than the %d the client's messages carry: the traffic did not cross the veth", run.VethBytes, want))
	}
	if o.Progress != nil {
		fig := run.Printed
		if fig == "" {
			fig = "no figure"
		}
		fmt.Fprintf(o.Progress, "guestbench: round %d %-18s %-18s %s (vethB +%d bytes, %.1fs)\n", round, c.Name(), name, fig, run.VethBytes, res.Seconds)
	}
	return run
}

// vethRx is vethB's rx_bytes in the guest.
func (l *Lab) vethRx(ctx context.Context) (int64, error) {
	out, err := l.run(ctx, "exec", "cat /sys/class/net/vethB/statistics/rx_bytes")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(out), 10, 64)
}

// loads are the host's and the guest's load averages (1, 5, 15 minutes).
func (l *Lab) loads(ctx context.Context) (host, guest string) {
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		host = loadFields(string(b))
	}
	if out, err := l.run(ctx, "exec", "cat /proc/loadavg"); err == nil {
		guest = loadFields(out)
	}
	return host, guest
}

func loadFields(s string) string {
	f := strings.Fields(s)
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// installRoced puts the binary in the guest's /tmp through the lab's 9p
// share (installInGuest) and checks that it runs there.
func (l *Lab) installRoced(ctx context.Context, roced string) error {
	if err := l.installInGuest(ctx, roced, benchGuestBin); err != nil {
		return err
	}
	if _, err := l.run(ctx, "exec", benchGuestBin+" help >/dev/null"); err != nil {
		return fmt.Errorf("roced in the guest: %w", err)
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// rxeLink is one rxe device of the guest and the netdev it runs on.
type rxeLink struct{ Dev, Netdev string }

var rdmaLinkRe = regexp.MustCompile(`^link (\S+)/\d+ .*\bnetdev (\S+)`)

// parseRdmaLinks reads rdma link show's lines ("link rxe0/1 state ACTIVE
// physical_state LINK_UP netdev eth0").
func parseRdmaLinks(out string) []rxeLink {
	var links []rxeLink
	for _, line := range strings.Split(out, "\n") {
		if m := rdmaLinkRe.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			links = append(links, rxeLink{m[1], m[2]})
		}
	}
	return links
}

// udp4791Bound is a shell test that holds when something has UDP port
// 4791 bound.
const udp4791Bound = `ss -Huln 'sport = :4791' | grep -q .`

// freeRoCEPort deletes every rxe device and unloads rdma_rxe, whose
// kernel socket holds UDP port 4791, and checks the port is free. It
// returns the devices to put back (restoreRxe), also when it fails half
// way.
func (l *Lab) freeRoCEPort(ctx context.Context) ([]rxeLink, error) {
	out, err := l.run(ctx, "exec", "rdma link show")
	if err != nil {
		return nil, err
	}
	links := parseRdmaLinks(out)
	var b strings.Builder
	for _, k := range links {
		fmt.Fprintf(&b, "rdma link del %s || exit 1\n", k.Dev)
	}
	b.WriteString("modprobe -r rdma_rxe || { lsmod | grep rxe >&2; exit 1; }\n")
	b.WriteString(udp4791Bound + ` && { echo "UDP port 4791 is still bound:" >&2; ss -Hulnp 'sport = :4791' >&2; exit 1; }` + "\nexit 0\n")
	if _, err := l.run(ctx, "exec", b.String()); err != nil {
		return links, fmt.Errorf("freeing UDP port 4791 in the guest: %w", err)
	}
	return links, nil
}

// restoreRxe loads rdma_rxe again and recreates links, then checks that
// each is back and the port bound.
func (l *Lab) restoreRxe(ctx context.Context, links []rxeLink) error {
	var b strings.Builder
	b.WriteString("modprobe rdma_rxe || exit 1\n")
	for _, k := range links {
		fmt.Fprintf(&b, "[ -e /sys/class/infiniband/%[1]s ] || rdma link add %[1]s type rxe netdev %[2]s || exit 1\n", k.Dev, k.Netdev)
	}
	if len(links) > 0 {
		b.WriteString(udp4791Bound + ` || { echo "rxe is back but UDP port 4791 is not bound" >&2; exit 1; }` + "\n")
	}
	if _, err := l.run(ctx, "exec", b.String()); err != nil {
		return fmt.Errorf("putting rxe back in the guest: %w", err)
	}
	return nil
}
