package transport_test

import (
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

// aeth fills a response's AETH.
func qpAETH(s bth.Syndrome, msn uint32) func(p []byte, info *bth.Info) {
	return func(p []byte, info *bth.Info) { bth.AETH(p[info.Offset(bth.ExtAETH):]).Encode(s, msn) }
}

// postSends posts n signaled 16-byte SENDs, wr_id 0..n-1, and runs them.
func (h *harness) postSends(n int) {
	h.t.Helper()
	for i := range n {
		wr := transport.SendWR{WRID: uint64(i), Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{h.mr.SGE(0, 16)}}
		if err := h.q.PostSend(&wr); err != nil {
			h.t.Fatal(err)
		}
	}
	h.run()
}

// psns returns the PSNs of ps.
func psns(ps []bth.Packet) []uint32 {
	var v []uint32
	for _, p := range ps {
		v = append(v, uint32(p.BTH().PSN()))
	}
	return v
}

// An acknowledgement of a PSN never sent is a ghost (IBA 9.9.4.1): it is
// counted and dropped, completes nothing, and the real ACK that follows
// completes every SEND it covers, in order.
func TestGhostACKDropped(t *testing.T) {
	h := newHarness(t, harnessOpts{sendPSN: 10})
	h.postSends(3)
	if got := psns(h.sent()); len(got) != 3 || got[0] != 10 || got[2] != 12 {
		t.Fatalf("sent PSNs %v, want 10..12", got)
	}
	h.deliver(bth.RCAcknowledge, 40, nil, qpAETH(bth.ACKSyndrome(0x1f), 3))
	if wc := polls(h.scq); len(wc) != 0 || h.ctr.GhostResponses.Load() != 1 {
		t.Fatalf("a ghost ACK completed %d, ghost_responses %d", len(wc), h.ctr.GhostResponses.Load())
	}
	h.deliver(bth.RCAcknowledge, 12, nil, qpAETH(bth.ACKSyndrome(0x1f), 3))
	wc := polls(h.scq)
	if len(wc) != 3 || wc[0].WRID != 0 || wc[2].WRID != 2 || wc[2].Status != transport.Success {
		t.Fatalf("completions %+v", wc)
	}
}

// A PSN sequence NAK acknowledges what came before the PSN it names and
// makes the requester go back to that PSN (C9-116; IBA 9.9.2.3): the two
// SENDs from it are resent, not the one before.
func TestSequenceNAKGoesBack(t *testing.T) {
	h := newHarness(t, harnessOpts{sendPSN: 0xfffffe}) // across the wrap
	h.postSends(3)
	h.sent()
	h.deliver(bth.RCAcknowledge, 0xffffff, nil, qpAETH(bth.NAKSyndrome(bth.NAKPSNSequenceError), 1))
	h.run()
	if got := psns(h.sent()); len(got) != 2 || got[0] != 0xffffff || got[1] != 0 {
		t.Fatalf("resent PSNs %#x, want 0xffffff and 0", got)
	}
	if wc := polls(h.scq); len(wc) != 1 || wc[0].WRID != 0 {
		t.Fatalf("completions %+v, want the first SEND's", wc)
	}
}

// An RNR NAK makes the requester wait the time its timer code names
// (the AETH's RNR timer code: 14 is 1.28 ms) and then resend; with rnr_retry
// exhausted the WQE completes with RNRRetryExcErr (C9-145).
func TestRNRWaitsThenGivesUp(t *testing.T) {
	const rnrRetry = 2
	h := newHarness(t, harnessOpts{sendPSN: 0, rnr: rnrRetry})
	h.postSends(1)
	h.sent()
	for i := 0; i <= rnrRetry; i++ {
		h.deliver(bth.RCAcknowledge, 0, nil, qpAETH(bth.RNRNAKSyndrome(14), 0))
		if i == rnrRetry {
			break
		}
		h.advance(1250 * time.Microsecond)
		if ps := h.sent(); len(ps) != 0 {
			t.Fatalf("RNR %d: resent %v before the timer's 1.28 ms", i, describe(ps))
		}
		h.advance(40 * time.Microsecond)
		if got := psns(h.sent()); len(got) != 1 || got[0] != 0 {
			t.Fatalf("RNR %d: resent %v after the timer, want PSN 0", i, got)
		}
	}
	h.run()
	wc := polls(h.scq)
	if len(wc) != 1 || wc[0].Status != transport.RNRRetryExcErr || h.q.State() != transport.Err {
		t.Fatalf("completions %+v, state %v; want RNRRetryExcErr and ERR", wc, h.q.State())
	}
}
