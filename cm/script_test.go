package cm

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/manualclock"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

// A scripted peer: a second device whose QP1 the test drives by hand,
// MAD by MAD, against a Manager whose timers run on a fake clock. Nothing
// here waits for something not to happen: whether the manager sent a MAD
// is read from its counters once it has handled what it was sent (its
// timers fire inside Advance, so a retry has been sent when Advance
// returns).
type script struct {
	t     *testing.T
	peer  *node
	rx    chan mad.MAD
	m     *Manager // the manager under test
	n     *node    // its device
	clk   *manualclock.Clock
	fed   uint64 // MADs sent to the manager
	guid  uint64
	qpn   uint32
	psn   uint32
	comm  uint32
	tid   uint64
	sport uint16
}

func newScript(t *testing.T) *script {
	net := mem.NewNet(1)
	clk := manualclock.New()
	s := &script{t: t, clk: clk, rx: make(chan mad.MAD, 64), guid: 0x5054_00ff_fe52_7865,
		qpn: 0x11, psn: 0xabcdef, comm: 0x3e986ae9, tid: 0x00000004e96a983e, sport: 0x869f}
	s.n = memNode(t, net, "192.0.2.1", clk)
	s.m = newManager(t, s.n, clk)
	s.peer = memNode(t, net, "192.0.2.2", nil)
	detach, err := s.peer.dev.AttachGSI(func(_, _ netip.Addr, b []byte) {
		m, err := mad.ParseCM(append([]byte(nil), b...))
		if err != nil {
			t.Errorf("the manager sent a bad MAD: %v", err)
			return
		}
		s.rx <- m
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(detach)
	return s
}

// send sends a MAD to the manager and waits until it has handled it.
func (s *script) send(msg mad.MAD) {
	s.t.Helper()
	if err := sendGSI(s.peer.dev, s.peer.addr, s.n.addr, msg); err != nil {
		s.t.Fatal(err)
	}
	s.fed++
	s.waitHandled()
}

func (s *script) waitHandled() {
	s.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); s.m.Stats().Received < s.fed; {
		if time.Now().After(deadline) {
			s.t.Fatalf("the manager handled %d MADs of %d", s.m.Stats().Received, s.fed)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// expect returns the next MAD the manager sent, which must be of
// attribute a.
func (s *script) expect(a mad.AttrID) mad.MAD {
	s.t.Helper()
	select {
	case m := <-s.rx:
		if m.AttrID() != a {
			s.t.Fatalf("got %v, want %v", m.AttrID(), a)
		}
		return m
	case <-time.After(20 * time.Second):
		s.t.Fatalf("no %v arrived", a)
	}
	return nil
}

// sent returns how many MADs the manager has sent.
func (s *script) sent() uint64 { return s.m.Stats().Sent }

// req builds the REQ rping's client sends (the captured one's values) to
// port, from the scripted peer.
func (s *script) req(port uint16) mad.MAD {
	msg := newMAD(mad.AttrREQ, s.tid)
	priv := make([]byte, mad.REQPrivateDataLen)
	h := mad.CMAHdr(priv)
	h.SetPort(s.sport)
	h.SetAddrs(s.peer.addr, s.n.addr)
	copy(priv[mad.CMAHdrLen:], "from the script")
	err := msg.REQ().Put(mad.REQFields{
		LocalCommID: s.comm, ServiceID: mad.ServiceID(mad.PortSpaceTCP, port), LocalCAGUID: s.guid,
		LocalQPN: s.qpn, ResponderResources: 1, InitiatorDepth: 1, RemoteCMResponseTimeout: 20,
		StartingPSN: s.psn, LocalCMResponseTimeout: 20, RetryCount: 7, PKey: 0xffff, PathMTU: 3,
		RNRRetryCount: 7, MaxCMRetries: 15,
		Primary: mad.PathFields{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: bth.GIDFromAddr(s.peer.addr),
			RemoteGID: bth.GIDFromAddr(s.n.addr), HopLimit: 64, LocalACKTimeout: 19},
		PrivateData: priv,
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return msg
}

// rep builds the scripted peer's REP to a REQ the manager sent.
func (s *script) rep(req mad.MAD) mad.MAD {
	msg := newMAD(mad.AttrREP, req.TID())
	msg.REP().Put(mad.REPFields{LocalCommID: s.comm, RemoteCommID: req.REQ().LocalCommID(), LocalQPN: s.qpn,
		StartingPSN: s.psn, ResponderResources: 1, InitiatorDepth: 1, TargetACKDelay: 15, RNRRetryCount: 7,
		LocalCAGUID: s.guid, PrivateData: []byte("rep")})
	return msg
}

// mra builds the scripted peer's MRA, in transaction tid, for the
// manager's message what (a REQ or REP) of the manager's communication
// ID remote, asking for service timeout timeout.
func (s *script) mra(tid uint64, remote uint32, what mad.MsgKind, timeout uint8) mad.MAD {
	msg := newMAD(mad.AttrMRA, tid)
	msg.MRA().Put(mad.MRAFields{LocalCommID: s.comm, RemoteCommID: remote, MessageMRAed: what, ServiceTimeout: timeout})
	return msg
}

func pair(a mad.AttrID, tid uint64, local, remote uint32) mad.MAD {
	msg := newMAD(a, tid)
	msg.RTU().SetLocalCommID(local) // RTU and DREP share the layout
	msg.RTU().SetRemoteCommID(remote)
	return msg
}

// dial starts a Dial to the scripted peer; the result arrives on the
// returned channel.
func (s *script) dial() chan dialResult { return s.dialCtx(ctx10(s.t)) }

// dialCtx dials the scripted peer with ctx, in the background.
func (s *script) dialCtx(ctx context.Context) chan dialResult {
	ch := make(chan dialResult, 1)
	go func() {
		c, err := s.m.Dial(ctx, netip.AddrPort{}, netip.AddrPortFrom(s.peer.addr, 7174), s.n.qpConfig(), ConnParams{})
		ch <- dialResult{c, err}
	}()
	return ch
}

type dialResult struct {
	c   *Conn
	err error
}

// TestLostREQAndRTU: the manager's REQ, lost, is sent again after the
// timeout it carries, byte for byte; not a moment before. The peer's REP
// brings the QP to RTS and draws an RTU; a REP sent again (the RTU lost)
// draws another RTU and opens nothing new.
func TestLostREQAndRTU(t *testing.T) {
	s := newScript(t)
	res := s.dial()
	req1 := s.expect(mad.AttrREQ)
	r := req1.REQ()
	h, err := mad.ParseCMAHdr(r.PrivateData())
	if err != nil || r.ServiceID() != 0x0000000001061c06 || h.DstAddr() != s.peer.addr || h.SrcAddr() != s.n.addr ||
		r.Primary().RemoteGID() != bth.GIDFromAddr(s.peer.addr) || r.MaxCMRetries() != 15 ||
		r.RemoteCMResponseTimeout() != 20 || r.LocalQPN() < 0x11 || r.PKey() != 0xffff {
		t.Fatalf("REQ %+v (header %v)", r.Fields(), err)
	}
	if req1.TID()&0xffffffff != uint64(r.LocalCommID()) {
		t.Errorf("TID %#x does not end in the comm ID %#x", req1.TID(), r.LocalCommID())
	}
	s.clk.Advance(reqTimeout - 1)
	if s.sent() != 1 {
		t.Fatalf("%d MADs sent before the timeout", s.sent())
	}
	s.clk.Advance(1)
	if req2 := s.expect(mad.AttrREQ); !bytes.Equal(req2, req1) {
		t.Fatal("the retried REQ differs")
	}
	s.send(s.rep(req1))
	rtu := s.expect(mad.AttrRTU)
	if rtu.TID() != req1.TID() || rtu.RTU().LocalCommID() != r.LocalCommID() || rtu.RTU().RemoteCommID() != s.comm {
		t.Errorf("RTU %x %+v", rtu.TID(), rtu.RTU().Fields())
	}
	d := <-res
	if d.err != nil {
		t.Fatal(d.err)
	}
	a, _ := d.c.QP().Query()
	if d.c.QP().State() != transport.RTS || a.DestQPN != s.qpn || a.SQPSN != s.psn || a.RQPSN != r.StartingPSN() {
		t.Errorf("QP %v dest %#x rq_psn %#x sq_psn %#x", d.c.QP().State(), a.DestQPN, a.RQPSN, a.SQPSN)
	}
	if string(d.c.PrivateData()[:3]) != "rep" {
		t.Errorf("private data %q", d.c.PrivateData()[:8])
	}
	s.send(s.rep(req1)) // the RTU was lost
	s.expect(mad.AttrRTU)
	if st := s.m.Stats(); st.Duplicates != 1 || len(s.m.conns) != 1 || st.Retries != 1 {
		t.Errorf("%+v, %d connections", st, len(s.m.conns))
	}
}

// TestLostREPAndDuplicateREQ: the manager as the passive side: its REP,
// lost, is sent again after the timeout; a duplicate REQ, before and after
// the RTU, opens no second connection and draws no answer; the RTU hands
// the connection to Accept.
func TestLostREPAndDuplicateREQ(t *testing.T) {
	s := newScript(t)
	l, err := s.m.Listen(netip.AddrPortFrom(s.n.addr, 7174), ListenConfig{QP: s.n.qpConfig()})
	if err != nil {
		t.Fatal(err)
	}
	req := s.req(7174)
	s.send(req)
	rep1 := s.expect(mad.AttrREP)
	r := rep1.REP()
	if rep1.TID() != s.tid || r.RemoteCommID() != s.comm || r.LocalQPN() < 0x11 || r.ResponderResources() != 1 ||
		r.InitiatorDepth() != 1 || r.TargetACKDelay() != 15 {
		t.Fatalf("REP %x %+v", rep1.TID(), r.Fields())
	}
	s.send(req) // a duplicate while the REP is out
	timeout := 2*ibaTime(18) + ibaTime(20)
	s.clk.Advance(timeout - 1)
	if s.sent() != 1 || len(s.m.conns) != 1 {
		t.Fatalf("%d sent, %d connections", s.sent(), len(s.m.conns))
	}
	s.clk.Advance(1)
	if rep2 := s.expect(mad.AttrREP); !bytes.Equal(rep2, rep1) {
		t.Fatal("the retried REP differs")
	}
	s.send(pair(mad.AttrRTU, s.tid, s.comm, r.LocalCommID()))
	c, err := l.Accept(ctx10(t))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := c.QP().Query()
	if c.QP().State() != transport.RTS || a.DestQPN != s.qpn || a.SQPSN != s.psn || a.RQPSN != r.StartingPSN() ||
		c.RemoteAddr() != netip.AddrPortFrom(s.peer.addr, s.sport) || string(c.PrivateData()[:15]) != "from the script" {
		t.Errorf("QP %v dest %#x rq_psn %#x sq_psn %#x, peer %v %q", c.QP().State(), a.DestQPN, a.RQPSN, a.SQPSN,
			c.RemoteAddr(), c.PrivateData()[:15])
	}
	sent := s.sent()
	s.send(req) // a duplicate after establishment
	s.clk.Advance(10 * timeout)
	if st := s.m.Stats(); st.Duplicates != 2 || s.sent() != sent || len(s.m.conns) != 1 {
		t.Errorf("%+v, %d connections", st, len(s.m.conns))
	}
}

// TestRejectUnknownService: a REQ for a port nobody listens on is
// rejected with reason 8 (invalid service ID), answering the REQ's
// transaction and communication ID; one whose rdma_cm header names another
// address than the listener's, with 28 as rdma_cm does. Neither makes a QP.
func TestRejectUnknownService(t *testing.T) {
	s := newScript(t)
	if _, err := s.m.Listen(netip.AddrPortFrom(netip.MustParseAddr("192.0.2.77"), 7174), ListenConfig{QP: s.n.qpConfig()}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		port uint16
		why  mad.RejReason
	}{{9999, mad.RejInvalidServiceID}, {7174, mad.RejConsumerDefined}} {
		s.send(s.req(c.port))
		rej := s.expect(mad.AttrREJ)
		r := rej.REJ()
		if rej.TID() != s.tid || r.Reason() != c.why || r.RemoteCommID() != s.comm || r.LocalCommID() != 0 ||
			r.MessageRejected() != mad.MsgREQ {
			t.Errorf("port %d: REJ %x %+v", c.port, rej.TID(), r.Fields())
		}
	}
	if len(s.m.conns) != 0 || s.n.dev.LookupQP(0x11) != nil {
		t.Error("a rejected REQ left a connection or a QP")
	}
}

// establish connects the manager (passive) to the scripted peer.
func (s *script) establish() (*Conn, mad.REP) {
	l, err := s.m.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), 7174), ListenConfig{QP: s.n.qpConfig()})
	if err != nil {
		s.t.Fatal(err)
	}
	return s.establish2(l)
}

// TestDREQCrossingDREQ: both sides disconnect at once. The manager's DREQ
// is answered by the peer's own DREQ: the manager answers that with a
// DREP, stops retrying its DREQ, and enters time wait; the peer's DREP
// then changes nothing; a DREQ retried during time wait is answered
// again; after the time wait the connection is gone.
func TestDREQCrossingDREQ(t *testing.T) {
	s := newScript(t)
	c, rep := s.establish()
	local := rep.LocalCommID()
	c.Close()
	dreq := s.expect(mad.AttrDREQ)
	if d := dreq.DREQ(); d.LocalCommID() != local || d.RemoteCommID() != s.comm || d.RemoteQPN() != s.qpn ||
		dreq.TID() == s.tid || dreq.TID()&0xffffffff != uint64(local) {
		t.Fatalf("DREQ %#x %+v", dreq.TID(), d.Fields())
	}
	if c.QP().State() != transport.Err {
		t.Errorf("QP %v after Close", c.QP().State())
	}
	peerDREQ := newMAD(mad.AttrDREQ, 0x1234)
	peerDREQ.DREQ().Put(mad.DREQFields{LocalCommID: s.comm, RemoteCommID: local, RemoteQPN: c.QP().QPN()})
	s.send(peerDREQ)
	drep := s.expect(mad.AttrDREP)
	if drep.TID() != 0x1234 || drep.DREP().LocalCommID() != local || drep.DREP().RemoteCommID() != s.comm {
		t.Errorf("DREP %x %+v", drep.TID(), drep.DREP().Fields())
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("the connection did not end")
	}
	s.send(pair(mad.AttrDREP, dreq.TID(), s.comm, local)) // the peer's answer to ours
	sent := s.sent()
	s.clk.Advance(reqTimeout) // the DREQ's retry would be due
	if s.sent() != sent {
		t.Fatal("the DREQ was retried after the crossing DREQ")
	}
	s.send(peerDREQ) // its DREP lost, the peer retries
	s.expect(mad.AttrDREP)
	s.clk.Advance(ibaTime(19)) // the time wait
	if len(s.m.conns) != 0 || len(s.m.remote) != 0 {
		t.Errorf("%d connections after the time wait", len(s.m.conns))
	}
	s.send(peerDREQ) // no connection: answered all the same
	s.expect(mad.AttrDREP)
}

// TestREQTimeout: a peer that never answers gets the REQ 1 + 15 times,
// each after the REQ's timeout, then a REJ (timeout); Dial fails with
// ErrTimeout and its QP is gone.
func TestREQTimeout(t *testing.T) {
	s := newScript(t)
	res := s.dial()
	req := s.expect(mad.AttrREQ)
	for i := range maxCMRetries {
		s.clk.Advance(reqTimeout)
		if got := s.expect(mad.AttrREQ); !bytes.Equal(got, req) {
			t.Fatalf("retry %d differs", i+1)
		}
	}
	s.clk.Advance(reqTimeout)
	rej := s.expect(mad.AttrREJ)
	if rej.REJ().Reason() != mad.RejTimeout || rej.REJ().LocalCommID() != req.REQ().LocalCommID() {
		t.Errorf("REJ %+v", rej.REJ().Fields())
	}
	if d := <-res; !errors.Is(d.err, ErrTimeout) {
		t.Fatalf("Dial: %v", d.err)
	}
	if s.n.dev.LookupQP(req.REQ().LocalQPN()) != nil || len(s.m.conns) != 0 {
		t.Error("the QP or the connection outlived the timeout")
	}
}

// TestMRAHonoured: an MRA for the REQ pushes its retry back by the
// service timeout it names (plus the packet life time): no REQ goes at the
// REQ's own timeout; one goes once the MRA's has passed. A REJ then ends
// Dial with the reason.
func TestMRAHonoured(t *testing.T) {
	s := newScript(t)
	res := s.dial()
	req := s.expect(mad.AttrREQ)
	s.send(s.mra(req.TID(), req.REQ().LocalCommID(), mad.MsgREQ, 24))
	wait := ibaTime(24) + ibaTime(19)
	s.clk.Advance(wait - 1)
	if s.sent() != 1 {
		t.Fatalf("the REQ was retried %d times within the MRA's time", s.sent()-1)
	}
	s.clk.Advance(1)
	s.expect(mad.AttrREQ)
	rej := newMAD(mad.AttrREJ, req.TID())
	rej.REJ().Put(mad.REJFields{RemoteCommID: req.REQ().LocalCommID(), MessageRejected: mad.MsgREQ,
		Reason: mad.RejConsumerDefined, PrivateData: []byte("no")})
	s.send(rej)
	var re *RejectError
	if d := <-res; !errors.As(d.err, &re) || re.Reason != mad.RejConsumerDefined || string(re.PrivateData[:2]) != "no" {
		t.Fatalf("Dial: %v", d.err)
	}
}

// TestMalformedMADs: MADs that are not well-formed CM Sends are counted
// and dropped; the manager goes on.
func TestMalformedMADs(t *testing.T) {
	s := newScript(t)
	bad := func(edit func(mad.MAD)) {
		m := s.req(1)
		edit(m)
		s.send(m)
	}
	bad(func(m mad.MAD) { m.SetClassVersion(1) })
	bad(func(m mad.MAD) { m.SetBaseVersion(2) })
	bad(func(m mad.MAD) { m.SetClass(mad.ClassSubnAdm) })
	bad(func(m mad.MAD) { m.SetAttrID(0x77) })
	bad(func(m mad.MAD) { m.SetMethod(mad.MethodGetResp) })
	if st := s.m.Stats(); st.Malformed != 5 || st.Sent != 0 {
		t.Fatalf("%+v", st)
	}
	s.send(s.req(1)) // the manager still answers
	s.expect(mad.AttrREJ)
}

// TestREPTimeoutAndStaleREQ: the passive side's REP, never answered, is
// sent 1 + the REQ's 15 retries times, then withdrawn with a REJ
// (timeout) and its QP destroyed; nothing reaches Accept. Then a
// connection that ended and waits out its time wait answers a duplicate
// of its REQ with a REJ, stale connection (10).
func TestREPTimeoutAndStaleREQ(t *testing.T) {
	s := newScript(t)
	l, rep := s.listenREP()
	timeout := 2*ibaTime(18) + ibaTime(20)
	for range 15 {
		s.clk.Advance(timeout)
		s.expect(mad.AttrREP)
	}
	s.clk.Advance(timeout)
	rej := s.expect(mad.AttrREJ)
	if r := rej.REJ(); r.Reason() != mad.RejTimeout || r.MessageRejected() != mad.MsgREP ||
		r.LocalCommID() != rep.REP().LocalCommID() || r.RemoteCommID() != s.comm {
		t.Errorf("REJ %+v", r.Fields())
	}
	if s.n.dev.LookupQP(rep.REP().LocalQPN()) != nil || len(s.m.conns) != 0 || l.pending != 0 || len(l.ch) != 0 {
		t.Fatal("the timed-out connection left state behind")
	}

	s.comm++ // a new connection
	c, rep2 := s.establish2(l)
	peerDREQ := newMAD(mad.AttrDREQ, 0x77)
	peerDREQ.DREQ().Put(mad.DREQFields{LocalCommID: s.comm, RemoteCommID: rep2.LocalCommID(), RemoteQPN: c.QP().QPN()})
	s.send(peerDREQ)
	s.expect(mad.AttrDREP)
	s.send(s.req(7174)) // the old REQ again, during the time wait
	rej = s.expect(mad.AttrREJ)
	if r := rej.REJ(); r.Reason() != mad.RejStaleConn || r.RemoteCommID() != s.comm {
		t.Errorf("REJ %+v", r.Fields())
	}
	if len(s.m.conns) != 1 {
		t.Errorf("%d connections", len(s.m.conns))
	}
}

// listenREP listens on port 7174 (any address) and sends the scripted
// peer's REQ, which the manager answers with the REP it returns.
func (s *script) listenREP() (*Listener, mad.MAD) {
	s.t.Helper()
	l, err := s.m.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), 7174), ListenConfig{QP: s.n.qpConfig()})
	if err != nil {
		s.t.Fatal(err)
	}
	s.send(s.req(7174))
	return l, s.expect(mad.AttrREP)
}

// establish2 connects through an existing listener.
func (s *script) establish2(l *Listener) (*Conn, mad.REP) {
	s.send(s.req(7174))
	rep := s.expect(mad.AttrREP).REP()
	s.send(pair(mad.AttrRTU, s.tid, s.comm, rep.LocalCommID()))
	c, err := l.Accept(ctx10(s.t))
	if err != nil {
		s.t.Fatal(err)
	}
	return c, rep
}

// TestLAPUnsupported: a LAP on an established connection gets an APR
// "unsupported" with the LAP's TID and both communication IDs, each time
// it comes; a LAP naming another QP or no connection is dropped, and the
// connection and its QP go on.
func TestLAPUnsupported(t *testing.T) {
	s := newScript(t)
	c, rep := s.establish()
	local := rep.LocalCommID()
	lap := func(tid uint64, localComm, remoteComm, qpn uint32) mad.MAD {
		msg := newMAD(mad.AttrLAP, tid)
		l := msg.LAP()
		l.SetLocalCommID(localComm)
		l.SetRemoteCommID(remoteComm)
		l.SetRemoteQPN(qpn)
		return msg
	}
	for range 2 { // the APR lost, the peer sends the LAP again
		s.send(lap(0x5150, s.comm, local, c.QP().QPN()))
		apr := s.expect(mad.AttrAPR)
		a := apr.APR()
		if apr.TID() != 0x5150 || a.LocalCommID() != local || a.RemoteCommID() != s.comm || a.Status() != mad.APRUnsupported {
			t.Fatalf("APR %#x: local %#x remote %#x status %v", apr.TID(), a.LocalCommID(), a.RemoteCommID(), a.Status())
		}
	}
	sent := s.sent()
	s.send(lap(0x5151, s.comm, local, c.QP().QPN()+1)) // another QP
	s.send(lap(0x5152, s.comm, local+1, c.QP().QPN())) // no connection
	if s.sent() != sent {
		t.Fatal("a LAP naming another QP or no connection was answered")
	}
	if st := s.m.Stats(); st.Unhandled != 2 || st.Unknown < 2 {
		t.Fatalf("stats %+v", st)
	}
	select {
	case <-c.Done():
		t.Fatal("the LAP ended the connection")
	default:
	}
	if c.QP().State() != transport.RTS {
		t.Fatalf("QP in %v", c.QP().State())
	}
}
