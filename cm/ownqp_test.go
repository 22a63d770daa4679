package cm

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

// TestDialOwnQP: Dial with a QP the program made itself (QPConfig.QP),
// as cmtime makes its QPs with ibv_create_qp and moves them to INIT before
// rdma_connect: the connection uses that very QP, in RTS, and a SEND
// crosses each way. A QP of another type, or past INIT, is refused, and a
// listener refuses one QP for all its connections.
func TestDialOwnQP(t *testing.T) {
	net := mem.NewNet(1)
	a, b := memNode(t, net, "192.0.2.1", nil), memNode(t, net, "192.0.2.2", nil)
	ma, mb := newManager(t, a, nil), newManager(t, b, nil)
	l, err := mb.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), 7471), ListenConfig{QP: b.qpConfig()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	qc := a.qpConfig()
	init := qc.Init
	init.Type = transport.RC
	own, err := a.dev.CreateQP(a.pd, init)
	if err != nil {
		t.Fatal(err)
	}
	if err := own.Modify(&transport.QPAttr{State: transport.Init, PortNum: 1}, transport.AttrState|transport.AttrPKeyIndex|transport.AttrPort|transport.AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	qc.QP = own
	accepted := make(chan *Conn, 1)
	go func() {
		c, err := l.Accept(ctx10(t))
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	ca, err := ma.Dial(ctx10(t), netip.AddrPort{}, netip.AddrPortFrom(b.addr, 7471), qc, ConnParams{})
	if err != nil {
		t.Fatal(err)
	}
	cb := <-accepted
	if cb == nil {
		t.FailNow()
	}
	if ca.QP() != own || own.State() != transport.RTS {
		t.Fatalf("the connection's QP is %v (%v), want the program's %v", ca.QP(), ca.QP().State(), own)
	}
	sendRecv(t, a, b, ca.QP(), cb.QP(), "ping")
	sendRecv(t, b, a, cb.QP(), ca.QP(), "pong")
	if err := ca.Disconnect(ctx10(t)); err != nil {
		t.Fatal(err)
	}

	// Refused: a UC QP, a QP in RTS already (the one just used is in ERR).
	uc := init
	uc.Type = transport.UC
	wrong, err := a.dev.CreateQP(a.pd, uc)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []*transport.QP{wrong, own} {
		qc.QP = q
		if _, err := ma.Dial(ctx10(t), netip.AddrPort{}, netip.AddrPortFrom(b.addr, 7471), qc, ConnParams{}); err == nil {
			t.Errorf("Dial with %v in %v: no error", q.Type(), q.State())
		}
	}
	if _, err := mb.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), 7472), ListenConfig{QP: qc}); err == nil {
		t.Error("Listen with one QP for all: no error")
	}
}
