package cmtime

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testharness"
	"github.com/goroce/goroce/nic/mem"
)

const (
	serverAddr = "198.51.100.2"
	clientAddr = "198.51.100.1"
)

// pipes is an in-memory stand-in for the TCP stack of 56's out-of-band
// socket: Listen registers an address, Dial to it hands the listener one
// end of a net.Pipe, Dial to nothing is refused.
type pipes struct {
	mu sync.Mutex
	ls map[string]*pipeListener
}

type pipeListener struct {
	p    *pipes
	addr string
	ch   chan net.Conn
	once sync.Once
	done chan struct{}
}

func (p *pipes) Listen(_, address string) (net.Listener, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ls == nil {
		p.ls = map[string]*pipeListener{}
	}
	_, port, _ := net.SplitHostPort(address)
	l := &pipeListener{p: p, addr: port, ch: make(chan net.Conn), done: make(chan struct{})}
	p.ls[port] = l
	return l, nil
}

func (p *pipes) Dial(ctx context.Context, _, address string) (net.Conn, error) {
	_, port, _ := net.SplitHostPort(address)
	p.mu.Lock()
	l := p.ls[port]
	p.mu.Unlock()
	if l == nil {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	a, b := net.Pipe()
	select {
	case l.ch <- b:
		return a, nil
	case <-l.done:
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.p.mu.Lock()
		if l.p.ls[l.addr] == l {
			delete(l.p.ls, l.addr)
		}
		l.p.mu.Unlock()
	})
	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{} }

// side is one process of a pair: its device, output and exit status.
type side struct {
	env      Env
	out, err testharness.SyncBuffer
}

func newSide(t *testing.T, net *mem.Net, p *pipes, addr string) *side {
	dev, m := testharness.CMNode(t, net, addr)
	s := &side{}
	s.env = Env{Dev: dev, CM: m, Stdout: &s.out, Stderr: &s.err, Listen: p.Listen, Dial: p.Dial}
	return s
}

func parse(t *testing.T, args ...string) Config {
	t.Helper()
	c, err := ParseFlags(args)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// pair runs a server with sargs and, once it listens, a client with
// cargs; it returns both sides and their exit statuses. stop, if set,
// ends the server (44's runs until killed) once the client is done.
func pair(t *testing.T, sargs, cargs []string, stop bool) (srv, cli *side, scode, ccode int) {
	t.Helper()
	net := mem.NewNet(1)
	p := &pipes{}
	srv, cli = newSide(t, net, p, serverAddr), newSide(t, net, p, clientAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sctx, sstop := context.WithCancel(ctx)
	defer sstop()
	listening := make(chan struct{})
	srv.env.Listening = func(netip.AddrPort) { close(listening) }
	done := make(chan int, 1)
	go func() { done <- Run(sctx, parse(t, sargs...), srv.env) }()
	select {
	case <-listening:
	case code := <-done:
		t.Fatalf("the server exited %d:\n%s%s", code, srv.out.String(), srv.err.String())
	}
	ccode = Run(ctx, parse(t, cargs...), cli.env)
	if stop {
		sstop()
	}
	return srv, cli, <-done, ccode
}

// check compares a side's stdout with WantSkeleton and wants stderr empty.
func check(t *testing.T, who string, s *side, v Version, server bool, n int, bound bool) {
	t.Helper()
	if got, want := Skeleton(s.out.String()), WantSkeleton(v, server, n, bound); got != want {
		t.Errorf("%s stdout:\n%s\nits skeleton:\n%s\nwant:\n%s", who, s.out.String(), got, want)
	}
	if s.err.String() != "" {
		t.Errorf("%s stderr: %s", who, s.err.String())
	}
}

// TestRun56: rdma-core 56's exchange between two roced sides over the
// in-memory network: the warm-up, 8 connections with QPs, 8 without,
// each side's lines and tables as cmtime prints them, and figures that
// add up (the steps roced times are timed for every connection).
func TestRun56(t *testing.T) {
	srv, cli, scode, ccode := pair(t, []string{"-b", serverAddr, "-c", "8"},
		[]string{"-s", serverAddr, "-b", clientAddr, "-c", "8", "-n", "3"}, false)
	if scode != 0 || ccode != 0 {
		t.Fatalf("server %d, client %d\n%s%s\n%s%s", scode, ccode, srv.out.String(), srv.err.String(), cli.out.String(), cli.err.String())
	}
	check(t, "server", srv, V56, true, 8, false)
	cout := strings.ReplaceAll(cli.out.String(), "threads                 3", "threads                 1")
	if got, want := Skeleton(cout), WantSkeleton(V56, false, 8, true); got != want || cli.err.String() != "" {
		t.Errorf("client stdout:\n%s\nwant the skeleton:\n%s\nstderr: %s", cout, want, cli.err.String())
	}
	// The QP test's cm connect: 8 connections timed, a total and a
	// maximum that are not 0.
	for _, l := range strings.Split(cout, "\n") {
		if strings.HasPrefix(l, "cm connect") {
			f := strings.Fields(l)
			if f[3] == "0" || f[6] == "0" {
				t.Errorf("client %q: nothing timed", l)
			}
			break
		}
	}
}

// TestRun56Mimic: -m makes the QP test a simulated one (no QPs, the
// delay instead of each QP verb): its table says cm_conn.
func TestRun56Mimic(t *testing.T) {
	srv, cli, scode, ccode := pair(t, []string{"-c", "3"}, []string{"-s", serverAddr, "-c", "3", "-m", "50"}, false)
	if scode != 0 || ccode != 0 {
		t.Fatalf("server %d, client %d\n%s%s\n%s%s", scode, ccode, srv.out.String(), srv.err.String(), cli.out.String(), cli.err.String())
	}
	out := cli.out.String()
	if !strings.Contains(out, "Connect (3) simulated QPs test (delay 50 us)\n") || strings.Contains(out, "qp_conn") {
		t.Errorf("client:\n%s", out)
	}
}

// TestRunLegacy: rdma-core 44's exchange: a client told to speak 44 and
// one that finds no out-of-band socket (a 44 server has none) against an
// auto server, which takes the first as 44's client, prints nothing and
// runs until stopped.
func TestRunLegacy(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cargs []string
		bound bool
	}{
		{"explicit", []string{"-s", serverAddr, "-c", "6", "--rdma-core", "44"}, false},
		{"bound", []string{"-s", serverAddr, "-b", clientAddr, "-c", "6", "--rdma-core=44"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, cli, scode, ccode := pair(t, nil, tc.cargs, true)
			if scode != 0 || ccode != 0 {
				t.Fatalf("server %d, client %d\n%s%s\n%s%s", scode, ccode, srv.out.String(), srv.err.String(), cli.out.String(), cli.err.String())
			}
			check(t, "server", srv, V44, true, 6, false)
			check(t, "client", cli, V44, false, 6, tc.bound)
		})
	}
	// Auto: a server that speaks 44 only (no socket) and an auto client.
	srv, cli, scode, ccode := pair(t, []string{"--rdma-core", "44"}, []string{"-s", serverAddr, "-c", "4"}, true)
	if scode != 0 || ccode != 0 {
		t.Fatalf("server %d, client %d\n%s%s\n%s%s", scode, ccode, srv.out.String(), srv.err.String(), cli.out.String(), cli.err.String())
	}
	check(t, "client", cli, V44, false, 4, false)
	// An auto client with a flag 44 lacks, against a 44 server: refused
	// in one line.
	_, cli, _, ccode = pair(t, []string{"--rdma-core", "44"}, []string{"-s", serverAddr, "-c", "4", "-n", "2"}, true)
	if ccode != exitFailure || !strings.Contains(cli.err.String(), "has no -n") || cli.out.String() != "" {
		t.Errorf("client %d: %q %q", ccode, cli.out.String(), cli.err.String())
	}
}

// TestRunRefused: a 56 client whose connections a server refuses (a port
// nobody listens on over the CM) prints cmtime's event line and exits 1.
func TestRunRefused(t *testing.T) {
	net := mem.NewNet(1)
	p := &pipes{}
	newSide(t, net, p, serverAddr) // its CM rejects: nothing listens
	cli := newSide(t, net, p, clientAddr)
	// A socket that answers the syncs, and no RDMA CM listener.
	l, _ := p.Listen("tcp", "0.0.0.0:7471")
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		b := make([]byte, 1)
		for {
			if _, err := c.Read(b); err != nil {
				return
			}
			c.Write(b)
		}
	}()
	defer l.Close()
	code := Run(context.Background(), parse(t, "-s", serverAddr, "-c", "2"), cli.env)
	if code != exitFailure || !strings.Contains(cli.out.String(), "event: RDMA_CM_EVENT_REJECTED, error: 8\n") {
		t.Errorf("client %d:\n%s%s", code, cli.out.String(), cli.err.String())
	}
}

// TestFlags: what is refused, in one error each.
func TestFlags(t *testing.T) {
	c := parse(t)
	if !c.IsServer() || c.Port != 7471 || c.Connections != 100 || c.BaseQPN != 1000 || c.Threads != 1 || c.Version != Auto {
		t.Errorf("defaults: %+v", c)
	}
	c = parse(t, "-s", "192.0.2.2", "-c", "16", "-p", "9000", "-q", "0", "-m", "10", "-n", "4", "-S", "-r", "3", "-t", "500")
	if c.IsServer() || c.Connections != 16 || c.Port != 9000 || c.BaseQPN != 0 || !c.Mimic || c.MimicDelay != 10 || c.Threads != 4 || !c.Socket {
		t.Errorf("parsed: %+v", c)
	}
	for _, args := range [][]string{
		{"-c", "0"}, {"-c", "x"}, {"-c", "70000"}, {"-n", "0"}, {"-q", "16777216"}, {"-p", "0"},
		{"-s", "host"}, {"-s", "0.0.0.0"}, {"-s", "192.0.2.2", "-b", "::1"}, {"-L"}, {"-C", "192.0.2.1"},
		{"-P", "3"}, {"-B", "eth0"}, {"--rdma-core", "50"}, {"--rdma-core", "44", "-S"}, {"--rdma-core", "44", "-m", "1"},
		{"extra"}, {"-h"}, {"--link", "tcp"},
	} {
		if _, err := ParseFlags(args); err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v", args, err)
		}
	}
}

// TestReports: both tables, line for line, from fixed spans.
func TestReports(t *testing.T) {
	var total times
	total[stepConnect] = span{1000, 1300}
	total[stepCreateQP] = span{10, 14}
	conns := make([]times, 2)
	conns[0][stepConnect] = span{1000, 1200}
	conns[1][stepConnect] = span{1001, 1300}
	conns[0][stepFullConnect] = span{900, 1200}
	var b strings.Builder
	report56(&b, true, 1, total, conns)
	want56 := "qp_conn                 2\nthreads                 1\n" +
		"step             avg/iter  total(us)    us/conn    sum(us)    max(us)    min(us)\n" +
		"full connect            0          0          0          0        300        300\n"
	if !strings.HasPrefix(b.String(), want56) ||
		!strings.Contains(b.String(), "\ncreate qp               2          4          0          0          0          0\n") ||
		!strings.Contains(b.String(), "\ncm connect            150        300        249        499        299        200\n") {
		t.Errorf("56:\n%s", b.String())
	}
	b.Reset()
	report44(&b, false, total, conns)
	want44 := "step              total ms     max ms     min us  us / conn\n" +
		"create id    :        0.00       0.001000000000.00       0.00\n" +
		"resolve addr :        0.00       0.001000000000.00       0.00\n" +
		"resolve route:        0.00       0.001000000000.00       0.00\n" +
		"create qp    :        0.00       0.001000000000.00       2.00\n" +
		"connect      :        0.30       0.30     200.00     150.00\n" +
		"disconnect   :        0.00       0.001000000000.00       0.00\n" +
		"destroy      :        0.00       0.001000000000.00       0.00\n"
	if b.String() != want44 {
		t.Errorf("44:\n%s\nwant:\n%s", b.String(), want44)
	}
	if Skeleton(b.String()) != strings.Join(strings.SplitAfter(WantSkeleton(V44, false, 2, false), "\n")[7:], "") {
		t.Errorf("skeleton:\n%s", Skeleton(b.String()))
	}
}
