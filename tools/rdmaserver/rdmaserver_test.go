package rdmaserver

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/testharness"
	"github.com/goroce/goroce/nic/mem"
)

func env(t *testing.T, net *mem.Net, addr string, out, errw *bytes.Buffer) Env {
	dev, m := testharness.CMNode(t, net, addr)
	return Env{Dev: dev, CM: m, Stdout: out, Stderr: errw}
}

func parse(t *testing.T, server bool, args ...string) Config {
	t.Helper()
	c, err := ParseFlags(server, args)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPair: roced rdma_server and roced rdma_client over the in-memory
// link print exactly what the examples print on success, exit 0, and
// their 16-byte SENDs crossed: one received on each side, no QP left;
// so does a server that holds the request a while before it accepts
// (--accept-delay: rdma_get_request, then rdma_accept).
func TestPair(t *testing.T) {
	for _, sargs := range [][]string{{"-p", "7471"}, {"-p", "7471", "--accept-delay", "20ms"}} {
		t.Run(strings.Join(sargs, " "), func(t *testing.T) { testPair(t, sargs) })
	}
}

func testPair(t *testing.T, sargs []string) {
	net := mem.NewNet(1)
	var sout, serr, cout, cerr bytes.Buffer
	senv := env(t, net, "198.51.100.2", &sout, &serr)
	cenv := env(t, net, "198.51.100.1", &cout, &cerr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	listening := make(chan struct{})
	senv.Listening = func(netip.AddrPort) { close(listening) }
	var wg sync.WaitGroup
	var scode int
	wg.Add(1)
	go func() { defer wg.Done(); scode = Run(ctx, parse(t, true, sargs...), senv) }()
	served := make(chan struct{})
	go func() { wg.Wait(); close(served) }()
	select {
	case <-listening:
	case <-served:
		t.Fatalf("the server exited %d before it listened: %s%s", scode, sout.String(), serr.String())
	}
	ccode := Run(ctx, parse(t, false, "-s", "198.51.100.2"), cenv)
	<-served
	if scode != 0 || ccode != 0 || serr.Len() != 0 || cerr.Len() != 0 {
		t.Fatalf("exit %d %d\nserver: %s%s\nclient: %s%s", scode, ccode, sout.String(), serr.String(), cout.String(), cerr.String())
	}
	if got := sout.String(); got != "rdma_server: start\nrdma_server: end 0\n" {
		t.Errorf("server printed %q", got)
	}
	if got := cout.String(); got != "rdma_client: start\nrdma_client: end 0\n" {
		t.Errorf("client printed %q", got)
	}
	// rdma_sends/rdma_recvs count RC data packets: each side sent its one
	// single-packet SEND and received the other's; nothing was resent.
	for i, e := range []Env{senv, cenv} {
		c := e.Dev.Counters()
		if s, r := c.RDMASends.Load(), c.RDMARecvs.Load(); s != 1 || r != 1 {
			t.Errorf("side %d: rdma_sends %d rdma_recvs %d, want 1 and 1", i, s, r)
		}
	}
}

// TestServerSendUnacknowledged: the client disconnects as soon as the
// server's SEND came, before its ACK reached the server (here every ACK
// from the client is lost; against rxe its responder completes the
// receive before it acknowledges). The server's SEND is flushed by the
// disconnection; rdma_server does not look at the status and ends 0, and
// so does roced's, saying why on stderr.
func TestServerSendUnacknowledged(t *testing.T) {
	r := runDroppingACKs(t, "198.51.100.1", "198.51.100.2", func() bool { return true })
	if r.scode != 0 || r.ccode != 0 || r.sout.String() != "rdma_server: start\nrdma_server: end 0\n" ||
		!strings.Contains(r.serr.String(), "disconnected before acknowledging the SEND") {
		t.Fatalf("exit %d %d\n%s", r.scode, r.ccode, r)
	}
}

// pairRun is what a server and a client run by runDroppingACKs printed.
type pairRun struct {
	scode, ccode           int
	sout, serr, cout, cerr bytes.Buffer
}

func (r *pairRun) String() string {
	return "server: " + r.sout.String() + r.serr.String() + "\nclient: " + r.cout.String() + r.cerr.String()
}

// runDroppingACKs runs a server on 198.51.100.2 and a client on
// 198.51.100.1, the client started once the server listens, and drops
// the RC ACKs from from to to for which drop says so.
func runDroppingACKs(t *testing.T, from, to string, drop func() bool) *pairRun {
	t.Helper()
	net := mem.NewNet(1)
	r := &pairRun{}
	senv := env(t, net, "198.51.100.2", &r.sout, &r.serr)
	cenv := env(t, net, "198.51.100.1", &r.cout, &r.cerr)
	net.SetFilter(netip.MustParseAddr(from), netip.MustParseAddr(to), func(dg []byte) mem.Verdict {
		if f, err := bth.DecodeIP(dg); err == nil {
			if p, err := bth.Parse(f.RoCE()); err == nil && p.OpCode() == bth.RCAcknowledge && drop() {
				return mem.Drop
			}
		}
		return mem.Pass
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	listening := make(chan struct{})
	senv.Listening = func(netip.AddrPort) { close(listening) }
	scode := make(chan int, 1)
	go func() { scode <- Run(ctx, parse(t, true), senv) }()
	<-listening
	r.ccode = Run(ctx, parse(t, false, "-s", "198.51.100.2"), cenv)
	r.scode = <-scode
	return r
}

// TestClientReplyBeforeACK: the server's reply reaches the client before
// the ACK of the client's SEND (here the first ACK to the client is lost,
// so the SEND is acknowledged only after its retransmission; CI met it
// against rxe on trixie). The client's receive completes first: on
// rdma_create_ep's separate send and receive CQs rdma_get_send_comp still
// finds its SEND, and the client ends 0. (The server, acknowledged,
// disconnects before the SEND's retransmission is acknowledged, which
// flushes it: the reply shows it arrived, and the client says so.)
func TestClientReplyBeforeACK(t *testing.T) {
	var dropped atomic.Bool
	r := runDroppingACKs(t, "198.51.100.2", "198.51.100.1", func() bool { return dropped.CompareAndSwap(false, true) })
	if r.scode != 0 || r.ccode != 0 || r.cout.String() != "rdma_client: start\nrdma_client: end 0\n" || !dropped.Load() ||
		r.cerr.Len() != 0 && !strings.Contains(r.cerr.String(), "its reply shows it arrived") {
		t.Fatalf("exit %d %d (ACK dropped: %v)\n%s", r.scode, r.ccode, dropped.Load(), r)
	}
}

// TestClientRefused: a client whose REQ meets no listener fails as
// rdma_connect does (ECONNREFUSED, here with the REJ's reason) and ends
// with "end -1", status 255.
func TestClientRefused(t *testing.T) {
	t.Setenv("GOROCE_SERVER_WAIT", "0") // no server ever comes: one try, as the real tool
	net := mem.NewNet(1)
	var sout, serr, cout, cerr bytes.Buffer
	env(t, net, "198.51.100.2", &sout, &serr)
	cenv := env(t, net, "198.51.100.1", &cout, &cerr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := Run(ctx, parse(t, false, "-s", "198.51.100.2", "-p", "9"), cenv)
	if code != 255 || cout.String() != "rdma_client: start\nrdma_client: end -1\n" ||
		!strings.HasPrefix(cerr.String(), "rdma_connect: Connection refused (") {
		t.Fatalf("exit %d\n%s%s", code, cout.String(), cerr.String())
	}
}

// TestLateServer: rdma_client started before rdma_server waits for it
// (GOROCE_SERVER_WAIT) where the example fails at the REJ 8.
func TestLateServer(t *testing.T) {
	net := mem.NewNet(1)
	var sout, serr, cout, cerr bytes.Buffer
	senv := env(t, net, "198.51.100.2", &sout, &serr)
	cenv := env(t, net, "198.51.100.1", &cout, &cerr)
	scode, ccode := testharness.LateServer(t, net, netip.MustParseAddr("198.51.100.2"), netip.MustParseAddr("198.51.100.1"),
		func(ctx context.Context) int { return Run(ctx, parse(t, true, "-p", "7471"), senv) },
		func(ctx context.Context) int {
			return Run(ctx, parse(t, false, "-s", "198.51.100.2", "-p", "7471"), cenv)
		})
	if scode != 0 || ccode != 0 {
		t.Fatalf("exit %d %d\nserver: %s%s\nclient: %s%s", scode, ccode, sout.String(), serr.String(), cout.String(), cerr.String())
	}
}

// TestServerCanceled: a server whose context ends before a client came
// says so (rdma_get_request) and exits 255; nothing hangs.
func TestServerCanceled(t *testing.T) {
	net := mem.NewNet(1)
	var sout, serr bytes.Buffer
	senv := env(t, net, "198.51.100.2", &sout, &serr)
	ctx, cancel := context.WithCancel(context.Background())
	senv.Listening = func(netip.AddrPort) { cancel() }
	if code := Run(ctx, parse(t, true), senv); code != 255 || !strings.HasPrefix(serr.String(), "rdma_get_request: ") ||
		sout.String() != "rdma_server: start\nrdma_server: end -1\n" {
		t.Fatalf("exit %d\n%s%s", code, sout.String(), serr.String())
	}
}

func TestParseFlags(t *testing.T) {
	c := parse(t, false)
	if c.Addr != netip.MustParseAddr("127.0.0.1") || c.Port != 7471 || c.Server {
		t.Errorf("client defaults %+v", c)
	}
	if c = parse(t, true, "--accept-delay", "8s"); c.AcceptDelay != 8*time.Second {
		t.Errorf("--accept-delay 8s: %v", c.AcceptDelay)
	}
	c = parse(t, false, "-s", "::ffff:192.0.2.2", "-p", "9999", "--link", "afpacket", "--dev", "eth0")
	if c.Addr != netip.MustParseAddr("192.0.2.2") || c.Port != 9999 || c.Link != "afpacket" || c.Dev != "eth0" {
		t.Errorf("client %+v", c)
	}
	for _, bad := range []struct {
		server bool
		args   []string
	}{
		{true, []string{"-p", "0"}}, {true, []string{"-p", "65536"}}, {true, []string{"-p", "x"}},
		{false, []string{"-s", "host.example"}}, {false, []string{"-s", "0.0.0.0"}},
		{false, []string{"extra"}}, {false, []string{"--link", "tcp"}}, {false, []string{"-p"}},
		{false, []string{"--accept-delay", "1s"}}, {true, []string{"--accept-delay", "8"}},
		{true, []string{"--accept-delay", "-1s"}},
	} {
		if _, err := ParseFlags(bad.server, bad.args); !errors.Is(err, ErrUsage) {
			t.Errorf("server=%v %q: %v", bad.server, bad.args, err)
		}
	}
}
