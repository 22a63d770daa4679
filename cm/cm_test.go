package cm

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/nic/udp"
	"github.com/goroce/goroce/transport"
)

// node is one device with what a connection needs.
type node struct {
	dev  *transport.Device
	addr netip.Addr
	pd   *transport.PD
	cq   *transport.CQ
	buf  []byte
	mr   *transport.MR
}

func openNode(t testing.TB, link nic.Link, addr netip.Addr, clk clock.Clock) *node {
	t.Helper()
	dev, err := transport.Open(link, transport.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	n := &node{dev: dev, addr: addr, pd: dev.AllocPD(), cq: dev.CreateCQ(64), buf: make([]byte, 4096)}
	n.mr, err = n.pd.Register(n.buf, transport.LocalWrite|transport.RemoteRead|transport.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func memNode(t testing.TB, net *mem.Net, addr string, clk clock.Clock) *node {
	t.Helper()
	a := netip.MustParseAddr(addr)
	l, err := net.Attach(a, mem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return openNode(t, l, a, clk)
}

func (n *node) qpConfig() QPConfig {
	return QPConfig{PD: n.pd, Init: transport.QPInitAttr{SendCQ: n.cq, RecvCQ: n.cq,
		Cap: transport.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}}
}

func newManager(t testing.TB, n *node, clk clock.Clock) *Manager {
	t.Helper()
	m, err := New(n.dev, Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func ctx10(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// sendRecv posts a receive on b, a SEND of msg on a, and checks it arrives.
func sendRecv(t testing.TB, a, b *node, qa, qb *transport.QP, msg string) {
	t.Helper()
	if err := qb.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{b.mr.SGE(0, 4096)}}); err != nil {
		t.Fatal(err)
	}
	n := copy(a.buf, msg)
	if err := qa.PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{a.mr.SGE(0, n)}}); err != nil {
		t.Fatal(err)
	}
	wc := make([]transport.WC, 1)
	if _, err := b.cq.PollWait(ctx10(t), wc); err != nil || wc[0].Status != transport.Success {
		t.Fatalf("receive: %v %v", err, wc[0].Status)
	}
	if got := string(b.buf[:wc[0].ByteLen]); got != msg {
		t.Fatalf("received %q", got)
	}
	if _, err := a.cq.PollWait(ctx10(t), wc); err != nil || wc[0].Status != transport.Success {
		t.Fatalf("send: %v %v", err, wc[0].Status)
	}
}

// connectPair listens on b and dials from a, returning both connections.
// Each side's Prepare checks that it runs once, with the QP in RTS.
func connectPair(t testing.TB, a, b *node, ma, mb *Manager) (ca, cb *Conn) {
	t.Helper()
	prepared := map[*transport.QP]int{}
	var mu sync.Mutex // the two managers' goroutines
	prep := func(qc QPConfig) QPConfig {
		qc.Prepare = func(q *transport.QP) error {
			if q.State() != transport.RTS {
				t.Errorf("Prepare with the QP in %v", q.State())
			}
			mu.Lock()
			defer mu.Unlock()
			prepared[q]++
			return nil
		}
		return qc
	}
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		if prepared[ca.QP()] != 1 || prepared[cb.QP()] != 1 || len(prepared) != 2 {
			t.Errorf("Prepare ran %v", prepared)
		}
	}()
	l, err := mb.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), 7174),
		ListenConfig{QP: prep(b.qpConfig()), Params: ConnParams{PrivateData: []byte("welcome")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	accepted := make(chan *Conn, 1)
	go func() {
		c, err := l.Accept(ctx10(t))
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	ca, err = ma.Dial(ctx10(t), netip.AddrPortFrom(a.addr, 0), netip.AddrPortFrom(b.addr, 7174), prep(a.qpConfig()),
		ConnParams{PrivateData: []byte("hello"), ResponderResources: 4, InitiatorDepth: 2})
	if err != nil {
		t.Fatal(err)
	}
	cb = <-accepted
	if cb == nil {
		t.FailNow()
	}
	return ca, cb
}

// TestConnectMem: Dial and Accept over the in-memory link, over IPv4 and
// IPv6 (where rdma_cm's header carries 16-byte addresses), give two QPs in
// RTS towards each other, each with the other's private data and address
// and the responder resources and initiator depth negotiated; a SEND
// crosses each way; Close on one side ends both.
func TestConnectMem(t *testing.T) {
	for _, addrs := range [][2]string{{"192.0.2.1", "192.0.2.2"}, {"2001:db8::1", "2001:db8::2"}} {
		t.Run(addrs[0], func(t *testing.T) {
			net := mem.NewNet(1)
			a, b := memNode(t, net, addrs[0], nil), memNode(t, net, addrs[1], nil)
			ma, mb := newManager(t, a, nil), newManager(t, b, nil)
			ca, cb := connectPair(t, a, b, ma, mb)
			checkPair(t, a, b, ca, cb)
		})
	}
}

func checkPair(t *testing.T, a, b *node, ca, cb *Conn) {
	t.Helper()
	if ca.QP().State() != transport.RTS || cb.QP().State() != transport.RTS {
		t.Fatalf("states %v %v", ca.QP().State(), cb.QP().State())
	}
	if got := string(cb.PrivateData()[:5]); got != "hello" || len(cb.PrivateData()) != UserPrivateLen {
		t.Errorf("passive got private data %q (%d bytes)", got, len(cb.PrivateData()))
	}
	if got := string(ca.PrivateData()[:7]); got != "welcome" {
		t.Errorf("active got private data %q", got)
	}
	if cb.RemoteAddr().Addr() != a.addr || cb.RemoteAddr().Port() != ca.LocalAddr().Port() || ca.RemoteAddr() != netip.AddrPortFrom(b.addr, 7174) {
		t.Errorf("addresses: passive sees %v, active %v -> %v", cb.RemoteAddr(), ca.LocalAddr(), ca.RemoteAddr())
	}
	if ca.ResponderResources() != 4 || ca.InitiatorDepth() != 2 || cb.ResponderResources() != 2 || cb.InitiatorDepth() != 4 {
		t.Errorf("rd atomic: active %d/%d passive %d/%d", ca.ResponderResources(), ca.InitiatorDepth(),
			cb.ResponderResources(), cb.InitiatorDepth())
	}
	sendRecv(t, a, b, ca.QP(), cb.QP(), "ping")
	sendRecv(t, b, a, cb.QP(), ca.QP(), "pong")
	if err := ca.Disconnect(ctx10(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cb.Done():
	case <-ctx10(t).Done():
		t.Fatal("the passive side never saw the disconnection")
	}
	if ca.Err() != ErrDisconnected || cb.Err() != ErrDisconnected {
		t.Errorf("errors %v %v", ca.Err(), cb.Err())
	}
	if ca.QP().State() != transport.Err || cb.QP().State() != transport.Err {
		t.Errorf("after disconnect: %v %v", ca.QP().State(), cb.QP().State())
	}
}

// TestConnectUDP: the same over UDP on loopback, through the kernel's
// sockets (127.0.15.x, an address no other package's tests use).
func TestConnectUDP(t *testing.T) {
	open := func(addr string) *node {
		a := netip.MustParseAddr(addr)
		l, err := udp.Open(udp.Config{Addr: a})
		if err != nil {
			t.Skipf("no UDP on %v: %v", a, err)
		}
		return openNode(t, l, a, nil)
	}
	a, b := open("127.0.15.1"), open("127.0.15.2")
	ma, mb := newManager(t, a, nil), newManager(t, b, nil)
	ca, cb := connectPair(t, a, b, ma, mb)
	checkPair(t, a, b, ca, cb)
}

// TestACKTimeout: ConnParams.ACKTimeout sets the QP's local ACK timeout
// on either side (RDMA_OPTION_ID_ACK_TIMEOUT, which perftest -R sets to
// its -u), while 0 keeps the path's (the REQ's local ACK timeout, 19).
func TestACKTimeout(t *testing.T) {
	net := mem.NewNet(1)
	a, b := memNode(t, net, "192.0.2.1", nil), memNode(t, net, "192.0.2.2", nil)
	ma, mb := newManager(t, a, nil), newManager(t, b, nil)
	for _, tc := range []struct{ active, passive, wantA, wantP uint8 }{{14, 0, 14, packetLifeTime + 1}, {0, 9, packetLifeTime + 1, 9}} {
		l, err := mb.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), 7175),
			ListenConfig{QP: b.qpConfig(), Params: ConnParams{ACKTimeout: tc.passive}})
		if err != nil {
			t.Fatal(err)
		}
		ca, err := ma.Dial(ctx10(t), netip.AddrPortFrom(a.addr, 0), netip.AddrPortFrom(b.addr, 7175), a.qpConfig(),
			ConnParams{ACKTimeout: tc.active})
		if err != nil {
			t.Fatal(err)
		}
		cb, err := l.Accept(ctx10(t))
		if err != nil {
			t.Fatal(err)
		}
		qa, _ := ca.QP().Query()
		qb, _ := cb.QP().Query()
		if qa.Timeout != tc.wantA || qb.Timeout != tc.wantP {
			t.Errorf("%+v: timeouts active %d passive %d", tc, qa.Timeout, qb.Timeout)
		}
		ca.Disconnect(ctx10(t))
		l.Close()
	}
}

// deferPair makes two nodes, a (192.0.2.1) and b (192.0.2.2), on one
// in-memory net, a manager on each, and on b's port 7471 a listener whose
// requests wait for the test's Accept or Reject, as a program's
// rdma_accept answers them.
func deferPair(t *testing.T) (a, b *node, ma, mb *Manager, l *Listener) {
	t.Helper()
	net := mem.NewNet(1)
	a, b = memNode(t, net, "192.0.2.1", nil), memNode(t, net, "192.0.2.2", nil)
	ma, mb = newManager(t, a, nil), newManager(t, b, nil)
	l, err := mb.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), 7471), ListenConfig{DeferAccept: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return a, b, ma, mb, l
}
