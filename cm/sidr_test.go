package cm

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

// sidrREQ builds the SIDR_REQ librdmacm's udaddy client sends to port,
// from the scripted peer, with request ID id and its rdma_cm header naming
// dst as the server.
func (s *script) sidrREQ(port uint16, id uint32, dst netip.Addr) mad.MAD {
	msg := newMAD(mad.AttrSIDRREQ, s.tid)
	priv := make([]byte, mad.SIDRREQPrivateDataLen)
	h := mad.CMAHdr(priv)
	h.SetPort(s.sport)
	h.SetAddrs(s.peer.addr, dst)
	copy(priv[mad.CMAHdrLen:], "from the script")
	if err := msg.SIDRREQ().Put(mad.SIDRREQFields{RequestID: id, PKey: 0xffff,
		ServiceID: mad.ServiceID(mad.PortSpaceUDP, port), PrivateData: priv}); err != nil {
		s.t.Fatal(err)
	}
	return msg
}

// resolve starts a ResolveUD of the scripted peer's port 7174; the result
// arrives on the returned channel.
func (s *script) resolve(ctx context.Context) chan resolveResult {
	ch := make(chan resolveResult, 1)
	go func() {
		u, err := s.m.ResolveUD(ctx, netip.AddrPort{}, netip.AddrPortFrom(s.peer.addr, 7174), []byte("hello"))
		ch <- resolveResult{u, err}
	}()
	return ch
}

type resolveResult struct {
	u   *UDPeer
	err error
}

// TestSIDRLostREQ: the manager resolving a UD service sends a SIDR_REQ as
// librdmacm does (UDP port space, rdma_cm's header, P_Key), sends it again
// byte for byte after a REQ's timeout and not a moment before, and takes
// the peer's SIDR_REP: its QPN, Q_Key and private data, and an address
// vector to the peer. A second SIDR_REP finds no request.
func TestSIDRLostREQ(t *testing.T) {
	s := newScript(t)
	res := s.resolve(ctx10(t))
	req1 := s.expect(mad.AttrSIDRREQ)
	r := req1.SIDRREQ()
	h, err := mad.ParseCMAHdr(r.PrivateData())
	if err != nil || r.ServiceID() != 0x0000000001111c06 || r.PKey() != 0xffff || h.DstAddr() != s.peer.addr ||
		h.SrcAddr() != s.n.addr || h.Port() < 0x8000 || string(r.PrivateData()[mad.CMAHdrLen:][:5]) != "hello" ||
		req1.TID()&0xffffffff != uint64(r.RequestID()) || r.RequestID() == 0 {
		t.Fatalf("SIDR_REQ %#x %+v (header %v)", req1.TID(), r.Fields(), err)
	}
	s.clk.Advance(reqTimeout - 1)
	if s.sent() != 1 {
		t.Fatalf("%d MADs sent before the timeout", s.sent())
	}
	s.clk.Advance(1)
	if req2 := s.expect(mad.AttrSIDRREQ); !bytes.Equal(req2, req1) {
		t.Fatal("the retried SIDR_REQ differs")
	}
	rep := newMAD(mad.AttrSIDRREP, req1.TID())
	rep.SIDRREP().Put(mad.SIDRREPFields{RequestID: r.RequestID(), QPN: 0x12, ServiceID: r.ServiceID(),
		QKey: UDPQKey, PrivateData: []byte("rep")})
	s.send(rep)
	d := <-res
	if d.err != nil {
		t.Fatal(d.err)
	}
	u := d.u
	if u.QPN != 0x12 || u.QKey != UDPQKey || string(u.PrivateData[:3]) != "rep" || len(u.PrivateData) != 136 ||
		u.AH.DGID != bth.GIDFromAddr(s.peer.addr) || u.RemoteAddr != netip.AddrPortFrom(s.peer.addr, 7174) ||
		u.LocalAddr != netip.AddrPortFrom(s.n.addr, h.Port()) {
		t.Errorf("%+v", u)
	}
	if _, err := s.n.dev.CreateAH(s.n.pd, u.AH); err != nil {
		t.Errorf("no address handle from the resolved vector: %v", err)
	}
	s.send(rep) // a duplicate answer
	if st := s.m.Stats(); st.Unknown != 1 || st.Retries != 1 || len(s.m.sidrOut) != 0 {
		t.Errorf("%+v, %d requests out", st, len(s.m.sidrOut))
	}
}

// TestSIDRTimeout: a peer that never answers gets the SIDR_REQ 1 + 15
// times, each after a REQ's timeout; then ResolveUD fails with ErrTimeout
// and nothing more is sent. A ResolveUD whose context ends stops at once.
func TestSIDRTimeout(t *testing.T) {
	s := newScript(t)
	res := s.resolve(ctx10(t))
	req := s.expect(mad.AttrSIDRREQ)
	for i := range maxCMRetries {
		s.clk.Advance(reqTimeout)
		if got := s.expect(mad.AttrSIDRREQ); !bytes.Equal(got, req) {
			t.Fatalf("retry %d differs", i+1)
		}
	}
	s.clk.Advance(reqTimeout)
	if d := <-res; !errors.Is(d.err, ErrTimeout) {
		t.Fatalf("ResolveUD: %v", d.err)
	}
	s.clk.Advance(10 * reqTimeout)
	if s.sent() != 1+maxCMRetries || len(s.m.sidrOut) != 0 {
		t.Fatalf("%d sent, %d requests out", s.sent(), len(s.m.sidrOut))
	}

	ctx, cancel := context.WithCancel(ctx10(t))
	res = s.resolve(ctx)
	s.expect(mad.AttrSIDRREQ)
	cancel()
	if d := <-res; !errors.Is(d.err, context.Canceled) {
		t.Fatalf("ResolveUD: %v", d.err)
	}
	sent := s.sent()
	s.clk.Advance(10 * reqTimeout)
	if s.sent() != sent || len(s.m.sidrOut) != 0 {
		t.Fatalf("%d sent after the cancel, %d requests out", s.sent()-sent, len(s.m.sidrOut))
	}
}

// TestSIDRDuplicateREQ: the manager as the passive side hands a SIDR
// request to Accept once. A duplicate before the program answered draws
// nothing; the answer is a SIDR_REP of status success with the QP's
// number and rdma_cm's Q_Key, in the request's transaction; a duplicate
// after it draws the same SIDR_REP and no second request, until the
// request is forgotten.
func TestSIDRDuplicateREQ(t *testing.T) {
	s := newScript(t)
	l, err := s.m.ListenUD(netip.AddrPortFrom(s.n.addr, 7174), 0)
	if err != nil {
		t.Fatal(err)
	}
	req := s.sidrREQ(7174, 0x5eed, s.n.addr)
	s.send(req)
	r, err := l.Accept(ctx10(t))
	if err != nil {
		t.Fatal(err)
	}
	if r.RemoteAddr() != netip.AddrPortFrom(s.peer.addr, s.sport) || r.LocalAddr() != netip.AddrPortFrom(s.n.addr, 7174) ||
		string(r.PrivateData()[:15]) != "from the script" || len(r.PrivateData()) != UDPrivateLen {
		t.Fatalf("request from %v to %v, %q", r.RemoteAddr(), r.LocalAddr(), r.PrivateData()[:15])
	}
	s.send(req) // while the program has not answered
	if s.sent() != 0 {
		t.Fatalf("%d MADs sent for an unanswered request", s.sent())
	}
	cfg := s.n.qpConfig()
	prepared := 0
	cfg.Prepare = func(*transport.QP) error { prepared++; return nil }
	q, err := s.m.CreateUDQP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := q.Query(); q.Type() != transport.UD || q.State() != transport.RTS || a.QKey != UDPQKey || prepared != 1 {
		t.Fatalf("%v in %v, Q_Key %#x, prepared %d times", q, q.State(), a.QKey, prepared)
	}
	if err := r.Accept(q, []byte("welcome")); err != nil {
		t.Fatal(err)
	}
	rep1 := s.expect(mad.AttrSIDRREP)
	p := rep1.SIDRREP()
	if rep1.TID() != s.tid || p.RequestID() != 0x5eed || p.Status() != mad.SIDRSuccess || p.QPN() != q.QPN() ||
		p.QKey() != UDPQKey || p.ServiceID() != 0x0000000001111c06 || string(p.PrivateData()[:7]) != "welcome" {
		t.Fatalf("SIDR_REP %#x %+v", rep1.TID(), p.Fields())
	}
	if err := r.Reject(mad.SIDRReject, nil); err == nil {
		t.Error("a second answer to one request was taken")
	}
	s.send(req) // the SIDR_REP was lost
	if rep2 := s.expect(mad.AttrSIDRREP); !bytes.Equal(rep2, rep1) {
		t.Fatal("the duplicate's SIDR_REP differs")
	}
	if st := s.m.Stats(); st.Duplicates != 2 || len(l.ch) != 0 {
		t.Errorf("%+v, %d requests waiting", st, len(l.ch))
	}
	s.clk.Advance(sidrHold)
	if len(s.m.sidrIn) != 0 {
		t.Fatal("the answered request outlived its hold")
	}
	s.send(req) // long after: a new request
	if r2, err := l.Accept(ctx10(t)); err != nil || r2 == r {
		t.Fatalf("Accept: %v", err)
	}
}

// TestSIDRUnknownService: a SIDR_REQ for a UDP port nobody listens on, or
// for a TCP port (a listener there serves RC), is answered "unsupported",
// as Linux answers it, in the request's transaction; one whose rdma_cm
// header names another address than the listener's is rejected; one the
// program rejects carries its status and private data. Nothing is kept
// for the first three. Closing the listener rejects the requests it took
// that were never answered; later ones are "unsupported".
func TestSIDRUnknownService(t *testing.T) {
	s := newScript(t)
	l, err := s.m.ListenUD(netip.AddrPortFrom(s.n.addr, 7174), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.m.Listen(netip.AddrPortFrom(s.n.addr, 7175), ListenConfig{QP: s.n.qpConfig()}); err != nil {
		t.Fatal(err)
	}
	tcp := s.sidrREQ(7175, 3, s.n.addr)
	tcp.SIDRREQ().SetServiceID(mad.ServiceID(mad.PortSpaceTCP, 7175))
	for i, c := range []struct {
		req    mad.MAD
		status mad.SIDRStatus
	}{
		{s.sidrREQ(9999, 1, s.n.addr), mad.SIDRUnsupported},
		{s.sidrREQ(9999, 1, s.n.addr), mad.SIDRUnsupported}, // its duplicate
		{tcp, mad.SIDRUnsupported},
		{s.sidrREQ(7174, 4, netip.MustParseAddr("192.0.2.77")), mad.SIDRReject},
	} {
		s.send(c.req)
		rep := s.expect(mad.AttrSIDRREP)
		r := rep.SIDRREP()
		if rep.TID() != s.tid || r.Status() != c.status || r.RequestID() != c.req.SIDRREQ().RequestID() ||
			r.ServiceID() != c.req.SIDRREQ().ServiceID() || r.QPN() != 0 || r.QKey() != 0 {
			t.Errorf("case %d: SIDR_REP %#x %+v", i, rep.TID(), r.Fields())
		}
	}
	if len(s.m.sidrIn) != 0 || len(l.ch) != 0 {
		t.Fatal("a refused request was kept")
	}
	s.send(s.sidrREQ(7174, 5, s.n.addr))
	r, err := l.Accept(ctx10(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Reject(mad.SIDRReject, []byte("no")); err != nil {
		t.Fatal(err)
	}
	rep := s.expect(mad.AttrSIDRREP).SIDRREP()
	if rep.Status() != mad.SIDRReject || string(rep.PrivateData()[:2]) != "no" || rep.RequestID() != 5 {
		t.Errorf("SIDR_REP %+v", rep.Fields())
	}
	s.send(s.sidrREQ(7174, 6, s.n.addr)) // taken, never answered
	s.send(s.sidrREQ(7174, 7, s.n.addr)) // never taken
	if _, err := l.Accept(ctx10(t)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	for _, id := range []uint32{6, 7} {
		if rep := s.expect(mad.AttrSIDRREP).SIDRREP(); rep.Status() != mad.SIDRReject || rep.RequestID() < 6 {
			t.Errorf("request %d at Close: %+v", id, rep.Fields())
		}
	}
	s.send(s.sidrREQ(7174, 8, s.n.addr))
	if rep := s.expect(mad.AttrSIDRREP).SIDRREP(); rep.Status() != mad.SIDRUnsupported {
		t.Errorf("after Close: %v", rep.Status())
	}
}

// TestSIDRMem: two managers resolve and serve a UD service over the
// in-memory network in real time, over IPv4 and IPv6: the rdma_cm header
// names both addresses, the SIDR_REP the server's QP, and a datagram sent
// with what ResolveUD returned reaches it from the client's QP.
func TestSIDRMem(t *testing.T) {
	for _, addrs := range [][2]string{{"192.0.2.1", "192.0.2.2"}, {"2001:db8::1", "2001:db8::2"}} {
		t.Run(addrs[0], func(t *testing.T) {
			net := mem.NewNet(1)
			a, b := memNode(t, net, addrs[0], nil), memNode(t, net, addrs[1], nil)
			ma, mb := newManager(t, a, nil), newManager(t, b, nil)
			l, err := mb.ListenUD(netip.AddrPortFrom(b.addr, 7174), 0)
			if err != nil {
				t.Fatal(err)
			}
			qa, err := ma.CreateUDQP(a.qpConfig())
			if err != nil {
				t.Fatal(err)
			}
			qb, err := mb.CreateUDQP(b.qpConfig())
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan *SIDRRequest, 1)
			go func() {
				r, err := l.Accept(ctx10(t))
				if err == nil {
					err = r.Accept(qb, []byte("welcome"))
				}
				if err != nil {
					t.Error(err)
				}
				got <- r
			}()
			u, err := ma.ResolveUD(ctx10(t), netip.AddrPort{}, netip.AddrPortFrom(b.addr, 7174), []byte("hello"))
			if err != nil {
				t.Fatal(err)
			}
			r := <-got
			if u.QPN != qb.QPN() || u.QKey != UDPQKey || string(u.PrivateData[:7]) != "welcome" ||
				u.LocalAddr.Addr() != a.addr || r.RemoteAddr() != u.LocalAddr || string(r.PrivateData()[:5]) != "hello" {
				t.Fatalf("resolved %+v; the server saw %v %q", u, r.RemoteAddr(), r.PrivateData()[:5])
			}
			ah, err := a.dev.CreateAH(a.pd, u.AH)
			if err != nil {
				t.Fatal(err)
			}
			if err := qb.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{b.mr.SGE(0, 4096)}}); err != nil {
				t.Fatal(err)
			}
			n := copy(a.buf, "ping")
			if err := qa.PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{a.mr.SGE(0, n)},
				AH: ah, RemoteQPN: u.QPN, RemoteQKey: u.QKey}); err != nil {
				t.Fatal(err)
			}
			wc := make([]transport.WC, 1)
			for {
				if _, err := b.cq.PollWait(ctx10(t), wc); err != nil {
					t.Fatal(err)
				}
				if wc[0].QPNum == qb.QPN() {
					break
				}
			}
			if wc[0].Status != transport.Success || wc[0].SrcQP != qa.QPN() || string(b.buf[40:44]) != "ping" {
				t.Errorf("%+v %q", wc[0], b.buf[40:44])
			}
		})
	}
}
