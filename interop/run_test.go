package interop

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The harness tests run this test binary as both tools: with
// GOROCE_CONFORMANCE_FAKE set it behaves as a minimal pingpong or perftest
// (a TCP exchange on -p, then the result lines), misbehaving on the role
// the variable names: "client=fail", "server=hang", "server=exit" ...
const fakeEnv = "GOROCE_CONFORMANCE_FAKE"

func TestMain(m *testing.M) {
	if mode, ok := os.LookupEnv(fakeEnv); ok {
		os.Exit(fakeTool(mode, os.Args[1:]))
	}
	os.Exit(m.Run())
}

func fakeTool(mode string, args []string) int {
	tool, ok := ToolByName(args[0])
	if !ok {
		fmt.Fprintf(os.Stderr, "roced: unknown command %q\n", args[0])
		return 2
	}
	if tool.Family == CM {
		return fakeRping(mode, args[1:])
	}
	valued := map[string]bool{"-d": true, "-g": true, "-x": true, "-s": true, "-n": true, "-m": true, "-p": true, "-q": true, "-A": true}
	if tool.Family == Perftest {
		valued["-c"] = true
	}
	flags := map[string]string{}
	server := ""
	for i := 1; i < len(args); i++ {
		switch a := args[i]; {
		case valued[a] && i+1 < len(args):
			flags[a] = args[i+1]
			i++
		case strings.HasPrefix(a, "-"):
			flags[a] = "true"
		default:
			server = a
		}
	}
	role := "client"
	if server == "" {
		role = "server"
	}
	behave := map[string]string{}
	for _, kv := range strings.Split(mode, ",") {
		if r, b, ok := strings.Cut(kv, "="); ok {
			behave[r] = b
		}
	}
	port := flags["-p"]
	if port == "" {
		port = strconv.Itoa(DefaultPort)
	}
	switch behave[role] {
	case "exit":
		fmt.Fprintln(os.Stderr, "fake: refusing to start")
		return 2
	case "hang-before":
		time.Sleep(time.Hour)
	case "late":
		waitRejected(port)
	}
	size, _ := strconv.Atoi(flags["-s"])
	if tool.Atomic {
		size = AtomicSize
	}
	iters, _ := strconv.Atoi(flags["-n"])
	// With -R the fake connects as a CM client would (a refused start is
	// a REJ, which the harness answers by starting it again); "tcp" only
	// makes its banner say it exchanged over TCP, the side that ignored -R.
	viaCM := flags["-R"] == "true"
	var conn net.Conn
	var err error
	if role == "server" {
		ln, lerr := net.Listen("tcp", net.JoinHostPort(flags["-d"], port))
		if lerr != nil {
			fmt.Fprintln(os.Stderr, lerr)
			return 1
		}
		conn, err = ln.Accept()
		ln.Close()
	} else {
		conn, err = net.Dial("tcp", net.JoinHostPort(server, port))
	}
	switch {
	case err != nil && viaCM:
		// What perftest's -R client prints for a REJ, whatever its reason.
		markRejected(port)
		fmt.Fprintln(os.Stderr, "Unexpected CM event bl blka 8\n Unable to perform rdma_client function\n Unable to init the socket connection")
		return 1
	case err != nil:
		fmt.Fprintf(os.Stderr, "Couldn't connect: %v\n", err)
		return 1
	case viaCM && behave[role] != "tcp":
		fmt.Println(" Data ex. method : rdma_cm")
	case tool.Family == Perftest:
		fmt.Println(" Data ex. method : Ethernet")
	}
	fmt.Fprintf(conn, "%s %s\n", role, flags["-d"])
	peer, _ := bufio.NewReader(conn).ReadString('\n')
	conn.Close()
	switch behave[role] {
	case "fail":
		fmt.Fprintln(os.Stderr, "Failed status transport retry counter exceeded (12) for wr_id 1")
		return 1
	case "hang":
		time.Sleep(time.Hour)
	}
	if tool.Family == Pingpong {
		fmt.Printf("  local address:  LID 0x0000, QPN 0x000011, PSN 0x000001, GID ::ffff:%s\n", flags["-d"])
		fmt.Printf("  remote address: LID 0x0000, QPN 0x000011, PSN 0x000002, GID ::ffff:%s\n", strings.Fields(peer + " x x")[1])
		// As the tools do: both figures from one time, 10 ms here.
		const usec = 10000.0
		fmt.Printf("%d bytes in %.2f seconds = %.2f Mbit/sec\n", size*iters*2, usec/1e6, float64(size*iters*2)*8/usec)
		fmt.Printf("%d iters in %.2f seconds = %.2f usec/iter\n", iters, usec/1e6, usec/float64(iters))
		if behave[role] == "baddata" {
			fmt.Println("invalid data in page 0")
		}
		return 0
	}
	rowFor := tool.ClientRow
	if role == "server" {
		rowFor = tool.ServerRow
	}
	if rowFor == NoRow {
		fmt.Println("---------------------------------------------------------------------------------------")
		return 0
	}
	if tool.Latency {
		fmt.Println(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ")
		fmt.Printf(" %d      %d          29.18          1469.98      35.56    \t       109.03      \t238.67 \t\t1469.98 \t\t1469.98\n", size, iters)
	} else {
		fmt.Println(" #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]")
		const rate = 0.009939 // Mpps; the bandwidth follows from it as in perftest
		avg := rate * 1e6 * float64(size) / (1 << 20)
		fmt.Printf(" %d         %d              %.2f               %.2f   \t\t     %.6f\n", size, iters, avg, avg, rate)
	}
	return 0
}

// fakeRping is a minimal rping: the "connection" is TCP on -a and -p, and
// a client that finds nothing listening prints what rping prints for the
// REJ 8 a CM sends then. Roles misbehave as fakeTool's do, plus
// "server=late" (listens once a client was turned away) and "client=rej28" (rejected for
// another reason).
func fakeRping(mode string, args []string) int {
	flags := map[string]string{}
	for i := 0; i < len(args); i++ {
		switch a := args[i]; a {
		case "-a", "-I", "-p", "-C", "-S":
			flags[a] = args[i+1]
			i++
		default:
			flags[a] = "true"
		}
	}
	role := "client"
	if flags["-s"] == "true" {
		role = "server"
	}
	behave := ""
	for _, kv := range strings.Split(mode, ",") {
		if r, b, ok := strings.Cut(kv, "="); ok && r == role {
			behave = b
		}
	}
	count, _ := strconv.Atoi(flags["-C"])
	size, _ := strconv.Atoi(flags["-S"])
	addr := net.JoinHostPort(flags["-a"], flags["-p"])
	switch behave {
	case "late":
		waitRejected(flags["-p"])
	case "hang-before":
		time.Sleep(time.Hour)
	case "rej28":
		fmt.Fprintln(os.Stderr, "cma event RDMA_CM_EVENT_REJECTED, error 28")
		return 255
	}
	prefix := "ping data: "
	if role == "server" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		conn, err := ln.Accept()
		if err != nil {
			return 1
		}
		conn.Close()
		prefix = "server " + prefix
	} else {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			markRejected(flags["-p"])
			fmt.Fprintln(os.Stderr, "cma event RDMA_CM_EVENT_REJECTED, error 8")
			fmt.Fprintln(os.Stderr, "wait for CONNECTED state 4")
			fmt.Fprintln(os.Stderr, "connect error -1")
			return 255
		}
		conn.Close()
	}
	for i := 0; i < count; i++ {
		fmt.Println(prefix + RpingMessage(i, size))
	}
	fmt.Fprintln(os.Stderr, role+" DISCONNECT EVENT...")
	return 0
}

// A "late" fake server listens only once a client has been turned away,
// which the client marks with a file named after the port: an order of
// events, not a guess at how long a loaded machine takes to start the
// client.
// rejectedMark is the file by which a fake client tells a late fake
// server that it was refused, in the directory of the test that started
// them (fakePeer): a mark left in a shared directory by an earlier run, on
// a port a later run draws again, let that run's late server listen before
// its client was ever refused.
func rejectedMark(port string) string {
	dir := os.Getenv("GOROCE_FAKE_MARKS")
	if dir == "" {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "goroce-fake-rejected-"+port)
}

func markRejected(port string) { os.WriteFile(rejectedMark(port), nil, 0o600) }

func waitRejected(port string) {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(rejectedMark(port)); err == nil {
			break
		}
	}
	os.Remove(rejectedMark(port))
}

// TestRunRping: an rping case through the harness with a fake rping,
// whose server lists no listener on a stats socket (fakePeer). A
// client rejected for want of a listener (REJ 8) is started again until
// the server listens (a start-up wait: the case passes, with a note); a
// client rejected for any other reason fails the case at once; a server
// that never listens fails it when the listen timeout is over.
func TestRunRping(t *testing.T) {
	one := func(c Case) bool { return c.Size == 64 && c.Dir == RocedServer }
	for _, tc := range []struct {
		name, mode string
		result     string
		reason     string // a substring of the reasons
		note       string // a substring of the notes
	}{
		{name: "pass", mode: "", result: Pass},
		{name: "late server", mode: "server=late", result: Pass, note: "the server rejected the first"},
		{name: "other rejection", mode: "client=rej28", result: Fail, reason: "client (roced) exit status 255: cma event RDMA_CM_EVENT_REJECTED, error 28"},
		{name: "server never listens", mode: "server=hang-before", result: Fail, reason: "client (roced) exit status 255: cma event RDMA_CM_EVENT_REJECTED, error 8",
			note: "each rejected with REJ 8: nothing listened within 3s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runOne(t, tc.mode, one, "rping")
			if r.Result != tc.result || !strings.Contains(strings.Join(r.Reasons, "\n"), tc.reason) ||
				!strings.Contains(strings.Join(r.Notes, "\n"), tc.note) {
				t.Errorf("%s %q %q; want %s, reason %q, note %q", r.Result, r.Reasons, r.Notes, tc.result, tc.reason, tc.note)
			}
			// The fake server is a process of its own and may listen after
			// the client's first try: a start-up wait is the only note.
			for _, n := range r.Notes {
				if tc.note == "" && !strings.Contains(n, "(no listener yet)") {
					t.Errorf("note %q", n)
				}
			}
			if tc.result == Pass && FigureText(r.Figures) != "100 pings (client)" {
				t.Errorf("figure %q", FigureText(r.Figures))
			}
		})
	}
}

// TestRunPerftestCM: a perftest -R case through the harness with a fake
// perftest. Its server lists no listener on a stats socket (fakePeer), so
// a client rejected for want of a listener is started again until the
// server listens; a side that ignores -R fails.
func TestRunPerftestCM(t *testing.T) {
	one := func(c Case) bool { return c.ViaCM() && c.Dir == RocedServer }
	for _, tc := range []struct {
		name, mode string
		result     string
		reason     string // a substring of the reasons
		note       string // a substring of the notes
	}{
		{name: "pass", mode: "", result: Pass},
		{name: "late server", mode: "server=late", result: Pass, note: "the server rejected the first"},
		{name: "server never listens", mode: "server=hang-before", result: Fail, reason: "Unexpected CM event bl blka 8",
			note: "each rejected with REJ 8: nothing listened within 3s"},
		{name: "client over TCP", mode: "client=tcp", result: Fail, reason: `client (roced): no " Data ex. method : rdma_cm" line`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runOne(t, tc.mode, one, "write_bw")
			if r.Case != "write_bw/RC/s65536/R" || r.Result != tc.result || !strings.Contains(strings.Join(r.Reasons, "\n"), tc.reason) ||
				!strings.Contains(strings.Join(r.Notes, "\n"), tc.note) {
				t.Errorf("%s %s %q %q; want %s, reason %q, note %q", r.Case, r.Result, r.Reasons, r.Notes, tc.result, tc.reason, tc.note)
			}
		})
	}
}

// runOne runs the one case of tool that pick selects through the harness,
// with the fake tool in mode on both sides, and returns its result.
func runOne(t *testing.T, mode string, pick func(Case) bool, tool string) Result {
	t.Helper()
	rep := Run(context.Background(), fakePeer(t, mode), casesFor(t, pick, tool), Options{
		Port: freePort(t), Timeout: 8 * time.Second, ListenTimeout: 3 * time.Second, Grace: 500 * time.Millisecond,
	})
	if len(rep.Results) != 1 {
		t.Fatalf("%d results", len(rep.Results))
	}
	return rep.Results[0]
}

// The loopback pair this package's tests give roced: no other package's
// tests use it, so that make unit can run this package beside the others
// (its -exec, scripts/unit-exec), which share 127.0.0.1 and 127.0.0.2.
const (
	testAddrA = "127.0.40.1"
	testAddrB = "127.0.40.2"
)

var (
	portMu   sync.Mutex
	portNext int // the next span's base; 0: none drawn yet
)

// freePort's spans lie in [portLow, 32768): other packages' tests use
// fixed TCP ports below 20000 (perftest's 18515 and 19300 up, pingpong's
// 18515, roced's 19600 to 19950), and this package runs beside them.
const portLow = 21000

// freePort returns the base of a run of 1000 TCP ports (Run gives case i
// the port base+i%1000) that are free now and lie below the kernel's
// ephemeral range (32768 up): a port from the ephemeral range could be
// taken between cases by the source port of some client's connection.
//
// Each call takes the span after the last one's (from a random start),
// so that tests running in parallel never share a port.
func freePort(t *testing.T) int {
	t.Helper()
	const span = 1000
	portMu.Lock()
	defer portMu.Unlock()
	for try := 0; try < 50; try++ {
		if portNext == 0 || portNext+span > 32768 {
			portNext = portLow + mrand.IntN(32768-portLow-span)
		}
		base := portNext
		portNext += span
		ok := true
		for p := base; p < base+span && ok; p += 97 { // a sample: a busy run fails fast
			ln, err := net.Listen("tcp", fmt.Sprintf(":%d", p))
			if err != nil {
				ok = false
				break
			}
			ln.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free run of TCP ports below 32768")
	return 0
}

// fakePeer is SelfPeer with this test binary as roced, each side's
// commands run with the fake's mode and the test's mark directory in
// their environment (env(1) in the runner's wrap, not t.Setenv, so that
// tests with fakes can run in parallel).
func fakePeer(t *testing.T, mode string) *Peer {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := SelfPeer(exe, testAddrA, testAddrB, nil)
	env := []string{"env", fakeEnv + "=" + mode, "GOROCE_FAKE_MARKS=" + t.TempDir()}
	for _, s := range []*Side{&p.Subject, &p.Ref} {
		r := LocalRunner()
		r.Wrap = func(script string) []string { return append(append([]string(nil), env...), "sh", "-c", script) }
		s.Runner = r
		// The fake tools list no listener on a stats socket: their
		// client starts at once, and the REJ 8 start-up retry behind the
		// wait on the listing is what their cases exercise.
		s.CMWaiter = startAtOnce{}
	}
	return p
}

// startAtOnce is a CMListenWaiter that does not wait.
type startAtOnce struct{}

func (startAtOnce) WaitCMListen(context.Context, int, time.Duration) error { return nil }

func casesFor(t *testing.T, re func(Case) bool, tools ...string) []Case {
	t.Helper()
	all, err := Matrix(MatrixOptions{MTU: 1024, Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	var cs []Case
	for _, c := range all {
		if re(c) {
			cs = append(cs, c)
		}
	}
	return cs
}

func TestRunFake(t *testing.T) {
	// Side by side with TestSelfMatrix and with each other: most of their
	// time is processes starting and timeouts expiring on purpose.
	t.Parallel()
	small := func(c Case) bool {
		return c.Transport == RC && (c.Size <= 1 || c.Tool.Atomic && strings.Contains(c.Name(), "FETCH"))
	}
	for _, tc := range []struct {
		name     string
		mode     string
		timeout  time.Duration // each side's; default 8s
		listen   time.Duration // how long a server may take to listen; default 15s
		tools    []string
		results  []string          // per case, in matrix order
		reasons  map[int][]string  // case index -> reason substrings
		detail   []string          // substrings of the text report
		artifact map[string]string // file in the first case's directory -> substring
	}{
		{name: "all pass", mode: "", tools: []string{"rc_pingpong", "write_bw", "read_lat", "atomic_lat"},
			results: []string{Pass, Pass, Pass, Pass, Pass, Pass, Pass, Pass},
			artifact: map[string]string{
				"server.stdout": "100 bytes in 0.01 seconds",
				"client.stdout": "remote address",
				"case.txt":      "pass rc_pingpong/RC/s1 roced-server",
			}},
		{name: "client fails, server hangs", mode: "client=fail,server=hang", tools: []string{"rc_pingpong"},
			results: []string{Fail, Fail},
			reasons: map[int][]string{0: {"server (roced) was stopped by the harness",
				"client (roced) exit status 1: Failed status transport retry counter exceeded"}},
			detail: []string{"FAIL rc_pingpong/RC/s1 roced-server", "exit 1 after",
				"stderr| Failed status transport retry counter exceeded (12) for wr_id 1", "stopped by the harness"}},
		{name: "server exits at once", mode: "server=exit", tools: []string{"rc_pingpong"},
			results: []string{Fail, Fail},
			reasons: map[int][]string{1: {"server (roced) exit status 2: fake: refusing to start",
				"client (roced) did not run: not started: the server exited before listening"}}},
		{name: "server never listens", mode: "server=hang-before", tools: []string{"write_bw"}, listen: 3 * time.Second,
			results: []string{Fail, Fail},
			reasons: map[int][]string{0: {"server (roced) was stopped by the harness", "client (roced) did not run: not started"}},
			detail:  []string{"nothing listens on TCP port"}},
		// The server must finish within the same timeout, after two -race
		// processes started and exchanged: 3 s was too short under load.
		{name: "client times out", mode: "client=hang", timeout: 8 * time.Second, tools: []string{"read_lat"},
			results: []string{Fail, Fail},
			reasons: map[int][]string{0: {"client (roced) timed out after"}}},
		{name: "data check", mode: "server=baddata", tools: []string{"rc_pingpong"},
			results: []string{Fail, Fail},
			reasons: map[int][]string{0: {"server (roced): data check (-c) failed: invalid data in page(s) [0]"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cases := casesFor(t, small, tc.tools...)
			if tc.timeout == 0 {
				tc.timeout = 8 * time.Second
			}
			if tc.listen == 0 {
				// The fake tools are this -race test binary: under load
				// one took more than 3 s to listen.
				tc.listen = 15 * time.Second
			}
			art := t.TempDir()
			var progress strings.Builder
			rep := Run(context.Background(), fakePeer(t, tc.mode), cases, Options{
				Port: freePort(t), Timeout: tc.timeout, ListenTimeout: tc.listen, Grace: 500 * time.Millisecond,
				Artifacts: art, Progress: &progress,
			})
			if len(rep.Results) != len(tc.results) {
				t.Fatalf("%d results, want %d", len(rep.Results), len(tc.results))
			}
			for i, r := range rep.Results {
				if r.Result != tc.results[i] {
					t.Errorf("%s: %s %q, want %s", r.Case+"@"+r.Direction, r.Result, r.Reasons, tc.results[i])
				}
			}
			for i, want := range tc.reasons {
				match(t, "reasons", rep.Results[i].Reasons, want)
			}
			if rep.OK() != (tc.mode == "") {
				t.Errorf("OK() = %v", rep.OK())
			}
			if strings.Contains(progress.String(), "<- server (roced) was stopped") {
				t.Errorf("a progress line blames the stopped server:\n%s", progress.String())
			}
			if n := strings.Count(progress.String(), "\n"); n != len(cases) {
				t.Errorf("%d progress lines, want %d:\n%s", n, len(cases), progress.String())
			}
			var text strings.Builder
			rep.WriteText(&text)
			for _, want := range append(tc.detail, fmt.Sprintf("%d passed", rep.Passed)) {
				if !strings.Contains(text.String(), want) {
					t.Errorf("report lacks %q:\n%s", want, text.String())
				}
			}
			for f, want := range tc.artifact {
				b, err := os.ReadFile(filepath.Join(rep.Results[0].Dir, f))
				if err != nil || !strings.Contains(string(b), want) {
					t.Errorf("%s: %v, %q lacks %q", f, err, b, want)
				}
			}
			js := filepath.Join(art, "report.json")
			if err := rep.WriteJSON(js); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(js)
			var generic map[string]any
			if err := json.Unmarshal(b, &generic); err != nil {
				t.Fatalf("report JSON does not parse: %v", err)
			}
			if got := len(generic["results"].([]any)); got != len(cases) {
				t.Errorf("JSON has %d results, want %d", got, len(cases))
			}
		})
	}
}

func TestRunBudget(t *testing.T) {
	cases := casesFor(t, func(c Case) bool { return c.Size == 1 }, "rc_pingpong")
	rep := Run(context.Background(), fakePeer(t, ""), cases, Options{Port: freePort(t), Budget: time.Nanosecond})
	if rep.NotRun != len(cases) || rep.OK() {
		t.Fatalf("not run %d of %d, OK %v", rep.NotRun, len(cases), rep.OK())
	}
	match(t, "reasons", rep.Results[0].Reasons, []string{"time budget (1ns) was used up"})

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep = Run(ctx, fakePeer(t, ""), cases, Options{Port: freePort(t)})
	if rep.NotRun != len(cases) {
		t.Fatalf("interrupted run: %d not run of %d", rep.NotRun, len(cases))
	}
}

// TestRunPrinted plays the person at the other host in --print mode: it
// reads the printed command lines, runs them, and presses Enter once a
// printed server listens. roced's side (the fake tool here) is judged; the
// printed side is a note.
func TestRunPrinted(t *testing.T) {
	t.Setenv(fakeEnv, "")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW := io.Pipe()
	inR, inW := io.Pipe()
	pr := &PrintRunner{Out: outW, In: bufio.NewReader(inR)}
	p, err := RemotePeer(exe, RemoteConfig{Host: "hca-host", Addr: testAddrB, Dev: testAddrB, GID: 1,
		LocalDev: testAddrA, Print: pr}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The person's real tool is the fake too: same binary, no roced prefix,
	// so give the printed side the program and let it keep its command line.
	p.Ref.Roced = exe

	var person sync.WaitGroup
	person.Add(1)
	go func() {
		defer person.Done()
		sc := bufio.NewScanner(outR)
		next := false
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, ">>> run on hca-host"):
				next = true
			case next:
				next = false
				cmd := exec.Command("sh", "-c", strings.TrimSpace(line))
				if err := cmd.Start(); err != nil {
					t.Error(err)
					return
				}
				go cmd.Wait()
			case strings.HasPrefix(line, ">>> press Enter"):
				f := strings.Fields(line)
				port, _ := strconv.Atoi(strings.TrimSuffix(f[len(f)-1], ")"))
				if err := LocalRunner().WaitListen(context.Background(), port, 10*time.Second); err != nil {
					t.Error(err)
				}
				fmt.Fprintln(inW)
			}
		}
	}()
	cases := casesFor(t, func(c Case) bool { return c.Size == 1 && c.Transport == RC }, "rc_pingpong", "read_lat")
	rep := Run(context.Background(), p, cases, Options{Port: freePort(t), Timeout: 20 * time.Second, ListenTimeout: 10 * time.Second})
	outW.Close()
	person.Wait()
	if !rep.OK() {
		var b strings.Builder
		rep.WriteText(&b)
		t.Fatalf("printed run failed:\n%s", b.String())
	}
	for _, r := range rep.Results {
		peerRole := "client"
		if r.Direction == PeerServer.String() {
			peerRole = "server"
		}
		match(t, "notes", r.Notes, []string{peerRole + " (" + testAddrB + ") was run by hand"})
	}
}
