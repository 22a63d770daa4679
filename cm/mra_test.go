package cm

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/bth/pcapfile"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/transport"
)

// deferREQ makes a DeferAccept listener on port 7174 of the manager
// under test and feeds it the scripted peer's REQ, which it returns with
// the ConnRequest the program gets.
func (s *script) deferREQ() (*Listener, mad.MAD, *ConnRequest) {
	s.t.Helper()
	l, err := s.m.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), 7174), ListenConfig{DeferAccept: true})
	if err != nil {
		s.t.Fatal(err)
	}
	req := s.req(7174)
	s.send(req)
	r, err := l.Request(ctx10(s.t))
	if err != nil {
		s.t.Fatal(err)
	}
	return l, req, r
}

// checkMRA checks an MRA for the scripted peer's REQ, and returns the
// communication ID it names for the manager's side.
func (s *script) checkMRA(m mad.MAD) uint32 {
	s.t.Helper()
	r := m.MRA()
	if m.TID() != s.tid || r.RemoteCommID() != s.comm || r.LocalCommID() == 0 ||
		r.MessageMRAed() != mad.MsgREQ || r.ServiceTimeout() != mraServiceTimeout {
		s.t.Fatalf("MRA %#x %+v", m.TID(), r.Fields())
	}
	return r.LocalCommID()
}

// TestMRAForSlowAccept: a REQ the program holds (DeferAccept) draws no
// answer while the REQ's Remote CM Response Timeout (20: 4.3 s) has more
// than a quarter to run; then an MRA for the REQ, with a service timeout
// of 24 (68.7 s), in the REQ's transaction. Nothing more goes by itself;
// each duplicate REQ (the requester's retry) is answered with the MRA
// again and opens nothing. The program's Accept then sends the REP with
// the communication ID the MRA named, and the RTU establishes the
// connection; a duplicate REQ after that draws no MRA.
func TestMRAForSlowAccept(t *testing.T) {
	s := newScript(t)
	_, req, r := s.deferREQ()
	s.clk.Advance(mraDelay(20) - 1)
	if s.sent() != 0 {
		t.Fatalf("%d MADs sent before the MRA was due", s.sent())
	}
	s.clk.Advance(1)
	local := s.checkMRA(s.expect(mad.AttrMRA))
	s.clk.Advance(ibaTime(mraServiceTimeout))
	if s.sent() != 1 {
		t.Fatalf("%d MADs sent in the MRA's service time, want the MRA alone", s.sent())
	}
	for range 2 {
		s.send(req)
		if got := s.checkMRA(s.expect(mad.AttrMRA)); got != local {
			t.Fatalf("the MRA for a duplicate names %#x, the first %#x", got, local)
		}
	}
	if len(s.m.conns) != 0 || len(s.m.requests) != 1 || s.m.Stats().Duplicates != 2 {
		t.Fatalf("%d connections, %d requests, %+v", len(s.m.conns), len(s.m.requests), s.m.Stats())
	}
	c, err := r.Accept(s.n.qpConfig(), ConnParams{})
	if err != nil {
		t.Fatal(err)
	}
	rep := s.expect(mad.AttrREP)
	if rep.TID() != s.tid || rep.REP().LocalCommID() != local || rep.REP().RemoteCommID() != s.comm {
		t.Fatalf("REP %#x %+v after an MRA naming %#x", rep.TID(), rep.REP().Fields(), local)
	}
	s.send(pair(mad.AttrRTU, s.tid, s.comm, local))
	ev := <-s.m.Events()
	if ev.Type != EventEstablished || ev.Conn != c || c.QP().State() != transport.RTS {
		t.Fatalf("event %v, QP %v", ev, c.QP().State())
	}
	sent := s.sent()
	s.send(req)
	if s.sent() != sent || len(s.m.conns) != 1 {
		t.Fatalf("a duplicate REQ after establishment drew %d MADs, %d connections", s.sent()-sent, len(s.m.conns))
	}
}

// TestNoMRAForPromptAccept: a program that answers in time gets no MRA:
// the REP goes, and the MRA's time passes without one; so does a Reject.
// A request rejected after its MRA names in the REJ the communication ID
// the MRA named.
func TestNoMRAForPromptAccept(t *testing.T) {
	s := newScript(t)
	l, _, r := s.deferREQ()
	if _, err := r.Accept(s.n.qpConfig(), ConnParams{}); err != nil {
		t.Fatal(err)
	}
	rep := s.expect(mad.AttrREP)
	s.send(pair(mad.AttrRTU, s.tid, s.comm, rep.REP().LocalCommID()))
	s.clk.Advance(mraDelay(20))
	if s.sent() != 1 {
		t.Fatalf("%d MADs sent, want the REP alone", s.sent())
	}

	s.comm++ // a second connection, which the program rejects at once
	s.send(s.req(7174))
	r, err := l.Request(ctx10(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Reject([]byte("no")); err != nil {
		t.Fatal(err)
	}
	s.expect(mad.AttrREJ)
	s.clk.Advance(mraDelay(20))
	if s.sent() != 2 {
		t.Fatalf("%d MADs sent, want the REP and the REJ", s.sent())
	}

	s.comm++ // a third, rejected after its MRA
	s.send(s.req(7174))
	if r, err = l.Request(ctx10(t)); err != nil {
		t.Fatal(err)
	}
	s.clk.Advance(mraDelay(20))
	local := s.checkMRA(s.expect(mad.AttrMRA))
	if err := r.Reject(nil); err != nil {
		t.Fatal(err)
	}
	rej := s.expect(mad.AttrREJ).REJ()
	if rej.LocalCommID() != local || rej.RemoteCommID() != s.comm || rej.Reason() != mad.RejConsumerDefined {
		t.Fatalf("REJ %+v after an MRA naming %#x", rej.Fields(), local)
	}
	if _, err := r.Accept(s.n.qpConfig(), ConnParams{}); !errors.Is(err, ErrAnswered) {
		t.Fatalf("Accept after Reject: %v", err)
	}
}

// TestMRAForListenerClose: a listener closed while its request waits, MRA
// sent, rejects it; no MRA goes after that, whatever the time.
func TestMRAForListenerClose(t *testing.T) {
	s := newScript(t)
	l, req, _ := s.deferREQ()
	s.send(req) // a duplicate before the MRA was due: answered with one at once
	local := s.checkMRA(s.expect(mad.AttrMRA))
	s.clk.Advance(mraDelay(20))
	if s.sent() != 1 {
		t.Fatalf("%d MADs sent: a second MRA after the first", s.sent())
	}
	l.Close()
	if rej := s.expect(mad.AttrREJ).REJ(); rej.LocalCommID() != local {
		t.Fatalf("REJ %+v", rej.Fields())
	}
	s.clk.Advance(10 * mraDelay(20))
	if s.sent() != 2 || len(s.m.requests) != 0 || len(s.m.held) != 0 {
		t.Fatalf("%d MADs sent, %d requests, %d IDs held", s.sent(), len(s.m.requests), len(s.m.held))
	}
}

// TestMRAForREPHonoured: the peer MRAs the manager's REP (its program is
// slow to confirm): the REP is not sent again at its own timeout, only
// once the MRA's service time and the path's ACK timeout have passed; a
// second MRA is a duplicate and moves nothing; the RTU then establishes
// the connection.
func TestMRAForREPHonoured(t *testing.T) {
	s := newScript(t)
	l, rep := s.listenREP()
	local := rep.REP().LocalCommID()
	mra := s.mra(s.tid, local, mad.MsgREP, 23)
	s.send(mra)
	wait := ibaTime(23) + ibaTime(19)
	s.clk.Advance(wait / 2)
	s.send(mra) // a duplicate: the timer keeps running from the first
	s.clk.Advance(wait - wait/2 - 1)
	if s.sent() != 1 {
		t.Fatalf("the REP was sent again %d times within the MRA's time", s.sent()-1)
	}
	s.clk.Advance(1)
	s.expect(mad.AttrREP)
	if st := s.m.Stats(); st.Duplicates != 1 || st.Retries != 1 {
		t.Fatalf("%+v", st)
	}
	s.send(pair(mad.AttrRTU, s.tid, s.comm, local))
	if _, err := l.Accept(ctx10(t)); err != nil {
		t.Fatal(err)
	}
}

// TestMRAThenREP: an MRA for the manager's REQ, then the peer's REP:
// Dial returns the connection in RTS and the RTU goes; the REQ was sent
// once.
func TestMRAThenREP(t *testing.T) {
	s := newScript(t)
	res := s.dial()
	req := s.expect(mad.AttrREQ)
	s.send(s.mra(req.TID(), req.REQ().LocalCommID(), mad.MsgREQ, mraServiceTimeout))
	s.clk.Advance(reqTimeout) // the REQ's own timeout: the MRA's is longer
	s.send(s.rep(req))
	s.expect(mad.AttrRTU)
	d := <-res
	if d.err != nil || d.c.QP().State() != transport.RTS {
		t.Fatalf("Dial: %v", d.err)
	}
	if st := s.m.Stats(); st.Retries != 0 || st.Sent != 2 {
		t.Fatalf("%+v", st)
	}
}

// TestInteropMRA: `roced rdma_server -s 192.0.2.1 --accept-delay 8s`
// against rxe's `rdma_client -s 192.0.2.1` on the lab's two guests,
// tcpdump on the guest's eth0 (interop/README.md, "MRA against
// rxe"). rxe's REQ asks for an answer within its Remote CM Response
// Timeout and sends it again after that plus twice the packet life time
// (its local ACK timeout less one): 6.4 s on bookworm, 4.8 s on trixie.
// goroce's MRA for it goes after three quarters of the response timeout,
// in the REQ's transaction, naming rxe's communication ID and a service
// timeout of 24; rxe sends no second REQ; the REP comes 8 s after the
// REQ with the ID the MRA named, rxe's RTU follows, and the exchange
// ends with DREQ and DREP.
func TestInteropMRA(t *testing.T) {
	for _, file := range []string{"testdata/mra_accept_delay_bookworm.pcap", "testdata/mra_accept_delay_trixie.pcap"} {
		pkts, err := pcapfile.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		type sent struct {
			m  mad.MAD
			at time.Duration
		}
		var ms []sent
		for _, p := range pkts {
			fr, err := bth.DecodeLink(bth.LinkType(p.LinkType), p.Data)
			if err != nil {
				continue
			}
			pk, err := bth.Parse(fr.RoCE())
			if err != nil || pk.BTH().DestQP() != 1 {
				continue
			}
			m, err := mad.ParseCM(append([]byte(nil), pk.Payload()...))
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			ms = append(ms, sent{m, p.Info.Timestamp.Sub(pkts[0].Info.Timestamp)})
		}
		var kinds []mad.AttrID
		for _, s := range ms {
			kinds = append(kinds, s.m.AttrID())
		}
		if len(ms) < 6 || !reflect.DeepEqual(kinds[:4], []mad.AttrID{mad.AttrREQ, mad.AttrMRA, mad.AttrREP, mad.AttrRTU}) {
			t.Fatalf("%s: CM messages %v, want REQ MRA REP RTU, then the disconnection", file, kinds)
		}
		req, mra, rep, rtu := ms[0].m, ms[1].m, ms[2].m, ms[3].m
		r := req.REQ()
		retry := 2*ibaTime(r.Primary().LocalACKTimeout()-1) + ibaTime(r.RemoteCMResponseTimeout())
		if ms[1].at < mraDelay(r.RemoteCMResponseTimeout()) || ms[1].at >= retry {
			t.Errorf("%s: the MRA went at %v, want from %v and before rxe's retry at %v", file, ms[1].at,
				mraDelay(r.RemoteCMResponseTimeout()), retry)
		}
		f := mra.MRA().Fields()
		if mra.TID() != req.TID() || f.RemoteCommID != r.LocalCommID() || f.LocalCommID == 0 ||
			f.MessageMRAed != mad.MsgREQ || f.ServiceTimeout != mraServiceTimeout {
			t.Errorf("%s: MRA %#x %+v for REQ %#x from %#x", file, mra.TID(), f, req.TID(), r.LocalCommID())
		}
		if ms[2].at < 8*time.Second || rep.TID() != req.TID() || rep.REP().LocalCommID() != f.LocalCommID ||
			rep.REP().RemoteCommID() != r.LocalCommID() {
			t.Errorf("%s: REP at %v, %#x %+v", file, ms[2].at, rep.TID(), rep.REP().Fields())
		}
		if rtu.RTU().RemoteCommID() != f.LocalCommID {
			t.Errorf("%s: RTU %+v", file, rtu.RTU().Fields())
		}
		for _, k := range kinds[4:] {
			if k != mad.AttrDREQ && k != mad.AttrDREP {
				t.Errorf("%s: %v after the RTU (a second REQ?)", file, k)
			}
		}
	}
}
