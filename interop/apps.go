package interop

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The applications stage (-peer lab-apps): real RDMA software, unmodified,
// over libgoroce.so on this host (in the tap's namespace) against the same
// software on the guest's rxe0 (issue 42's proof against rxe). Three
// kinds of case:
//
//   - qperf: the guest's qperf client against the host's qperf server on
//     libgoroce.so, and the host's client against the guest's server. The
//     RC tests run over the RDMA CM (-cm1) and must measure; the tests
//     qperf connects by LID, with no GRH (UC, UD, and RC without -cm1),
//     must be refused with the message rxe gives, which the stage takes
//     from rxe itself (the guest's client against the guest's server).
//   - UCX: ucx_perftest both ways over rc_verbs and ud_verbs (apps_ucx.go).
//   - libfabric: fi_pingpong both ways through the verbs provider's msg
//     and ofi_rxm's rdm endpoints (apps_libfabric.go).
//   - rdma-core's own test suite (python3-pyverbs ships it): run on rxe0 in
//     the guest for the reference, then over libgoroce.so on the host;
//     goroce's run must have no crash, failure or error, pass at least as
//     many tests as rxe, and skip only tests rxe skips too.

// AppsPort is the TCP port of the stage's qperf servers (qperf's -lp).
const AppsPort = 19766

// AppsTimeout bounds one qperf client, and each exchange qperf makes with
// its server (-to): qperf's 5 s is short for the emulated guest.
const AppsTimeout = 90 * time.Second

// RdmaCoreSuiteTimeout bounds one run of rdma-core's test suite (the
// guest's, under TCG, takes minutes).
const RdmaCoreSuiteTimeout = 20 * time.Minute

// QperfTest is one qperf test of the stage.
type QperfTest struct {
	Name string // qperf's test name (rc_lat, ud_bw, ...)
	CM   bool   // run with -cm1 (RC over the RDMA CM)
	// Want is the result line's name qperf prints for a run that
	// measured ("latency", "bw", "msg_rate"); empty: the run is refused.
	Want string
	// Refusal is the line rxe's qperf prints for the refused run: a RoCE
	// device takes no address vector without a GRH (the kernel's
	// rdma_check_ah_attr: EINVAL), which is how qperf connects UC and UD
	// QPs, and RC ones without -cm1 (by LID).
	Refusal string
}

// QperfTests are issue 42's eleven: the five RC tests over the RDMA CM,
// which measure, and RC without the CM, UC and UD, which a RoCE device
// refuses.
var QperfTests = []QperfTest{
	{Name: "rc_lat", CM: true, Want: "latency"},
	{Name: "rc_bw", CM: true, Want: "bw"},
	{Name: "rc_rdma_write_bw", CM: true, Want: "bw"},
	{Name: "rc_rdma_read_lat", CM: true, Want: "latency"},
	{Name: "rc_compare_swap_mr", CM: true, Want: "msg_rate"},
	{Name: "rc_lat", Refusal: "failed to modify QP to RTR: Invalid argument"},
	{Name: "uc_lat", Refusal: "failed to modify QP to RTR: Invalid argument"},
	{Name: "uc_bw", Refusal: "failed to modify QP to RTR: Invalid argument"},
	{Name: "uc_rdma_write_bw", Refusal: "failed to modify QP to RTR: Invalid argument"},
	{Name: "ud_lat", Refusal: "failed to create address handle: Invalid argument"},
	{Name: "ud_bw", Refusal: "failed to create address handle: Invalid argument"},
}

// Argv is the test's client command line against server (the port and
// the exchange timeout first, as qperf wants its options).
func (q QperfTest) Argv(server string) []string {
	a := []string{"qperf", "-lp", strconv.Itoa(AppsPort), "-to", strconv.Itoa(int(AppsTimeout / time.Second / 2)), "-t", "1", server}
	if q.CM {
		a = append(a, "-cm1")
	}
	return append(a, q.Name)
}

// ID names the test: its name, with "-cm1" for the RDMA CM's.
func (q QperfTest) ID() string {
	if q.CM {
		return q.Name + "-cm1"
	}
	return q.Name
}

// qperf's servers and clients of the stage.
const (
	appsGoroceServer = "goroce-server" // the host's qperf server on libgoroce.so, the guest's client
	appsRxeServer    = "rxe-server"    // the guest's server, the host's client on libgoroce.so
	appsRxeSelf      = "rxe-self"      // the guest's client against the guest's server: rxe's own answer
)

// AppsCase is one case of the stage.
type AppsCase struct {
	Name      string         // qperf/TEST@DIR, ucx/TRANSPORT/TEST@DIR, libfabric/EP@DIR or rdma-core-tests
	Qperf     *QperfTest     // a qperf case
	UCX       *UCXTest       // a UCX case (apps_ucx.go)
	Libfabric *LibfabricTest // a libfabric case (apps_libfabric.go); none: the rdma-core suite
	Dir       string         // goroce-server, rxe-server, rxe-self
}

// ID returns the case's name.
func (c AppsCase) ID() string { return c.Name }

// AppsCases lists the stage's cases: every qperf test both ways, the
// refused ones on rxe alone first (the message goroce must give), every
// UCX and libfabric test both ways, then rdma-core's suite.
func AppsCases() []AppsCase {
	var cs []AppsCase
	for i := range QperfTests {
		q := &QperfTests[i]
		dirs := []string{appsGoroceServer, appsRxeServer}
		if q.Want == "" {
			dirs = append([]string{appsRxeSelf}, dirs...)
		}
		for _, d := range dirs {
			cs = append(cs, AppsCase{Name: "qperf/" + q.ID() + "@" + d, Qperf: q, Dir: d})
		}
	}
	for i := range UCXTests {
		u := &UCXTests[i]
		for _, d := range []string{appsGoroceServer, appsRxeServer} {
			cs = append(cs, AppsCase{Name: u.ID() + "@" + d, UCX: u, Dir: d})
		}
	}
	for i := range LibfabricTests {
		f := &LibfabricTests[i]
		for _, d := range []string{appsGoroceServer, appsRxeServer} {
			cs = append(cs, AppsCase{Name: f.ID() + "@" + d, Libfabric: f, Dir: d})
		}
	}
	return append(cs, AppsCase{Name: "rdma-core-tests"})
}

// AppsOptions configure RunApps.
type AppsOptions struct {
	Run       *regexp.Regexp // cases to run (nil: all)
	Progress  io.Writer      // one line per case as it ends (nil: none)
	Libgoroce string         // the preloaded library (absolute path)
}

// RunApps runs the stage against the lab, which must be up.
func RunApps(ctx context.Context, l *Lab, o AppsOptions) *Report {
	rep := &Report{Peer: "lab-apps-" + l.Suite, Started: time.Now(), Info: l.Info(ctx)}
	rep.Info["subject"] = "the host's qperf, ucx_perftest, fi_pingpong and pyverbs over " + o.Libgoroce
	a := &appsRun{lab: l, lib: o.Libgoroce, servers: map[string]Proc{}}
	defer a.stopServers()
	for _, c := range AppsCases() {
		if o.Run != nil && !o.Run.MatchString(c.Name) {
			continue
		}
		t := time.Now()
		var res Result
		switch {
		case c.Qperf != nil:
			res = a.qperf(ctx, c)
		case c.UCX != nil:
			res = a.ucx(ctx, c)
		case c.Libfabric != nil:
			res = a.libfabric(ctx, c)
		default:
			res = a.rdmaCoreSuite(ctx)
		}
		res.Case = c.Name
		res.Seconds = time.Since(t).Seconds()
		switch {
		case res.Result == NotRun: // the case said why
		case len(res.Reasons) > 0:
			res.Result = Fail
		default:
			res.Result = Pass
		}
		rep.add(res)
		if o.Progress != nil {
			fmt.Fprintln(o.Progress, progressLine(res))
		}
	}
	rep.Seconds = time.Since(rep.Started).Seconds()
	return rep
}

// appsRun is one run of the stage: the lab, the library and the qperf
// servers started so far (one a side, serving every case: qperf's server
// forks a child per test).
type appsRun struct {
	lab      *Lab
	lib      string
	servers  map[string]Proc    // by the side's name: "host", "guest"
	ucxSides map[string]ucxSide // by side: its UCX (ucxProbe)
	shim     string             // the guest's path of its qperf shim, once installed
}

// hostArgv is argv on the host over libgoroce.so, on the tap.
func (a *appsRun) hostArgv(argv ...string) []string {
	return append([]string{"env", "LD_PRELOAD=" + a.lib, "GOROCE_NETDEV=" + a.lab.Tap}, argv...)
}

// server starts (once) the qperf server on side "host" or "guest".
func (a *appsRun) server(ctx context.Context, side string) (Proc, error) {
	if p, ok := a.servers[side]; ok {
		select {
		case <-p.Done():
			out := p.Wait()
			return nil, fmt.Errorf("the %s's qperf server has exited (status %d)%s", side, out.Exit, stderrHint(out.Stderr+out.Stdout))
		default:
			return p, nil
		}
	}
	argv := []string{"qperf", "-lp", strconv.Itoa(AppsPort)}
	var run Runner = a.lab.Guest()
	if side == "host" {
		argv = a.hostArgv(argv...)
		run = a.lab.Host()
	} else {
		var err error
		if argv, err = a.guestQperf(ctx, argv); err != nil {
			return nil, err
		}
	}
	p := run.Start(ctx, argv, 2*RdmaCoreSuiteTimeout)
	if err := run.WaitListen(ctx, AppsPort, AppsTimeout); err != nil {
		p.Stop()
		out := p.Wait()
		return nil, fmt.Errorf("the %s's qperf server does not listen: %v%s", side, err, stderrHint(out.Stderr+out.Stdout))
	}
	a.servers[side] = p
	return p, nil
}

// guestQperf is qperf's argv as the guest runs it: under the shim
// (qperfShimSrc), installed in the guest the first time.
func (a *appsRun) guestQperf(ctx context.Context, argv []string) ([]string, error) {
	if a.shim == "" {
		so, err := a.lab.installQperfShim(ctx)
		if err != nil {
			return nil, err
		}
		a.shim = so
	}
	return append([]string{"env", "LD_PRELOAD=" + a.shim}, argv...), nil
}

// qperfShimSrc is the guest's qperf shim, for two races of Debian's qperf
// 0.4.11: its server sends its client the RDMA CM port before it listens,
// and a quick client (the host's) is rejected, REJ reason 8, now and then
// (the shim makes the bind listen at once, as upstream qperf's order is);
// and a client or server that fails while the other side's failure
// reaches it can hang for ever in exit(), called a second time from its
// SIGURG handler (the shim makes that second exit end the process).
//
//go:embed lab/qperf-shim.c
var qperfShimSrc []byte

// qperfShimGuest is where the guest keeps the shim.
const qperfShimGuest = "/tmp/goroce-qperf-shim.so"

// installQperfShim builds the shim with this host's C compiler (the
// guests' C libraries are this one's or newer) and installs it in the
// guest (installInGuest); it returns the guest's path.
func (l *Lab) installQperfShim(ctx context.Context) (string, error) {
	dir, err := os.MkdirTemp("", "goroce-qperf-shim-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	so, err := buildQperfShim(ctx, dir)
	if err != nil {
		return "", err
	}
	if err := l.installInGuest(ctx, so, qperfShimGuest); err != nil {
		return "", err
	}
	return qperfShimGuest, nil
}

// buildQperfShim builds the shim in dir with this host's C compiler, cc's
// flags after the stage's own (TestQperfShimBuilds adds -Werror's), and
// returns the library's path.
func buildQperfShim(ctx context.Context, dir string, flags ...string) (string, error) {
	src, so := filepath.Join(dir, "qperf-shim.c"), filepath.Join(dir, "qperf-shim.so")
	if err := os.WriteFile(src, qperfShimSrc, 0o644); err != nil {
		return "", err
	}
	args := append(append([]string{"-shared", "-fPIC", "-O2"}, flags...), "-o", so, src, "-ldl", "-lpthread")
	if out, err := exec.CommandContext(ctx, "cc", args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the guest's qperf shim: %v%s", err, stderrHint(string(out)))
	}
	return so, nil
}

func (a *appsRun) stopServers() {
	for _, p := range a.servers {
		p.Stop()
		p.Wait()
	}
}

// qperf runs one qperf case and judges it.
func (a *appsRun) qperf(ctx context.Context, c AppsCase) Result {
	q := c.Qperf
	res := Result{Tool: "qperf", Transport: strings.ToUpper(q.Name[:2]), Direction: c.Dir}
	if q.CM {
		res.Flags = []string{"-cm1"}
	}
	srvSide, srvWho, cli, cliWho, addr := "host", "libgoroce", a.lab.Guest(), "rxe0", a.lab.HostAddr
	switch c.Dir {
	case appsRxeServer:
		srvSide, srvWho, cli, cliWho, addr = "guest", "rxe0", a.lab.Host(), "libgoroce", a.lab.GuestAddr
	case appsRxeSelf:
		srvSide, srvWho, cli, cliWho, addr = "guest", "rxe0", a.lab.Guest(), "rxe0", a.lab.GuestAddr
	}
	argv := a.hostArgv(q.Argv(addr)...)
	if cliWho == "rxe0" {
		var err error
		if argv, err = a.guestQperf(ctx, q.Argv(addr)); err != nil {
			res.Reasons = []string{err.Error()}
			return res
		}
	}
	if _, err := a.server(ctx, srvSide); err != nil {
		res.Reasons = []string{err.Error()}
		return res
	}
	out := cli.Start(ctx, argv, AppsTimeout).Wait()
	res.Server = &SideReport{Who: srvWho + " (qperf -lp " + strconv.Itoa(AppsPort) + ")"}
	res.Client = &SideReport{Who: cliWho, Output: out}
	var note string
	res.Reasons, res.Figures, note = JudgeQperf(*q, out)
	if note != "" {
		res.Notes = append(res.Notes, note)
	}
	return res
}

// qperfResultRe is a result line of qperf: "    latency  =  71.5 us".
var qperfResultRe = regexp.MustCompile(`^\s*(\w+)\s*=\s*(\S+)\s+(\S+)\s*$`)

// qperfLostRe is what a qperf client prints when its server reported an
// error whose text qperf itself lost: "server: " and nothing after it.
// The server's error() sends one urgent (MSG_OOB) byte, then the text;
// the client's SIGURG handler reads and throws away what precedes the
// mark, and when the urgent notice arrives ahead of the byte's segment
// (the emulated guest's slow TCP) it throws away the text as well.
var qperfLostRe = regexp.MustCompile(`(?m)^server: *$`)

// JudgeQperf judges a qperf client's run of q: a measuring test must exit
// 0 and print its result line (q.Want) with a positive figure, and no
// "failed" line; a refused one must exit non-zero with rxe's line
// (q.Refusal). A refused run whose client printed qperf's lost-message
// form passes with a note saying so: the server refused (qperf's error
// path is the only one that sends the urgent byte) but what it said is
// not known (qperfLostRe).
func JudgeQperf(q QperfTest, out Output) (reasons []string, figs []Figure, note string) {
	text := out.Stdout + "\n" + out.Stderr
	switch {
	case out.StartErr != "":
		return []string{"client did not run: " + out.StartErr}, nil, ""
	case out.TimedOut:
		return []string{fmt.Sprintf("client timed out after %.0fs%s", out.Seconds, stderrHint(text))}, nil, ""
	}
	if q.Want == "" {
		if out.Exit == 0 {
			return []string{"client exit status 0: want the run refused (" + q.Refusal + "), as rxe refuses it"}, nil, ""
		}
		if !strings.Contains(text, q.Refusal) {
			if qperfLostRe.MatchString(out.Stderr) {
				return nil, nil, fmt.Sprintf("refused (exit status %d), the server's message lost by qperf's own urgent-data race (\"server: \" and nothing after it): not compared with rxe's %q", out.Exit, q.Refusal)
			}
			return []string{fmt.Sprintf("client exit status %d%s: want rxe's refusal %q", out.Exit, stderrHint(text), q.Refusal)}, nil, ""
		}
		return nil, nil, ""
	}
	if out.Exit != 0 {
		return []string{fmt.Sprintf("client exit status %d%s", out.Exit, stderrHint(text))}, nil, ""
	}
	if strings.Contains(text, "failed") {
		return []string{"client printed a failure" + stderrHint(text)}, nil, ""
	}
	for _, l := range strings.Split(out.Stdout, "\n") {
		m := qperfResultRe.FindStringSubmatch(l)
		if m == nil || m[1] != q.Want {
			continue
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil || !finite(v) || v <= 0 {
			return []string{fmt.Sprintf("client: %s is %q, want a positive number", q.Want, m[2])}, nil, ""
		}
		return nil, []Figure{{Value: v, Unit: m[3], Side: "client"}}, ""
	}
	return []string{fmt.Sprintf("client: no %q result line", q.Want)}, nil, ""
}

// RdmaCoreSuiteScript runs rdma-core's test suite, shipped gzipped with
// python3-pyverbs, from a scratch copy on device dev (-v: one line per
// test, which ParseUnittest reads), between "### module M+" and "### exit
// N" lines. When the interpreter dies (rxe's own run on trixie segfaults
// in the mlx5 tests), the modules after the one it died in run again in a
// new interpreter, so that one crash hides no other module's results; one
// interpreter a module would cost minutes in the emulated guest. Debian's
// /usr/bin/python3, whose path holds pyverbs (a python3 earlier on PATH may
// not).
func RdmaCoreSuiteScript(dev string) string {
	return `export LC_ALL=C; d=$(mktemp -d) && cp -r /usr/share/doc/rdma-core/tests "$d"/ && find "$d" -name '*.gz' -exec gunzip {} + && ` +
		`cd "$d/tests" || exit 1; rest=$(ls test_*.py | sed 's/[.]py$//' | sort); rc=0; ` +
		`while [ -n "$rest" ]; do set -- $rest; echo "### module $1+"; ` +
		`/usr/bin/python3 run_tests.py --dev ` + dev + ` -v $(for m in $rest; do printf 'tests.%s ' $m; done) >"$d/out" 2>&1; e=$?; ` +
		`cat "$d/out"; echo "### exit $e"; [ $e = 0 ] || rc=1; grep -q '^Ran ' "$d/out" && break; ` +
		`last=$(grep -o '(tests[.]test_[A-Za-z0-9_]*' "$d/out" | tail -n 1 | cut -c8-); [ -n "$last" ] || break; ` +
		`rest=$(for m in $rest; do [ "$m" \> "$last" ] && echo $m; done); done; ` +
		`rm -rf "$d"; exit $rc`
}

// rdmaCoreSuite runs the suite on rxe0 in the guest, then on goroce0 over
// libgoroce.so on the host, and holds goroce's run to rxe's.
func (a *appsRun) rdmaCoreSuite(ctx context.Context) Result {
	res := Result{Tool: "run_tests.py", Transport: "RC", Direction: "both"}
	rxeOut := a.lab.Guest().Start(ctx, []string{"sh", "-c", RdmaCoreSuiteScript("rxe0")}, RdmaCoreSuiteTimeout).Wait()
	gOut := a.lab.Host().Start(ctx, a.hostArgv("sh", "-c", RdmaCoreSuiteScript("goroce0")), RdmaCoreSuiteTimeout).Wait()
	res.Server = &SideReport{Who: "rxe0 (the guest's pyverbs)", Output: rxeOut}
	res.Client = &SideReport{Who: "goroce0 (the host's pyverbs over libgoroce.so)", Output: gOut}
	rxe, err := ParseUnittest(rxeOut)
	if err != nil {
		res.Reasons = append(res.Reasons, "rxe0's run: "+err.Error())
		return res
	}
	g, err := ParseUnittest(gOut)
	if err != nil {
		res.Reasons = append(res.Reasons, "goroce0's run: "+err.Error())
		return res
	}
	res.Reasons, res.Notes = CompareSuites(rxe, g)
	res.Figures = []Figure{{Value: float64(g.Count(TestPass)), Unit: "passed", Side: "goroce0"},
		{Value: float64(rxe.Count(TestPass)), Unit: "passed", Side: "rxe0"}}
	return res
}

// A test's outcome in a unittest run.
const (
	TestPass  = "ok"
	TestSkip  = "skipped"
	TestFail  = "FAIL"
	TestError = "ERROR"
)

// UnittestRun is one run of a Python unittest suite with -v, perhaps
// module by module (RdmaCoreSuiteScript).
type UnittestRun struct {
	Ran     int               // "Ran N tests", summed over the modules
	Results map[string]string // test id (module.Class.test) -> ok, skipped, FAIL, ERROR
	Skips   map[string]string // test id -> the skip's reason
	// Crashes are the tests in which the interpreter died (a signal, no
	// summary): the test it was running, else its module.
	Crashes []string
}

// Count is how many tests ended with outcome.
func (r UnittestRun) Count(outcome string) int {
	n := 0
	for _, o := range r.Results {
		if o == outcome {
			n++
		}
	}
	return n
}

// Summary is the run's counts, as one line.
func (r UnittestRun) Summary() string {
	s := fmt.Sprintf("%d tests: %d passed, %d skipped, %d failed, %d errors", len(r.Results),
		r.Count(TestPass), r.Count(TestSkip), r.Count(TestFail), r.Count(TestError))
	if len(r.Crashes) > 0 {
		s += fmt.Sprintf(", %d crashed the interpreter (%s)", len(r.Crashes), strings.Join(r.Crashes, ", "))
	}
	return s
}

var (
	// "test_x (tests.test_y.Class.test_x)" or, Python before 3.11,
	// "test_x (tests.test_y.Class)": a test starts.
	utStartRe = regexp.MustCompile(`^(test\w*) \(([\w.]+)\)`)
	// The outcome after the last " ... " of the test's lines.
	utOutcomeRe = regexp.MustCompile(` \.\.\. (ok|skipped (?:'(.*)'|"(.*)")|FAIL|ERROR|expected failure|unexpected success)$`)
	// The outcome on a line of its own: the test printed something
	// after unittest's " ... " ("... is_fork_initialized() = 2\nok").
	utBareOutcomeRe = regexp.MustCompile(`^(ok|skipped (?:'(.*)'|"(.*)")|FAIL|ERROR|expected failure|unexpected success)$`)
	utRanRe         = regexp.MustCompile(`^Ran (\d+) tests? in `)
	utModuleRe      = regexp.MustCompile(`^### module (\S+)$`)
	utExitRe        = regexp.MustCompile(`^### exit (\d+)$`)
)

// ParseUnittest reads a unittest -v run (stdout and stderr: unittest
// writes to stderr), whole or module by module between RdmaCoreSuiteScript's
// marks. An interpreter that died is a crash, not an error; an error is
// output that is no such run at all.
func ParseUnittest(out Output) (UnittestRun, error) {
	r := UnittestRun{Results: map[string]string{}, Skips: map[string]string{}}
	text := strings.ReplaceAll(out.Stderr+"\n"+out.Stdout, "\r", "")
	switch {
	case out.StartErr != "":
		return r, fmt.Errorf("did not run: %s", out.StartErr)
	case out.TimedOut:
		return r, fmt.Errorf("timed out after %.0fs%s", out.Seconds, stderrHint(text))
	}
	// One segment a module (the whole text when there are no marks).
	type segment struct {
		module string
		lines  []string
		exit   int // -1: no "### exit" (a run without marks: out.Exit)
	}
	var segs []*segment
	cur := &segment{exit: -1}
	for _, l := range strings.Split(text, "\n") {
		if m := utModuleRe.FindStringSubmatch(l); m != nil {
			if len(cur.lines) > 0 || cur.module != "" {
				segs = append(segs, cur)
			}
			cur = &segment{module: m[1], exit: -1}
			continue
		}
		if m := utExitRe.FindStringSubmatch(l); m != nil && cur.module != "" {
			cur.exit, _ = strconv.Atoi(m[1])
			segs = append(segs, cur)
			cur = &segment{exit: -1}
			continue
		}
		cur.lines = append(cur.lines, l)
	}
	if len(cur.lines) > 0 || cur.module != "" {
		segs = append(segs, cur)
	}
	marked := false
	for _, sg := range segs {
		marked = marked || sg.module != ""
	}
	ranAny := false
	for _, sg := range segs {
		if marked && sg.module == "" {
			continue // the copy and unpack before the first module
		}
		ran, last := parseUnittestLines(sg.lines, &r)
		exit := sg.exit
		if !marked {
			exit = out.Exit
		}
		if ran >= 0 {
			ranAny = true
			r.Ran += ran
		}
		// No summary, or a signal's status: the interpreter died.
		if ran < 0 && (last != "" || exit >= 128 || sg.module != "") {
			if last == "" {
				last = sg.module
			}
			r.Crashes = append(r.Crashes, last)
		}
	}
	if !ranAny && len(r.Results) == 0 && len(r.Crashes) == 0 {
		return r, fmt.Errorf("no unittest output (exit status %d)%s", out.Exit, stderrHint(text))
	}
	if len(r.Crashes) == 0 && r.Ran != len(r.Results) {
		return r, fmt.Errorf("ran %d tests but %d have an outcome", r.Ran, len(r.Results))
	}
	return r, nil
}

// parseUnittestLines adds one interpreter's tests to r: it returns the
// count of its "Ran N tests" line (-1: none) and the test it began last
// without an outcome ("" if none).
func parseUnittestLines(lines []string, r *UnittestRun) (ran int, open string) {
	ran = -1
	cur, dots := "", false // the test whose outcome is to come; its " ... " seen
	for _, l := range lines {
		if m := utStartRe.FindStringSubmatch(l); m != nil {
			cur, dots = m[2], false
			if !strings.HasSuffix(cur, "."+m[1]) {
				cur += "." + m[1]
			}
		}
		m := utOutcomeRe.FindStringSubmatch(l)
		if m == nil && dots {
			m = utBareOutcomeRe.FindStringSubmatch(l)
		}
		if cur != "" && strings.Contains(l, " ... ") {
			dots = true
		}
		if m != nil && cur != "" {
			o := m[1]
			switch {
			case strings.HasPrefix(o, "skipped"):
				o = TestSkip
				r.Skips[cur] = m[2] + m[3]
			case o == "expected failure":
				o = TestPass
			case o == "unexpected success":
				o = TestFail
			}
			r.Results[cur] = o
			cur, dots = "", false
		}
		if m := utRanRe.FindStringSubmatch(l); m != nil {
			ran, _ = strconv.Atoi(m[1])
		}
	}
	return ran, cur
}

// RdmaCoreGaps are the tests of rdma-core's suite that goroce may skip
// where rxe runs them (trixie's rxe0 passes them), each with its reason:
// features goroce refuses with EOPNOTSUPP or ENOSYS, as docs/libgoroce.md
// lists them. They count in neither run's passes. Any other skip rxe
// does not share fails the comparison.
var RdmaCoreGaps = map[string]string{
	"tests.test_rdmacm.CMTestCase.test_rdmacm_async_multicast_traffic":          "multicast (rdma_join_multicast: ENOSYS)",
	"tests.test_rdmacm.CMTestCase.test_rdmacm_async_ex_multicast_traffic":       "multicast (rdma_join_multicast_ex: ENOSYS)",
	"tests.test_rdmacm.CMTestCase.test_rdmacm_async_ex_leave_multicast_traffic": "multicast (rdma_join_multicast_ex: ENOSYS)",
	"tests.test_qpex.QpExTestCase.test_qp_ex_rc_atomic_write":                   "IBV_QP_EX_WITH_ATOMIC_WRITE (rxe since kernel 6.2; bookworm's rxe errors in it): EOPNOTSUPP",
}

// CompareSuites holds goroce's run of rdma-core's suite to rxe's: no
// crash, failure or error; at least rxe's pass count among the tests both
// runs have (RdmaCoreGaps counted in neither); every test goroce skips,
// rxe skips too, but for RdmaCoreGaps. Notes give both runs' counts.
func CompareSuites(rxe, goroce UnittestRun) (reasons, notes []string) {
	notes = []string{"rxe0: " + rxe.Summary(), "goroce0: " + goroce.Summary()}
	for _, c := range goroce.Crashes {
		reasons = append(reasons, "goroce0: the interpreter crashed in "+c)
	}
	var bad, extra []string
	for id, o := range goroce.Results {
		switch o {
		case TestFail, TestError:
			bad = append(bad, id+" "+o)
		case TestSkip:
			if _, gap := RdmaCoreGaps[id]; gap {
				continue
			}
			if ro, ok := rxe.Results[id]; ok && ro != TestSkip {
				extra = append(extra, fmt.Sprintf("%s (%q; rxe0: %s)", id, goroce.Skips[id], ro))
			}
		}
	}
	sort.Strings(bad)
	sort.Strings(extra)
	for _, b := range bad {
		reasons = append(reasons, "goroce0: "+b)
	}
	for _, e := range extra {
		reasons = append(reasons, "goroce0 skips what rxe0 runs: "+e)
	}
	// Passes are counted over the tests both suites have: the guest's
	// rdma-core may be another release than the host's (trixie's 56
	// against the host's 44), with tests the other lacks.
	g, x := 0, 0
	for id, o := range goroce.Results {
		if _, gap := RdmaCoreGaps[id]; gap {
			continue
		}
		if ro, ok := rxe.Results[id]; ok {
			if o == TestPass {
				g++
			}
			if ro == TestPass {
				x++
			}
		}
	}
	if len(goroce.Crashes) > 0 {
		x = rxe.Count(TestPass) // a crashed run's missing tests count against it
	}
	if g < x {
		reasons = append(reasons, fmt.Sprintf("goroce0 passes %d tests, rxe0 %d (of the tests both suites have)", g, x))
	}
	if len(rxe.Crashes) > 0 || rxe.Count(TestFail)+rxe.Count(TestError) > 0 {
		var rb []string
		for id, o := range rxe.Results {
			if o == TestFail || o == TestError {
				rb = append(rb, id+" "+o)
			}
		}
		slices.Sort(rb)
		rb = append(rb, rxe.Crashes...)
		notes = append(notes, "rxe0's own failures and crashes (the reference, not judged): "+strings.Join(rb, ", "))
	}
	return reasons, notes
}
