package testharness

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

// SyncBuffer is a bytes.Buffer that a tool's run writes while the test
// may read it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Reset forgets what was written.
func (s *SyncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}

// CMSide is one process of a test of a librdmacm tool (ucmatose,
// udaddy): its device and connection manager (CMNode), its output and its
// exit status.
type CMSide struct {
	Dev            *transport.Device // the side's device
	CM             *cm.Manager       // its connection manager
	Stdout, Stderr SyncBuffer        // what the run printed
	Code           int               // its exit status, once it ended
}

// NewCMSide attaches a CMSide at addr to net.
func NewCMSide(tb testing.TB, net *mem.Net, addr string) *CMSide {
	dev, m := CMNode(tb, net, addr)
	return &CMSide{Dev: dev, CM: m}
}

// String returns the side's stdout, then its stderr.
func (s *CMSide) String() string { return s.Stdout.String() + s.Stderr.String() }

// The addresses of CMTool.Pair's two sides.
const (
	CMServerAddr = "198.51.100.2"
	CMClientAddr = "198.51.100.1"
)

// CMTool is a librdmacm tool under test (roced's ucmatose, udaddy): how
// to read its command line and how to run it on a side.
type CMTool[C any] struct {
	// Name is the word the tool's lines start with ("cmatose", "udaddy").
	Name string
	// Parse reads the tool's command line (without its name).
	Parse func([]string) (C, error)
	// Run runs the tool on s; listening, if not nil, is called once a
	// server listens.
	Run func(ctx context.Context, cfg C, s *CMSide, listening func(netip.AddrPort)) int
}

// MustParse reads args, failing the test on an error.
func (tl CMTool[C]) MustParse(tb testing.TB, args ...string) C {
	tb.Helper()
	c, err := tl.Parse(args)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// Pair runs the tool with sargs as the server at CMServerAddr and, once it
// listens, with "-s CMServerAddr" and cargs as the client at CMClientAddr,
// over a new in-memory network, and returns both sides when both ended.
func (tl CMTool[C]) Pair(tb testing.TB, sargs, cargs []string) (srv, cli *CMSide) {
	tb.Helper()
	net := mem.NewNet(1)
	srv, cli = NewCMSide(tb, net, CMServerAddr), NewCMSide(tb, net, CMClientAddr)
	scfg, ccfg := tl.MustParse(tb, sargs...), tl.MustParse(tb, append([]string{"-s", CMServerAddr}, cargs...)...)
	RunCMPair(tb, srv, cli, func(ctx context.Context, listening func(netip.AddrPort)) int {
		return tl.Run(ctx, scfg, srv, listening)
	}, func(ctx context.Context) int { return tl.Run(ctx, ccfg, cli, nil) })
	return srv, cli
}

// CheckServerCanceled: a server whose context ends before its clients
// came says so and ends -1; nothing hangs.
func (tl CMTool[C]) CheckServerCanceled(tb testing.TB) {
	tb.Helper()
	srv := NewCMSide(tb, mem.NewNet(1), CMServerAddr)
	ctx, cancel := context.WithCancel(context.Background())
	code := tl.Run(ctx, tl.MustParse(tb, "-c", "2"), srv, func(netip.AddrPort) { cancel() })
	if code != 255 || srv.Stdout.String() != tl.Name+": starting server\ntest complete\nreturn status -1\n" ||
		srv.Stderr.String() != tl.Name+": failure in rdma_get_cm_event in connect events: context canceled\n" {
		tb.Fatalf("exit %d\n%s", code, srv)
	}
}

// CheckBindElsewhere: -b an address the device does not have fails as
// rdma_bind_addr (server) and rdma_resolve_addr (client) do.
func (tl CMTool[C]) CheckBindElsewhere(tb testing.TB) {
	tb.Helper()
	net := mem.NewNet(1)
	s := NewCMSide(tb, net, CMServerAddr)
	ctx := context.Background()
	if code := tl.Run(ctx, tl.MustParse(tb, "-b", "192.0.2.9"), s, nil); code != 255 ||
		!strings.HasPrefix(s.Stderr.String(), tl.Name+": bind address failed: ") ||
		s.Stdout.String() != tl.Name+": starting server\ntest complete\nreturn status -1\n" {
		tb.Errorf("server: exit %d\n%s", code, s)
	}
	c := NewCMSide(tb, net, CMClientAddr)
	if code := tl.Run(ctx, tl.MustParse(tb, "-s", CMServerAddr, "-b", "192.0.2.9"), c, nil); code != 255 ||
		!strings.HasPrefix(c.Stderr.String(), tl.Name+": failure getting addr: ") ||
		c.Stdout.String() != tl.Name+": starting client\n"+tl.Name+": connecting\ntest complete\nreturn status -1\n" {
		tb.Errorf("client: exit %d\n%s", code, c)
	}
}

// RunCMPair runs server (which calls listening once it listens) and then
// client, each side's exit status into its Code, and returns when both
// ended; a server that exits before it listened fails the test. Both get
// a context of a minute.
func RunCMPair(tb testing.TB, srv, cli *CMSide, server func(ctx context.Context, listening func(netip.AddrPort)) int,
	client func(ctx context.Context) int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	listening := make(chan struct{})
	var once sync.Once
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Code = server(ctx, func(netip.AddrPort) { once.Do(func() { close(listening) }) })
	}()
	select {
	case <-listening:
	case <-served:
		tb.Fatalf("the server exited %d before it listened:\n%s", srv.Code, srv)
	}
	cli.Code = client(ctx)
	<-served
}

// CheckLateServer: a client started before its server, whose first
// request the server's side refuses for want of a listener (REJ 8, or a
// SIDR_REP "unsupported"), waits for the server (GOROCE_SERVER_WAIT) and
// runs with it once it listens; both end 0 (LateServer).
func (tl CMTool[C]) CheckLateServer(t *testing.T, sargs, cargs []string) {
	t.Helper()
	net := mem.NewNet(1)
	srv, cli := NewCMSide(t, net, CMServerAddr), NewCMSide(t, net, CMClientAddr)
	scfg, ccfg := tl.MustParse(t, sargs...), tl.MustParse(t, append([]string{"-s", CMServerAddr}, cargs...)...)
	scode, ccode := LateServer(t, net, netip.MustParseAddr(CMServerAddr), netip.MustParseAddr(CMClientAddr),
		func(ctx context.Context) int { return tl.Run(ctx, scfg, srv, nil) },
		func(ctx context.Context) int { return tl.Run(ctx, ccfg, cli, nil) })
	if scode != 0 || ccode != 0 {
		t.Fatalf("server exit %d:\n%s\nclient exit %d:\n%s", scode, srv, ccode, cli)
	}
}

// LateServer runs client, then server, on net, where the server's side at
// saddr is attached already and the client's at caddr, with
// GOROCE_SERVER_WAIT a minute, and returns their exit statuses. The
// server starts once the first datagram from its side to the client is
// on its way: the refusal of the client's first request (no listener
// yet), seen by a filter on the in-memory path, so the order is certain
// without a sleep. A client that failed has its server stopped, as a
// person would stop it.
func LateServer(t *testing.T, net *mem.Net, saddr, caddr netip.Addr, server, client func(context.Context) int) (scode, ccode int) {
	t.Helper()
	t.Setenv("GOROCE_SERVER_WAIT", "1m")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	refused := make(chan struct{})
	var once sync.Once
	net.SetFilter(saddr, caddr, func([]byte) mem.Verdict {
		once.Do(func() { close(refused) })
		return mem.Pass
	})
	clientDone := make(chan struct{})
	go func() { defer close(clientDone); ccode = client(ctx) }()
	select {
	case <-refused:
	case <-clientDone:
		t.Fatalf("the client exited %d before its server was refused", ccode)
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	served := make(chan struct{})
	go func() { defer close(served); scode = server(sctx) }()
	<-clientDone
	if ccode != 0 {
		stop()
	}
	<-served
	return scode, ccode
}
