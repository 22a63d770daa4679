package transport_test

import (
	"errors"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testharness"
	"github.com/goroce/goroce/transport"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic/mem"
)

// srqSetup builds a receiver with one SRQ shared by two RC QPs and a UD QP,
// and a sender with a matching RC QP for each RC QP and a UD QP.
type srqSetup struct {
	a, b     *testharness.Peer
	srq      *transport.SRQ
	rc       [2][2]*transport.QP // [sender, receiver]
	udA, udB *transport.QP
	ah       *transport.AH
	net      *mem.Net
}

func newSRQSetup(t *testing.T, limit uint32) *srqSetup {
	o := testharness.Options{}
	o.MemDefaults()
	s := &srqSetup{net: mem.NewNet(9)}
	s.a = testharness.NewMemPeer(t, s.net, "10.0.0.1", o)
	s.b = testharness.NewMemPeer(t, s.net, "10.0.0.2", o)
	var err error
	s.srq, err = s.b.Dev.CreateSRQ(s.b.PD, transport.SRQAttr{MaxWR: 16, MaxSGE: 1, SRQLimit: limit})
	testharness.Must(t, err)
	mk := func(sd *testharness.Peer, typ transport.QPType, srq *transport.SRQ) *transport.QP {
		ia := transport.QPInitAttr{Type: typ, SendCQ: sd.SCQ, RecvCQ: sd.RCQ, SRQ: srq, Cap: transport.QPCap{MaxSendWR: 16, MaxSendSGE: 1}}
		if srq == nil {
			ia.Cap.MaxRecvWR, ia.Cap.MaxRecvSGE = 16, 1
		}
		q, err := sd.Dev.CreateQP(sd.PD, ia)
		testharness.Must(t, err)
		return q
	}
	for i := range 2 {
		qa, qb := mk(s.a, transport.RC, nil), mk(s.b, transport.RC, s.srq)
		sa, sb := *s.a, *s.b
		sa.QP, sb.QP = qa, qb
		testharness.ConnectQP(t, &sa, &sb, o, 100, 200)
		testharness.ConnectQP(t, &sb, &sa, o, 200, 100)
		s.rc[i] = [2]*transport.QP{qa, qb}
	}
	ud := o
	ud.Type = transport.UD
	s.udA, s.udB = mk(s.a, transport.UD, nil), mk(s.b, transport.UD, s.srq)
	sa, sb := *s.a, *s.b
	sa.QP, sb.QP = s.udA, s.udB
	testharness.ConnectQP(t, &sa, &sb, ud, 1, 1)
	testharness.ConnectQP(t, &sb, &sa, ud, 1, 1)
	g, _ := s.b.Dev.GID(1)
	s.ah, err = s.a.Dev.CreateAH(s.a.PD, transport.AHAttr{DGID: g, SGIDIndex: 1})
	testharness.Must(t, err)
	return s
}

func (s *srqSetup) post(t *testing.T, ids ...uint64) {
	for _, id := range ids {
		testharness.Must(t, s.srq.PostRecv(&transport.RecvWR{WRID: id, SGL: []transport.SGE{s.b.MR.SGE(int(id)*256, 256)}}))
	}
}

func TestSRQShared(t *testing.T) {
	s := newSRQSetup(t, 0)
	s.post(t, 1, 2, 3)
	// Three messages on three QPs take the WQEs in the order they were posted.
	testharness.Must(t, s.rc[1][0].PostSend(&transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{s.a.MR.SGE(0, 10)}}))
	if wc := testharness.Wait(t, s.b.RCQ, time.Second); wc.WRID != 1 || wc.QPNum != s.rc[1][1].QPN() {
		t.Fatalf("%+v", wc)
	}
	testharness.Must(t, s.udA.PostSend(&transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{s.a.MR.SGE(0, 10)}, AH: s.ah,
		RemoteQPN: s.udB.QPN(), RemoteQKey: 0x11111111}))
	if wc := testharness.Wait(t, s.b.RCQ, time.Second); wc.WRID != 2 || wc.QPNum != s.udB.QPN() || wc.ByteLen != 50 {
		t.Fatalf("%+v", wc)
	}
	testharness.Must(t, s.rc[0][0].PostSend(&transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{s.a.MR.SGE(0, 10)}}))
	if wc := testharness.Wait(t, s.b.RCQ, time.Second); wc.WRID != 3 || wc.QPNum != s.rc[0][1].QPN() {
		t.Fatalf("%+v", wc)
	}
	// Receives go to the SRQ, not the QP; an SRQ in use cannot be destroyed.
	if err := s.rc[0][1].PostRecv(&transport.RecvWR{}); !errors.Is(err, transport.ErrInvalid) {
		t.Fatalf("post_recv on an SRQ QP: %v", err)
	}
	if err := s.srq.Destroy(); !errors.Is(err, transport.ErrBusy) {
		t.Fatalf("destroy while used: %v", err)
	}
}

func TestSRQEmpty(t *testing.T) {
	s := newSRQSetup(t, 0)
	// Empty: RC gets an RNR NAK and retries (rnr_retry 7); UD is dropped.
	testharness.Must(t, s.udA.PostSend(&transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{s.a.MR.SGE(0, 10)}, AH: s.ah,
		RemoteQPN: s.udB.QPN(), RemoteQKey: 0x11111111}))
	testharness.Must(t, s.rc[0][0].PostSend(&transport.SendWR{WRID: 5, Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{s.a.MR.SGE(0, 10)}}))
	// The UD message went first on the same link: once the RC one has been
	// refused, the UD one has been dropped. (RC may be refused again on
	// its retries, so only the first refusal is waited for.)
	waitCount(t, "send_rnr_err", func() uint64 { return min(s.b.Dev.Counters().SendRNRErr.Load(), 1) }, 1)
	if got := s.b.Dev.Counters().NoRecvWQE.Load(); got != 1 {
		t.Fatalf("no_recv_wqe %d", got)
	}
	s.post(t, 9)
	if wc := testharness.Wait(t, s.b.RCQ, time.Second); wc.WRID != 9 || wc.QPNum != s.rc[0][1].QPN() {
		t.Fatalf("%+v", wc)
	}
	if wc := testharness.Wait(t, s.a.SCQ, time.Second); wc.WRID != 5 || wc.Status != transport.Success {
		t.Fatalf("%+v", wc)
	}
}

func TestSRQLimit(t *testing.T) {
	s := newSRQSetup(t, 3)
	s.post(t, 1, 2, 3, 4, 5)
	if got := s.srq.Query().SRQLimit; got != 3 {
		t.Fatalf("armed limit %d", got)
	}
	// The SRQ raises its limit event as it hands out the WQE, before the
	// receive completes: once the receives below have completed, every
	// event they caused is queued.
	events := func() (n int) {
		for {
			select {
			case e := <-s.b.Dev.Events():
				if e.Type == transport.EventSRQLimitReached && e.SRQ == s.srq {
					n++
				}
			default:
				return n
			}
		}
	}
	for i := range 4 { // 5 -> 1 WQEs: crossing below 3 fires once
		testharness.Must(t, s.rc[0][0].PostSend(&transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{s.a.MR.SGE(0, 10)}}))
		testharness.Wait(t, s.b.RCQ, time.Second)
		_ = i
	}
	if n := events(); n != 1 {
		t.Fatalf("%d limit events, want exactly 1", n)
	}
	if got := s.srq.Query().SRQLimit; got != 0 {
		t.Fatalf("limit still armed (%d) after firing", got)
	}
	// Re-armed, it fires again on the next crossing.
	testharness.Must(t, s.srq.Modify(transport.SRQAttr{SRQLimit: 2}, transport.SRQLimit))
	testharness.Must(t, s.rc[1][0].PostSend(&transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{s.a.MR.SGE(0, 10)}}))
	testharness.Wait(t, s.b.RCQ, time.Second)
	if n := events(); n != 1 {
		t.Fatalf("%d events after re-arming", n)
	}
	// Resizing keeps what is queued.
	s.post(t, 6, 7)
	testharness.Must(t, s.srq.Modify(transport.SRQAttr{MaxWR: 64}, transport.SRQMaxWR))
	if a := s.srq.Query(); a.MaxWR != 64 || s.srq.Len() != 2 {
		t.Fatalf("after resize: %+v, %d held", a, s.srq.Len())
	}
	testharness.Must(t, s.rc[1][0].PostSend(&transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{s.a.MR.SGE(0, 10)}}))
	if wc := testharness.Wait(t, s.b.RCQ, time.Second); wc.WRID != 6 {
		t.Fatalf("%+v", wc)
	}
}

func TestSRQQPErrorLeavesSRQ(t *testing.T) {
	s := newSRQSetup(t, 0)
	s.post(t, 1, 2)
	e := transport.QPAttr{State: transport.Err}
	testharness.Must(t, s.rc[0][1].Modify(&e, transport.AttrState))
	// The SRQ's WQEs stay for the other QPs; the QP reports its last WQE.
	select {
	case ev := <-s.b.Dev.Events():
		if ev.Type != transport.EventQPLastWQEReached || ev.QP != s.rc[0][1] {
			t.Fatalf("%v", ev)
		}
	case <-time.After(time.Second):
		t.Fatal("no last-WQE-reached event")
	}
	if s.srq.Len() != 2 || s.b.RCQ.Len() != 0 {
		t.Fatalf("SRQ holds %d, %d completions", s.srq.Len(), s.b.RCQ.Len())
	}
	testharness.Must(t, s.rc[1][0].PostSend(&transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{s.a.MR.SGE(0, 10)}}))
	if wc := testharness.Wait(t, s.b.RCQ, time.Second); wc.WRID != 1 || wc.Status != transport.Success {
		t.Fatalf("%+v", wc)
	}
	_ = bth.GRHLen
}
