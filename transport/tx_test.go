package transport_test

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

// TestAckBehindRequests: an acknowledgement a burst left open (poll mode)
// leaves in one call to the link with the request the application posts
// meanwhile, behind it, where it can join the request's UDP GSO message as
// its shorter last segment. An acknowledgement alone, and a responder's
// output of more than an acknowledgement, keep their place.
func TestAckBehindRequests(t *testing.T) {
	h := newHarness(t, harnessOpts{sendPSN: 100, recvPSN: 7})
	h.postRecv(64)
	// A SEND arrives; the burst stays open, as a poller leaves it.
	f, p := h.packet(bth.RCSendOnly, 7, make([]byte, 16))
	if !receive(h.q, p, f) {
		t.Fatal("the SEND did not join a burst")
	}
	if got := h.sent(); len(got) != 0 {
		t.Fatalf("sent %v before the burst ended", describe(got))
	}
	// The application answers: its SEND and the pending ACK go together,
	// the ACK last.
	wr := transport.SendWR{WRID: 1, Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{h.mr.SGE(0, 32)}}
	if err := h.q.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	endBurst(h.q)
	got := h.sent()
	if calls := h.sendCalls(); len(calls) != 1 || calls[0] != 2 {
		t.Fatalf("calls to the link %v, want one of two frames", calls)
	}
	if len(got) != 2 || got[0].OpCode() != bth.RCSendOnly || uint32(got[0].BTH().PSN()) != 100 ||
		got[1].OpCode() != bth.RCAcknowledge || uint32(got[1].BTH().PSN()) != 7 {
		t.Fatalf("sent %v, want the SEND psn 0x64 then the ACK of psn 0x7", describe(got))
	}
	// An ACK alone goes alone.
	h.postRecv(64)
	h.deliver(bth.RCSendOnly, 8, make([]byte, 16))
	h.ack(h.sent(), bth.ACKSyndrome(0), 8)
	// A READ response and its burst's requests keep their order: only a
	// lone acknowledgement moves.
	f, p = h.packet(bth.RCReadRequest, 9, nil, qpRETH(h.mr.Addr(), h.mr.RKey(), 16))
	if !receive(h.q, p, f) {
		t.Fatal("the READ did not join a burst")
	}
	wr.WRID = 2
	if err := h.q.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	endBurst(h.q)
	got = h.sent()
	if len(got) != 2 || got[0].OpCode() != bth.RCReadResponseOnly || got[1].OpCode() != bth.RCSendOnly {
		t.Fatalf("sent %v, want the READ response then the SEND", describe(got))
	}
}

// reth fills a request's RETH.
func qpRETH(va uint64, rkey, n uint32) func(p []byte, info *bth.Info) {
	return func(p []byte, info *bth.Info) { bth.RETH(p[info.Offset(bth.ExtRETH):]).Encode(va, rkey, n) }
}

// ackHeld posts a receive, delivers a SEND ONLY of payload at PSN 0 on
// another goroutine and returns once that message's ACK is in the link's
// send, which holds it until release is closed; the returned channel is
// closed when the delivery has returned.
func ackHeld(h *harness, payload string, release <-chan struct{}) <-chan struct{} {
	entered := make(chan struct{})
	var calls atomic.Int32
	h.link.gate = func() {
		if calls.Add(1) == 1 {
			close(entered)
			<-release
		}
	}
	h.postRecv(64)
	delivered := make(chan struct{})
	go func() {
		defer close(delivered)
		h.deliver(bth.RCSendOnly, 0, []byte(payload))
	}()
	<-entered
	return delivered
}

// A burst's acknowledgement goes to the link after the QP's lock is
// released: a post made while it is in the link's send returns without
// waiting for it, the SEND posted queues behind it and leaves with it,
// and the next burst's acknowledgement follows them.
func TestSendOutsideLock(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	release := make(chan struct{})
	first := ackHeld(h, "ping", release) // the ACK is in the link's send, which holds it

	posted := make(chan error, 1)
	go func() {
		if err := h.q.PostRecv(&transport.RecvWR{WRID: 8, SGL: []transport.SGE{h.mr.SGE(0, 64)}}); err != nil {
			posted <- err
			return
		}
		posted <- h.q.PostSend(&transport.SendWR{WRID: 9, Opcode: transport.WRSend, Flags: transport.Signaled,
			SGL: []transport.SGE{h.mr.SGE(0, 8)}})
	}()
	select {
	case err := <-posted:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second): // a bound on a failure, not a window
		close(release)
		t.Fatal("the posts waited for the link's send of the QP's acknowledgement")
	}
	if ps := h.sent(); len(ps) != 0 {
		t.Fatalf("sent %v while the ACK was in the link; want the SEND queued behind it", describe(ps))
	}
	second := make(chan struct{})
	go func() {
		defer close(second)
		h.deliver(bth.RCSendOnly, 1, []byte("pong"))
	}()
	close(release)
	<-first
	<-second
	ps := h.sent()
	if len(ps) != 3 || ps[0].OpCode() != bth.RCAcknowledge || ps[0].BTH().PSN() != 0 ||
		ps[1].OpCode() != bth.RCSendOnly || ps[2].OpCode() != bth.RCAcknowledge || ps[2].BTH().PSN() != 1 {
		t.Fatalf("sent %v; want the ACK of PSN 0, the SEND, the ACK of PSN 1, in that order", describe(ps))
	}
	if wc := polls(h.rcq); len(wc) != 2 || wc[0].Status != transport.Success || wc[1].Status != transport.Success {
		t.Fatalf("receive completions %+v; want two", wc)
	}
}

// A program may destroy its QP as soon as its last receive completes,
// while the receive goroutine still holds that message's ACK outside the
// lock (unlock). destroy waits for it to leave: a program that exits
// after destroy_qp must not leave the peer retrying into nothing (CI saw
// roced's rc_pingpong -e server fail "transport retry counter exceeded").
func TestDestroySendsDepartingACK(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	release := make(chan struct{})
	delivered := ackHeld(h, "last", release) // the receive completed; its ACK is held in the link's send
	if wc := polls(h.rcq); len(wc) != 1 || wc[0].Status != transport.Success {
		t.Fatalf("receive completions %+v; want one", wc)
	}
	destroyed := make(chan error, 1)
	go func() { destroyed <- transport.DestroyQP(h.q) }()
	for !transport.DepartWaited(h.q) {
		select {
		case err := <-destroyed:
			close(release)
			<-delivered
			t.Fatalf("destroy returned (%v) while the last receive's ACK was still to leave", err)
		default:
			runtime.Gosched()
		}
	}
	close(release)
	if err := <-destroyed; err != nil {
		t.Fatal(err)
	}
	if ps := h.sent(); len(ps) != 1 || ps[0].OpCode() != bth.RCAcknowledge || ps[0].BTH().PSN() != 0 {
		t.Fatalf("sent %v by the time destroy returned; want the ACK of PSN 0", describe(ps))
	}
	<-delivered
}
