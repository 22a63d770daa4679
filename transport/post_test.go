package transport_test

import (
	"slices"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

// ackClock is qp's: the messages in flight from which a post waits for
// the next acknowledgement to send it.
const ackClock = 16

// postOne posts one signaled 16-byte SEND, without running deferred work.
func (h *harness) postOne(id uint64) {
	h.t.Helper()
	wr := transport.SendWR{WRID: id, Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{h.mr.SGE(0, 16)}}
	if err := h.q.PostSend(&wr); err != nil {
		h.t.Fatal(err)
	}
}

// A post sends at once while fewer than ackClock messages are in flight:
// one call to the link each, the latency case. From ackClock on, the QP
// is streaming and a post waits: the acknowledgement that comes next
// sends every waiting message in one call, in order, and so does the
// post that makes ackClock wait.
func TestPostsClockedByACKs(t *testing.T) {
	h := newHarness(t, harnessOpts{sqDepth: 64, sendPSN: 100})
	for i := range ackClock {
		h.postOne(uint64(i))
		if c := h.sendCalls(); !slices.Equal(c, []int{1}) {
			t.Fatalf("post %d with %d in flight: sends %v, want one of one frame", i, i, c)
		}
	}
	h.sent()
	for i := range 8 {
		h.postOne(uint64(ackClock + i))
	}
	h.run()
	if c := h.sendCalls(); len(c) != 0 {
		t.Fatalf("posts with %d messages in flight sent at once: %v", ackClock, c)
	}
	if n := h.ctr.ClockedPosts.Load(); n != 8 {
		t.Fatalf("clocked_posts %d, want 8", n)
	}
	// The first message's ACK: the eight go out together, after the
	// sixteen, PSN 116 to 123.
	h.deliver(bth.RCAcknowledge, 100, nil, qpAETH(bth.ACKSyndrome(0x1f), 1))
	if c := h.sendCalls(); !slices.Equal(c, []int{8}) {
		t.Fatalf("after an ACK: sends %v, want one of 8 frames", c)
	}
	if got := psns(h.sent()); len(got) != 8 || got[0] != 100+ackClock || got[7] != 100+ackClock+7 {
		t.Fatalf("sent PSNs %v, want %d..%d", got, 100+ackClock, 100+ackClock+7)
	}
	// 23 in flight: ackClock-1 posts wait, the next sends all ackClock.
	for i := range ackClock - 1 {
		h.postOne(uint64(100 + i))
	}
	if c := h.sendCalls(); len(c) != 0 {
		t.Fatalf("%d waiting posts sent: %v", ackClock-1, c)
	}
	h.postOne(200)
	if c := h.sendCalls(); !slices.Equal(c, []int{ackClock}) {
		t.Fatalf("the post that made %d wait: sends %v, want one of %d frames", ackClock, c, ackClock)
	}
	last := uint32(100 + 2*ackClock + 8 - 1)
	if got := psns(h.sent()); len(got) != ackClock || got[0] != 100+ackClock+8 || got[ackClock-1] != last {
		t.Fatalf("sent PSNs %v, want %d..%d", got, 100+ackClock+8, last)
	}
	// Everything acknowledged: the next post is the latency case again.
	h.deliver(bth.RCAcknowledge, last, nil, qpAETH(bth.ACKSyndrome(0x1f), 2*ackClock+8))
	if c := h.sendCalls(); len(c) != 0 {
		t.Fatalf("after the last ACK, with nothing waiting: sends %v", c)
	}
	for n := 0; n < 2*ackClock+8; {
		wc := polls(h.scq)
		if len(wc) == 0 {
			t.Fatalf("%d completions of %d", n, 2*ackClock+8)
		}
		n += len(wc)
	}
	h.postOne(99)
	if c := h.sendCalls(); !slices.Equal(c, []int{1}) {
		t.Fatalf("a post with nothing in flight: sends %v, want one of one frame", c)
	}
}

// UC has no acknowledgements to wait for: every post sends at once.
func TestUCPostsNeverWait(t *testing.T) {
	h := newHarness(t, harnessOpts{typ: transport.UC, sqDepth: 64})
	for i := range 2 * ackClock {
		h.postOne(uint64(i))
	}
	if c := h.sendCalls(); len(c) != 2*ackClock || h.ctr.ClockedPosts.Load() != 0 {
		t.Fatalf("%d UC posts made %d sends (clocked_posts %d)", 2*ackClock, len(c), h.ctr.ClockedPosts.Load())
	}
}

// After a local ACK timeout the requester probes with the oldest packet
// alone; a message posted meanwhile goes out once the probe is answered.
func TestPostsAfterTimeoutProbe(t *testing.T) {
	h := newHarness(t, harnessOpts{sqDepth: 64, timeout: 10})
	for i := range ackClock {
		h.postOne(uint64(i))
	}
	h.sent()
	h.advance(4096<<10*time.Nanosecond + time.Microsecond) // timeout 10: 4.096 µs × 2^10
	if got := psns(h.sent()); len(got) != 1 || got[0] != 0 {
		t.Fatalf("after the timeout sent PSNs %v, want the probe of PSN 0", got)
	}
	h.postOne(ackClock)
	if got := psns(h.sent()); len(got) != 0 {
		t.Fatalf("while probing sent PSNs %v", got)
	}
	h.deliver(bth.RCAcknowledge, ackClock-1, nil, qpAETH(bth.ACKSyndrome(0x1f), ackClock))
	if got := psns(h.sent()); len(got) != 1 || got[0] != ackClock {
		t.Fatalf("after the probe's answer sent PSNs %v, want %d", got, ackClock)
	}
}
