package cm

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/nic/mem"
)

// TestPortSpacesRC: RC connections in the IB port space (RDMA_PS_IB,
// 0x013f) beside the TCP one, as rdma_cm takes them: each space has
// ports of its own, so a listener on port 7174 of each gets only the
// REQs whose service ID names its space; a REQ for a space nobody listens
// in at that port (IPoIB, UDP: no RC there) is rejected with reason 8
// (invalid service ID). Dial in the IB space sends 0x013f<<16 | port.
// A space rdma_cm makes no RC connections in is refused by Listen and
// Dial with a one-line error.
func TestPortSpacesRC(t *testing.T) {
	s := newScript(t)
	lib, err := s.m.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), 7174), ListenConfig{QP: s.n.qpConfig(), PortSpace: mad.PortSpaceIB})
	if err != nil {
		t.Fatal(err)
	}
	ltcp, err := s.m.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), 7174), ListenConfig{QP: s.n.qpConfig()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.m.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), 7174), ListenConfig{QP: s.n.qpConfig(), PortSpace: mad.PortSpaceIB}); err == nil {
		t.Fatal("a second listener on port 7174 of the IB space")
	}
	for _, ps := range []mad.PortSpace{mad.PortSpaceUDP, mad.PortSpaceIPoIB, 0x0107} {
		_, err := s.m.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), 7175), ListenConfig{QP: s.n.qpConfig(), PortSpace: ps})
		if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "RC connections are in the TCP") {
			t.Errorf("Listen in space %#x: %v", uint16(ps), err)
		}
		_, err = s.m.Dial(ctx10(t), netip.AddrPort{}, netip.AddrPortFrom(s.peer.addr, 7174), s.n.qpConfig(), ConnParams{PortSpace: ps})
		if err == nil || !strings.Contains(err.Error(), "RC connections are in the TCP") {
			t.Errorf("Dial in space %#x: %v", uint16(ps), err)
		}
	}

	req := func(ps mad.PortSpace) mad.MAD {
		s.comm++
		m := s.req(7174)
		m.REQ().SetServiceID(mad.ServiceID(ps, 7174))
		return m
	}
	for i, l := range []*Listener{lib, ltcp} {
		ps := []mad.PortSpace{mad.PortSpaceIB, mad.PortSpaceTCP}[i]
		s.send(req(ps))
		rep := s.expect(mad.AttrREP).REP()
		s.send(pair(mad.AttrRTU, s.tid, s.comm, rep.LocalCommID()))
		c, err := l.Accept(ctx10(t))
		if err != nil {
			t.Fatal(err)
		}
		if c.remoteKey.comm != s.comm {
			t.Errorf("space %#x: the listener got the connection of comm ID %#x, want %#x", uint16(ps), c.remoteKey.comm, s.comm)
		}
	}
	for _, ps := range []mad.PortSpace{mad.PortSpaceIPoIB, mad.PortSpaceUDP} {
		s.send(req(ps))
		if rej := s.expect(mad.AttrREJ).REJ(); rej.Reason() != mad.RejInvalidServiceID || rej.RemoteCommID() != s.comm {
			t.Errorf("space %#x: REJ %+v", uint16(ps), rej.Fields())
		}
	}
	lib.Close()
	s.send(req(mad.PortSpaceIB))
	if rej := s.expect(mad.AttrREJ).REJ(); rej.Reason() != mad.RejInvalidServiceID {
		t.Errorf("IB space after its listener closed: REJ %+v", rej.Fields())
	}

	s.comm++
	res := make(chan dialResult, 1)
	go func() {
		c, err := s.m.Dial(ctx10(t), netip.AddrPort{}, netip.AddrPortFrom(s.peer.addr, 7174), s.n.qpConfig(),
			ConnParams{PortSpace: mad.PortSpaceIB})
		res <- dialResult{c, err}
	}()
	out := s.expect(mad.AttrREQ)
	if id := out.REQ().ServiceID(); id != 0x013f1c06 {
		t.Fatalf("REQ in the IB space: service ID %#x", id)
	}
	s.send(s.rep(out))
	s.expect(mad.AttrRTU)
	if d := <-res; d.err != nil {
		t.Fatal(d.err)
	}
}

// TestPortSpacesUD: UD services in the IPoIB (0x0002) and IB (0x013f)
// port spaces beside the UDP one, resolved through SIDR as rdma_cm
// resolves them: ResolveUDIn's SIDR_REQ names its space, a listener of
// that space and port answers it, a listener of the same port in another
// space does not (status 1, unsupported). A space rdma_cm resolves no UD
// service in is refused by ListenUDIn and ResolveUDIn.
func TestPortSpacesUD(t *testing.T) {
	net := mem.NewNet(1)
	a, b := memNode(t, net, "192.0.2.1", nil), memNode(t, net, "192.0.2.2", nil)
	ma, mb := newManager(t, a, nil), newManager(t, b, nil)
	qb, err := mb.CreateUDQP(b.qpConfig())
	if err != nil {
		t.Fatal(err)
	}
	raddr := netip.AddrPortFrom(b.addr, 7174)
	for _, ps := range []mad.PortSpace{mad.PortSpaceIPoIB, mad.PortSpaceIB, mad.PortSpaceUDP} {
		l, err := mb.ListenUDIn(ps, raddr, 0)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			r, err := l.Accept(ctx10(t))
			if err == nil {
				err = r.Accept(qb, []byte{byte(ps)})
			}
			if err != nil {
				t.Error(err)
			}
		}()
		u, err := ma.ResolveUDIn(ctx10(t), ps, netip.AddrPort{}, raddr, nil)
		if err != nil {
			t.Fatalf("space %#x: %v", uint16(ps), err)
		}
		if u.QPN != qb.QPN() || u.PrivateData[0] != byte(ps) {
			t.Errorf("space %#x: resolved QPN %#x, private data %#x: another listener answered", uint16(ps), u.QPN, u.PrivateData[0])
		}
		l.Close()
	}
	// Port 7175 of the UDP space only: the others answer "unsupported".
	l, err := mb.ListenUD(netip.AddrPortFrom(b.addr, 7175), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, ps := range []mad.PortSpace{mad.PortSpaceIPoIB, mad.PortSpaceIB} {
		_, err := ma.ResolveUDIn(ctx10(t), ps, netip.AddrPort{}, netip.AddrPortFrom(b.addr, 7175), nil)
		var se *SIDRError
		if !errors.As(err, &se) || se.Status != mad.SIDRUnsupported {
			t.Errorf("space %#x, port of the UDP space: %v", uint16(ps), err)
		}
	}
	for _, ps := range []mad.PortSpace{mad.PortSpaceTCP, 0x0112} {
		if _, err := mb.ListenUDIn(ps, raddr, 0); err == nil || !strings.Contains(err.Error(), "UD services are in the UDP") {
			t.Errorf("ListenUDIn space %#x: %v", uint16(ps), err)
		}
		if _, err := ma.ResolveUDIn(ctx10(t), ps, netip.AddrPort{}, raddr, nil); err == nil || !strings.Contains(err.Error(), "UD services are in the UDP") {
			t.Errorf("ResolveUDIn space %#x: %v", uint16(ps), err)
		}
	}
}
