package cm

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/transport"
)

// TestDeferAccept: a DeferAccept listener hands each REQ to the program
// (rdma_cm's CONNECT_REQUEST) and answers only when told: Accept with the
// program's own QP, made after the request came and with a receive posted
// in INIT, as rping's server does between CONNECT_REQUEST and
// rdma_accept; the ESTABLISHED event comes on Events with the Conn Accept
// returned, and a SEND crosses each way. Reject sends REJ 28 with the
// program's private data; a request still held when the listener closes
// is rejected the same way; a request answered twice is refused.
func TestDeferAccept(t *testing.T) {
	a, b, ma, mb, l := deferPair(t)
	raddr := netip.AddrPortFrom(b.addr, 7471)

	type dialed struct {
		c   *Conn
		err error
	}
	dial := func(priv string) chan dialed {
		ch := make(chan dialed, 1)
		go func() {
			c, err := ma.Dial(ctx10(t), netip.AddrPortFrom(a.addr, 5000), raddr, a.qpConfig(), ConnParams{PrivateData: []byte(priv)})
			ch <- dialed{c, err}
		}()
		return ch
	}

	// Accepted, with the program's QP.
	got := dial("hello")
	req, err := l.Request(ctx10(t))
	if err != nil {
		t.Fatal(err)
	}
	if req.RemoteAddr() != netip.AddrPortFrom(a.addr, 5000) || req.LocalAddr() != raddr {
		t.Errorf("request from %v to %v, want %v to %v", req.RemoteAddr(), req.LocalAddr(), netip.AddrPortFrom(a.addr, 5000), raddr)
	}
	if !bytes.HasPrefix(req.PrivateData(), []byte("hello")) || len(req.PrivateData()) != UserPrivateLen {
		t.Errorf("private data %q", req.PrivateData())
	}
	qc := b.qpConfig()
	init := qc.Init
	init.Type = transport.RC
	own, err := b.dev.CreateQP(b.pd, init)
	if err != nil {
		t.Fatal(err)
	}
	if err := own.Modify(&transport.QPAttr{State: transport.Init, PortNum: 1}, transport.AttrState|transport.AttrPKeyIndex|transport.AttrPort|transport.AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	cb, err := req.Accept(QPConfig{PD: b.pd, QP: own}, ConnParams{PrivateData: []byte("welcome")})
	if err != nil {
		t.Fatal(err)
	}
	if cb.QP() != own {
		t.Fatalf("the connection's QP is %v, want the program's", cb.QP())
	}
	d := <-got
	if d.err != nil {
		t.Fatal(d.err)
	}
	if !bytes.HasPrefix(d.c.PrivateData(), []byte("welcome")) {
		t.Errorf("REP private data %q", d.c.PrivateData())
	}
	for e := range mb.Events() {
		if e.Type != EventEstablished || e.Conn != cb {
			t.Fatalf("event %v, want ESTABLISHED of the accepted Conn", e)
		}
		break
	}
	sendRecv(t, a, b, d.c.QP(), cb.QP(), "ping")
	sendRecv(t, b, a, cb.QP(), d.c.QP(), "pong")
	if _, err := req.Accept(QPConfig{PD: b.pd}, ConnParams{}); !errors.Is(err, ErrAnswered) {
		t.Errorf("second Accept: %v, want ErrAnswered", err)
	}
	if err := d.c.Disconnect(ctx10(t)); err != nil {
		t.Fatal(err)
	}

	// Rejected, with private data.
	got = dial("again")
	if req, err = l.Request(ctx10(t)); err != nil {
		t.Fatal(err)
	}
	if err := req.Reject([]byte("no")); err != nil {
		t.Fatal(err)
	}
	var rej *RejectError
	if d := <-got; !errors.As(d.err, &rej) || rej.Reason != mad.RejConsumerDefined || !bytes.HasPrefix(rej.PrivateData, []byte("no")) {
		t.Fatalf("Dial after Reject: %v, want REJ 28 with the private data", d.err)
	}
	if err := req.Reject(nil); !errors.Is(err, ErrAnswered) {
		t.Errorf("second Reject: %v, want ErrAnswered", err)
	}

	// Held when the listener closes.
	got = dial("late")
	if _, err = l.Request(ctx10(t)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if d := <-got; !errors.As(d.err, &rej) || rej.Reason != mad.RejConsumerDefined {
		t.Fatalf("Dial to a closed listener's request: %v, want REJ 28", d.err)
	}
}
