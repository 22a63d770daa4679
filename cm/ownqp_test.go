package cm

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/bth"
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
	// The RTU went with the REP: Establish is refused, as rdma_establish
	// on an id with a QP.
	if err := ca.Establish(); err != ErrState {
		t.Errorf("Establish with the CM's QP: %v, want ErrState", err)
	}
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

// TestExternalQP: both sides connect a QP the CM never touches
// (QPConfig.ExternalQPN), as rdma-core's external QP test does over
// librdmacm: the passive side moves its QP to RTS by the request's
// attributes before it accepts, the active side by the connection's once
// Dial returned at the REP (EventConnectResponse, no RTU yet), then
// Establish sends the RTU and the passive side is established. A SEND
// crosses each way; the disconnection leaves both QPs where the programs
// put them.
func TestExternalQP(t *testing.T) {
	a, b, ma, mb, l := deferPair(t)
	newQP := func(n *node) *transport.QP {
		init := n.qpConfig().Init
		init.Type = transport.RC
		q, err := n.dev.CreateQP(n.pd, init)
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	// toRTS moves q by the three attribute sets attr gives, as
	// rdma_init_qp_attr and ibv_modify_qp.
	toRTS := func(q *transport.QP, attr func(transport.QPState) (transport.QPAttr, transport.QPAttrMask, error)) {
		t.Helper()
		for _, s := range []transport.QPState{transport.Init, transport.RTR, transport.RTS} {
			at, mask, err := attr(s)
			if err != nil {
				t.Fatalf("attributes for %v: %v", s, err)
			}
			if err := q.Modify(&at, mask); err != nil {
				t.Fatalf("to %v: %v", s, err)
			}
		}
	}
	qa, qb := newQP(a), newQP(b)

	accepted := make(chan *Conn, 1)
	go func() {
		defer close(accepted)
		r, err := l.Request(ctx10(t))
		if err != nil {
			t.Error(err)
			return
		}
		toRTS(qb, func(s transport.QPState) (transport.QPAttr, transport.QPAttrMask, error) { return r.QPAttr(s, 0) })
		c, err := r.Accept(QPConfig{ExternalQPN: qb.QPN()}, ConnParams{PrivateData: []byte("rep")})
		if err != nil {
			t.Error(err)
			return
		}
		accepted <- c
	}()
	ca, err := ma.Dial(ctx10(t), netip.AddrPort{}, netip.AddrPortFrom(b.addr, 7471), QPConfig{ExternalQPN: qa.QPN()}, ConnParams{})
	if err != nil {
		t.Fatal(err)
	}
	cb := <-accepted
	if cb == nil {
		t.FailNow()
	}
	if ca.QP() != nil || ca.QPN() != qa.QPN() || qa.State() != transport.Reset {
		t.Fatalf("Dial: QP %v, QPN %#x, the program's QP in %v: want none, %#x, RESET", ca.QP(), ca.QPN(), qa.State(), qa.QPN())
	}
	if got := string(ca.PrivateData()[:3]); got != "rep" {
		t.Errorf("the REP's private data: %q", got)
	}
	if e := <-ma.Events(); e.Type != EventConnectResponse || e.Conn != ca {
		t.Fatalf("active side's event: %v, want CONNECT_RESPONSE", e)
	}
	select {
	case e := <-mb.Events():
		t.Fatalf("passive side's event before the RTU: %v", e)
	default:
	}
	toRTS(qa, ca.QPAttr)
	if err := ca.Establish(); err != nil {
		t.Fatal(err)
	}
	if err := ca.Establish(); err != ErrState {
		t.Errorf("a second Establish: %v, want ErrState", err)
	}
	if e := <-mb.Events(); e.Type != EventEstablished || e.Conn != cb {
		t.Fatalf("passive side's event: %v, want ESTABLISHED", e)
	}
	sendRecv(t, a, b, qa, qb, "ping")
	sendRecv(t, b, a, qb, qa, "pong")
	if err := ca.Disconnect(ctx10(t)); err != nil {
		t.Fatal(err)
	}
	if e := <-mb.Events(); e.Type != EventDisconnected {
		t.Fatalf("passive side's event: %v, want DISCONNECTED", e)
	}
	if qa.State() != transport.RTS || qb.State() != transport.RTS {
		t.Errorf("after the disconnection the QPs are in %v and %v: the CM moved the programs' QPs", qa.State(), qb.State())
	}
}

// TestExternalQPAttr: what the attributes say, against the REQ and REP:
// each side's RTR expects the PSN its own message carried and names the
// peer's QP, its RTS sends from the peer's PSN; the request's attributes
// before Accept are those of the accepted connection.
func TestExternalQPAttr(t *testing.T) {
	a, b, ma, mb, l := deferPair(t)
	type attrs struct{ rtr, rts transport.QPAttr }
	get := func(f func(transport.QPState) (transport.QPAttr, transport.QPAttrMask, error)) attrs {
		t.Helper()
		rtr, _, err := f(transport.RTR)
		if err != nil {
			t.Fatal(err)
		}
		rts, _, err := f(transport.RTS)
		if err != nil {
			t.Fatal(err)
		}
		return attrs{rtr, rts}
	}
	const qpnA, qpnB = 0x123, 0x456
	before := make(chan attrs, 1)
	accepted := make(chan *Conn, 1)
	go func() {
		r, err := l.Request(ctx10(t))
		if err != nil {
			t.Error(err)
			close(before)
			close(accepted)
			return
		}
		before <- get(func(s transport.QPState) (transport.QPAttr, transport.QPAttrMask, error) { return r.QPAttr(s, 0) })
		c, err := r.Accept(QPConfig{ExternalQPN: qpnB}, ConnParams{})
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	ca, err := ma.Dial(ctx10(t), netip.AddrPort{}, netip.AddrPortFrom(b.addr, 7471), QPConfig{ExternalQPN: qpnA}, ConnParams{})
	if err != nil {
		t.Fatal(err)
	}
	cb := <-accepted
	if cb == nil {
		t.FailNow()
	}
	pa, pb, pre := get(ca.QPAttr), get(cb.QPAttr), <-before
	if pre != pb {
		t.Errorf("the request's attributes %+v differ from the connection's %+v", pre, pb)
	}
	if pa.rtr.DestQPN != qpnB || pb.rtr.DestQPN != qpnA {
		t.Errorf("destination QPNs %#x and %#x, want %#x and %#x", pa.rtr.DestQPN, pb.rtr.DestQPN, qpnB, qpnA)
	}
	if pa.rts.SQPSN != pb.rtr.RQPSN || pb.rts.SQPSN != pa.rtr.RQPSN {
		t.Errorf("PSNs: a sends from %#x, b expects %#x; b sends from %#x, a expects %#x",
			pa.rts.SQPSN, pb.rtr.RQPSN, pb.rts.SQPSN, pa.rtr.RQPSN)
	}
	if pa.rtr.RQPSN != ca.lep.PSN || pb.rtr.RQPSN != cb.lep.PSN {
		t.Errorf("each side expects %#x and %#x, its message carried %#x and %#x", pa.rtr.RQPSN, pb.rtr.RQPSN, ca.lep.PSN, cb.lep.PSN)
	}
	if pa.rtr.AH.DGID != bth.GIDFromAddr(b.addr) || pb.rtr.AH.DGID != bth.GIDFromAddr(a.addr) {
		t.Errorf("destination GIDs %v and %v", pa.rtr.AH.DGID, pb.rtr.AH.DGID)
	}
	// The kernel CM's RTR gives RC the longest RNR NAK timer, code 0
	// (cm_init_qp_rtr_attr): a peer that posts its receives late is
	// waited for.
	if pa.rtr.MinRNRTimer != 0 || pb.rtr.MinRNRTimer != 0 {
		t.Errorf("RTR min_rnr_timer %d and %d, want 0 (655.36 ms)", pa.rtr.MinRNRTimer, pb.rtr.MinRNRTimer)
	}
	if _, _, err := ca.QPAttr(transport.SQD); err == nil {
		t.Error("attributes for SQD: no error")
	}
	ca.Close() // never established: a REJ withdraws the REP
	select {
	case e := <-mb.Events():
		if e.Type != EventRejected || e.Conn != cb {
			t.Errorf("passive side's event after Close before Establish: %v, want REJECTED", e)
		}
	case <-ctx10(t).Done():
		t.Error("no event on the passive side after Close before Establish")
	}
	if err := ca.Establish(); err != ErrState {
		t.Errorf("Establish after Close: %v, want ErrState", err)
	}
}
