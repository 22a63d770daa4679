package transport_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

// A packet of another transport with the right PSN is dropped and counted
// (IBA 9.6 header validation, as rxe's check_type_state): a UC SEND to an
// RC QP is not acknowledged and completes nothing; the RC SEND that
// follows with the same PSN is taken.
func TestTransportMismatchDropped(t *testing.T) {
	h := newHarness(t, harnessOpts{recvPSN: 100})
	h.postRecv(64)
	h.deliver(bth.UCSendOnly, 100, []byte("uc"))
	if ps := h.sent(); len(ps) != 0 || h.ctr.Malformed.Load() != 1 || len(polls(h.rcq)) != 0 {
		t.Fatalf("UC SEND to RC: sent %v, malformed %d", describe(ps), h.ctr.Malformed.Load())
	}
	h.deliver(bth.RCSendOnly, 100, []byte("rc"))
	h.ack(h.sent(), bth.ACKSyndrome(0), 100)
	if wc := polls(h.rcq); len(wc) != 1 || wc[0].Status != transport.Success || !bytes.Equal(h.buf[:2], []byte("rc")) {
		t.Fatalf("completions %+v, buffer %q", wc, h.buf[:2])
	}
}

// C9-114 and the note beside it: a request ahead of the expected PSN gets
// one NAK (PSN sequence error, for the expected PSN) per gap; later
// packets of the same gap are dropped silently; the expected PSN ends
// the gap.
func TestSequenceErrorOneNAKPerGap(t *testing.T) {
	h := newHarness(t, harnessOpts{recvPSN: 0xfffffe}) // the gap crosses the 24-bit wrap
	for range 2 {
		h.postRecv(64)
	}
	h.deliver(bth.RCSendOnly, 0x000001, []byte("ahead"))
	h.ack(h.sent(), bth.NAKSyndrome(bth.NAKPSNSequenceError), 0xfffffe)
	h.deliver(bth.RCSendOnly, 0x000002, []byte("ahead"))
	if ps := h.sent(); len(ps) != 0 {
		t.Fatalf("a second NAK for one gap: %v", describe(ps))
	}
	h.deliver(bth.RCSendOnly, 0xfffffe, []byte("next"))
	h.ack(h.sent(), bth.ACKSyndrome(0), 0xfffffe)
	if got := h.ctr.OutOfSeqRequest.Load(); got != 2 {
		t.Fatalf("out_of_seq_request %d, want 2", got)
	}
}

// A duplicate SEND (C9-104 for duplicates: the responder answers again
// and executes nothing) is acknowledged again and completes nothing more.
func TestDuplicateSendAckedAgain(t *testing.T) {
	h := newHarness(t, harnessOpts{recvPSN: 5})
	h.postRecv(64)
	h.postRecv(64)
	h.deliver(bth.RCSendOnly, 5, []byte("once"))
	h.ack(h.sent(), bth.ACKSyndrome(0), 5)
	h.deliver(bth.RCSendOnly, 5, []byte("twice"))
	h.ack(h.sent(), bth.ACKSyndrome(0), 5)
	if wc := polls(h.rcq); len(wc) != 1 || !bytes.Equal(h.buf[:4], []byte("once")) {
		t.Fatalf("%d completions, buffer %q", len(wc), h.buf[:5])
	}
	if h.ctr.DuplicateRequest.Load() != 1 {
		t.Fatalf("duplicate_request %d", h.ctr.DuplicateRequest.Load())
	}
}

// A SEND with no receive posted gets an RNR NAK carrying the QP's
// minimum RNR timer (C9-132), and is taken when the peer resends it after
// a receive is posted.
func TestRNRNAKCarriesTimer(t *testing.T) {
	h := newHarness(t, harnessOpts{minRNR: 7})
	h.deliver(bth.RCSendOnly, 0, []byte("no room"))
	h.ack(h.sent(), bth.RNRNAKSyndrome(7), 0)
	h.postRecv(64)
	h.deliver(bth.RCSendOnly, 0, []byte("room"))
	h.ack(h.sent(), bth.ACKSyndrome(0), 0)
}

// The requester resends an unacknowledged request each time its timer
// expires, retry_cnt times, and then completes it with a retry error and
// moves the QP to the error state (C9-142..C9-144, o9-28 and the timeout
// of 4.096 us * 2^timeout), all on the fake clock.
func TestRetryExhausted(t *testing.T) {
	const retry = 3
	h := newHarness(t, harnessOpts{timeout: 10, retry: retry, sendPSN: 50})
	wr := transport.SendWR{WRID: 9, Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{h.mr.SGE(0, 16)}}
	if err := h.q.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	h.run()
	timeout := 4096 * time.Nanosecond << 10
	for i := 0; i <= retry; i++ {
		ps := h.sent()
		if len(ps) != 1 || ps[0].OpCode() != bth.RCSendOnly || uint32(ps[0].BTH().PSN()) != 50 {
			t.Fatalf("attempt %d: sent %v, want the SEND of PSN 50", i, describe(ps))
		}
		if wc := polls(h.scq); len(wc) != 0 {
			t.Fatalf("attempt %d: completed early: %+v", i, wc)
		}
		h.advance(timeout + time.Microsecond)
	}
	if ps := h.sent(); len(ps) != 0 {
		t.Fatalf("sent after the last retry: %v", describe(ps))
	}
	wc := polls(h.scq)
	if len(wc) != 1 || wc[0].WRID != 9 || wc[0].Status != transport.RetryExcErr || h.q.State() != transport.Err {
		t.Fatalf("completions %+v, state %v; want RetryExcErr and ERR", wc, h.q.State())
	}
}
