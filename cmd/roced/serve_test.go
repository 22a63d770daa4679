package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/endpoint"
	"github.com/goroce/goroce/internal/testharness"
)

// proc is a roced command started as a process of its own (TestMain).
type proc struct {
	cmd  *exec.Cmd
	out  lockedText
	done chan error
}

// lockedText is a process's output so far, read while the process still
// writes it.
type lockedText struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedText) WriteString(s string) {
	l.mu.Lock()
	l.b.WriteString(s)
	l.mu.Unlock()
}

func (l *lockedText) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startRoced starts this test binary as roced with args; ready, if not
// empty, is a line prefix the process prints once it is ready, waited for.
func startRoced(t *testing.T, ctx context.Context, ready string, args ...string) *proc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: exec.CommandContext(ctx, exe, args...), done: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), "ROCED_TEST_MAIN=1")
	pr, pw := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	seen, scanned := make(chan struct{}), make(chan struct{})
	go func(want string) {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			p.out.WriteString(line + "\n")
			if want != "" && strings.Contains(line, want) {
				close(seen)
				want = ""
			}
		}
		io.Copy(io.Discard, pr) // a line too long for the scanner must not block the process
	}(ready)
	// done reports the end only once all the output is in p.out.
	go func() { err := p.cmd.Wait(); pw.Close(); <-scanned; p.done <- err }()
	t.Cleanup(func() { p.cmd.Process.Kill(); <-p.done; p.done <- nil })
	if ready != "" {
		select {
		case <-seen:
		case err := <-p.done:
			p.done <- err
			t.Fatalf("%v ended before it was ready (%v):\n%s", args, err, p.out.String())
		case <-ctx.Done():
			t.Fatalf("%v: not ready: %s", args, p.out.String())
		}
	}
	return p
}

func (p *proc) wait(t *testing.T) error {
	t.Helper()
	err := <-p.done
	p.done <- err
	return err
}

// TestServeShared: with roced serve running, three rc_pingpong servers use
// one address and three clients another, at once, each pair checking its
// data (-c). One server is killed (SIGKILL) while its pair runs: its client
// fails, the other two pairs finish with their data right, and the server
// saw every process join.
func TestServeShared(t *testing.T) {
	if testing.Short() {
		t.Skip("roced's tools as real processes: make system runs it, without -race")
	}
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := startRoced(t, ctx, "roced serve: ready", "serve")
	// Addresses of this test's own (other packages' tests use 127.0.0.x).
	const sAddr, cAddr = "127.0.18.7", "127.0.18.8"
	servers, clients := startPairs(t, ctx, sAddr, cAddr, 18711)
	killMidTransfer(t, ctx, servers, clients)
	srv.cmd.Process.Signal(syscall.SIGTERM)
	if err := srv.wait(t); err != nil {
		t.Fatalf("roced serve: %v\n%s", err, srv.out.String())
	}
	if !strings.Contains(srv.out.String(), "6 members joined") {
		t.Fatalf("roced serve:\n%s", srv.out.String())
	}
	t.Log(srv.out.String())
}

// sent is the sent_pkts counter of a process's first device.
func sent(r []endpoint.StatsReply) uint64 {
	for _, x := range r {
		for _, d := range x.Devices {
			for _, c := range d.Counters {
				if c.Name == "sent_pkts" {
					return c.Value
				}
			}
		}
	}
	return 0
}

// waitTCP waits until a socket listens on addr:port (IPv4) or the port of
// every address, read from
// /proc/net/tcp so that no connection is made: a pingpong server takes
// the first connection as its client's.
func waitTCP(t *testing.T, ctx context.Context, addrPort string) {
	t.Helper()
	ap := netip.MustParseAddrPort(addrPort)
	a := ap.Addr().As4()
	want := fmt.Sprintf("%02X%02X%02X%02X:%04X", a[3], a[2], a[1], a[0], ap.Port())
	// The tools listen on every address: "0.0.0.0" or a dual-stack "::".
	any4, any6 := fmt.Sprintf("00000000:%04X", ap.Port()), fmt.Sprintf("%032X:%04X", 0, ap.Port())
	pollUntil(t, ctx, "a listener on "+addrPort, nil, func() bool {
		b, err := os.ReadFile("/proc/net/tcp")
		if err != nil {
			t.Fatal(err)
		}
		b6, _ := os.ReadFile("/proc/net/tcp6") // a dual-stack wildcard listener is there
		for _, line := range strings.Split(string(b)+string(b6), "\n") {
			f := strings.Fields(line)
			if len(f) > 3 && (f[1] == want || f[1] == any4 || f[1] == any6) && f[3] == "0A" { // TCP_LISTEN
				return true
			}
		}
		return false
	})
}

// TestServeSharedCM: with roced serve running, two rping servers and
// their two clients all on one address connect through the RDMA CM: the
// server hands each REQ to the process listening on its port and each
// reply to the process whose communication ID it names.
func TestServeSharedCM(t *testing.T) {
	if testing.Short() {
		t.Skip("roced's tools as real processes: make system runs it, without -race")
	}
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := startRoced(t, ctx, "roced serve: ready", "serve")
	const addr = "127.0.18.9"
	var servers, clients [2]*proc
	for i := range servers {
		port := fmt.Sprint(18731 + i)
		servers[i] = startRoced(t, ctx, "", "rping", "-s", "-a", addr, "-p", port, "-C", "20")
		waitListening(t, ctx, servers[i], addr+":"+port)
		clients[i] = startRoced(t, ctx, "", "rping", "-c", "-a", addr, "-p", port, "-C", "20", "-v")
	}
	for i := range clients {
		for _, p := range []*proc{clients[i], servers[i]} {
			if err := p.wait(t); err != nil {
				t.Fatalf("pair %d: %v\n%s", i, err, p.out.String())
			}
		}
		if n := strings.Count(clients[i].out.String(), "ping data: rdma-ping-"); n != 20 {
			t.Fatalf("client %d printed %d pings:\n%s", i, n, clients[i].out.String())
		}
	}
	srv.cmd.Process.Signal(syscall.SIGTERM)
	if err := srv.wait(t); err != nil || !strings.Contains(srv.out.String(), "4 members joined") || strings.Contains(srv.out.String(), "(0 MADs)") {
		t.Fatalf("roced serve: %v\n%s", err, srv.out.String())
	}
}

// waitListening waits until p's stats socket lists a CM listener on
// addrPort (as rdma resource show cm_id lists the kernel's).
func waitListening(t *testing.T, ctx context.Context, p *proc, addrPort string) {
	t.Helper()
	pollUntil(t, ctx, "a CM listener on "+addrPort, p, func() bool {
		r, err := endpoint.AllStats(p.cmd.Process.Pid)
		if err != nil {
			return false
		}
		for _, x := range r {
			for _, c := range x.CMIDs {
				if c.Src == addrPort {
					return true
				}
			}
		}
		return false
	})
}

// pollUntil checks cond every few milliseconds until it holds, failing
// the test when ctx ends first, or when p (if not nil) ends first: each
// wait of these tests is for an event a process shows, with a generous
// bound, never for a fixed time.
func pollUntil(t *testing.T, ctx context.Context, what string, p *proc, cond func() bool) {
	t.Helper()
	var done chan error
	if p != nil {
		done = p.done
	}
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waited in vain for %s", what)
		case err := <-done:
			done <- err
			t.Fatalf("waiting for %s, the process ended (%v):\n%s", what, err, p.out.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestServeRecipe runs the sh block of docs/tools.md's "roced serve"
// section as written, roced being this test binary: the server started
// with --background is listening when the next line runs, so the four
// pingpongs all go through it; then the PID it printed stops it.
func TestServeRecipe(t *testing.T) {
	if testing.Short() {
		t.Skip("roced's tools as real processes: make system runs it, without -race")
	}
	block, _ := testharness.ReadmeShBlock(t, "../../docs/tools.md", "## Several programs on one address")
	dir := rocedOnPath(t)
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	t.Setenv("GOROCE_SERVER_WAIT", "2m") // the clients' wait for their servers, on a loaded host
	// A file, not a pipe: the detached server keeps the shell's output
	// open after the shell ends.
	out, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sh := exec.CommandContext(ctx, "sh", "-e", "-c", block+"wait\n")
	sh.Stdout, sh.Stderr = out, out
	runErr := sh.Run()
	b, _ := os.ReadFile(out.Name())
	m := regexp.MustCompile(`roced serve: ready on \S+ \(pid (\d+)\)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no ready line with a pid (%v):\n%s", runErr, b)
	}
	pid, _ := strconv.Atoi(string(m[1]))
	defer syscall.Kill(pid, syscall.SIGKILL)
	if runErr != nil {
		t.Fatalf("the recipe: %v\n%s", runErr, b)
	}
	if n := strings.Count(string(b), "1000 iters in"); n != 4 {
		t.Fatalf("%d of the four pingpongs finished:\n%s", n, b)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Not our child: it has gone once the counters' line is out.
	pollUntil(t, ctx, "the server's counters", nil, func() bool {
		b, _ = os.ReadFile(out.Name())
		return strings.Contains(string(b), "members joined")
	})
	if !strings.Contains(string(b), "roced serve: 4 members joined") {
		t.Fatalf("not every pingpong went through the server:\n%s", b)
	}
}

// TestServeBackgroundFails: a server that cannot start says why and
// --background exits non-zero instead of waiting.
func TestServeBackgroundFails(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	startRoced(t, ctx, "roced serve: ready", "serve")
	t.Setenv("ROCED_TEST_MAIN", "1") // the server run() starts is this binary as roced
	var o, e strings.Builder
	if st := run([]string{"serve", "--background"}, &o, &e); st != 1 || !strings.Contains(e.String(), "ended before it was ready") {
		t.Fatalf("exit %d, stdout %q stderr %q", st, o.String(), e.String())
	}
}

// rocedOnPath puts a "roced" that runs this test binary as roced first on
// PATH, for a document's lines run as written; it returns its directory.
func rocedOnPath(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	wrapper := "#!/bin/sh\nROCED_TEST_MAIN=1 exec " + exe + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "roced"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	return dir
}

// TestServeAuto: with no roced serve started, three rc_pingpong servers
// use one address and three clients another, at once, as on one rxe
// device: the first process on each address owns port 4791 (its steering
// program keeps its own QPs' packets), the second finds the port taken and
// starts roced serve --auto, which joins the owner's SO_REUSEPORT group and
// relays the later processes theirs. The owner of the servers' address is
// killed (SIGKILL) while its pair runs: the two pairs served through the
// auto server finish with their data right, and the auto server ends once
// its last member has left.
func TestServeAuto(t *testing.T) {
	if testing.Short() {
		t.Skip("roced's tools as real processes: make system runs it, without -race")
	}
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(endpoint.EnvRoced, exe) // this binary is roced under ROCED_TEST_MAIN
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const sAddr, cAddr = "127.0.18.9", "127.0.18.10"
	servers, clients := startPairs(t, ctx, sAddr, cAddr, 18721)
	path, err := endpoint.SharePath()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no auto server's socket: %v", err)
	}
	// Kill the owner of the servers' address (server 0) mid-transfer.
	killMidTransfer(t, ctx, servers, clients)
	// Its members gone, the auto server ends and removes its socket.
	pollUntil(t, ctx, "the auto server to end", nil, func() bool {
		_, err := os.Stat(path)
		return os.IsNotExist(err)
	})
}

// pairIters is the iterations of the rc_pingpong pairs that must finish:
// enough that they are still running when server 0 is killed (they wait
// for it, see killMidTransfer), few enough that six processes relaying
// through a share server end within the test's bound on a loaded CI host
// (20000 took up to three minutes there).
const pairIters = 5000

// startPairs starts three pairs, their servers on sAddr at TCP ports port,
// port+1, port+2 and their clients on cAddr. Pairs 1 and 2 are rc_pingpong
// (-s 4096, data checked). Pair 0, whose server is to be killed, streams
// RDMA WRITEs (write_bw -D, for longer than the test's bound): its client
// always has requests outstanding, so it learns of the death by retries
// exhausted, as over any RC HCA. A ping-pong's client need not: killed
// after its ping was ACKed and before its pong, the server leaves the
// client with nothing outstanding, waiting on its receive for ever, as
// ibv_rc_pingpong waits over rxe.
func startPairs(t *testing.T, ctx context.Context, sAddr, cAddr string, port int) (servers, clients []*proc) {
	t.Helper()
	for i := 0; i < 3; i++ {
		p := fmt.Sprint(port + i)
		args := []string{"rc_pingpong", "-g", "1", "-p", p, "-n", fmt.Sprint(pairIters), "-s", "4096", "-c"}
		if i == 0 {
			args = []string{"write_bw", "-x", "1", "-p", p, "-D", "600", "-s", "4096"}
		}
		servers = append(servers, startRoced(t, ctx, "", append(args, "-d", sAddr)...))
		// The client waits for its server's TCP port, as the tools'
		// retries do not: dial until it answers.
		waitTCP(t, ctx, sAddr+":"+p)
		clients = append(clients, startRoced(t, ctx, "", append(args, "-d", cAddr, sAddr)...))
	}
	return servers, clients
}

// killMidTransfer kills servers[0] with SIGKILL once every client has sent
// a thousand packets (250 of a pair's pairIters iterations, -s 4096 being
// four packets at MTU 1024), and holds the pairs to the outcome: client 0
// fails, every other pair finishes its pairIters iterations.
func killMidTransfer(t *testing.T, ctx context.Context, servers, clients []*proc) {
	t.Helper()
	for i, c := range clients {
		pollUntil(t, ctx, fmt.Sprintf("client %d to get going", i), c, func() bool {
			r, err := endpoint.AllStats(c.cmd.Process.Pid)
			return err == nil && sent(r) > 1000
		})
	}
	servers[0].cmd.Process.Signal(syscall.SIGKILL)
	// Its WRITEs unanswered, client 0's QP dies of retries exhausted (IBA
	// 9.7.6.1.3) and perftest fails on the completion's status: 12,
	// IBV_WC_RETRY_EXC_ERR.
	if err := clients[0].wait(t); err == nil || !strings.Contains(clients[0].out.String(), "Failed status 12:") {
		t.Fatalf("client 0, its server killed: %v\n%s", err, clients[0].out.String())
	}
	want := fmt.Sprintf("%d iters in", pairIters)
	for i := 1; i < len(servers); i++ {
		for _, p := range []*proc{servers[i], clients[i]} {
			if err := p.wait(t); err != nil || !strings.Contains(p.out.String(), want) {
				t.Fatalf("pair %d: %v\n%s", i, err, p.out.String())
			}
		}
	}
}
