package udp

import (
	"testing"
	"time"
)

// TestRxGapsBudget: adaptive busy polling spins only while receives come
// within flowGap of each other on average: not before two
// receives, not for sparse traffic; one long pause in a fast flow does
// not stop it, and a flow that resumes starts it within a few receives; polls that keep running out stop it but for a retry now
// and then.
func TestRxGapsBudget(t *testing.T) {
	var g rxGaps
	t0 := time.Unix(1000, 0)
	at := t0
	recv := func(gap time.Duration) {
		at = at.Add(gap)
		g.received(at)
	}
	if b := g.budget(); b != 0 {
		t.Fatalf("no receive yet: budget %v, want 0", b)
	}
	recv(0)
	if b := g.budget(); b != 0 {
		t.Fatalf("one receive: budget %v, want 0", b)
	}
	// Sparse: a receive every millisecond.
	for range 20 {
		recv(time.Millisecond)
	}
	if b := g.budget(); b != 0 {
		t.Fatalf("a receive every 1 ms: budget %v, want 0", b)
	}
	// A ping-pong: 10 µs apart. The average comes down within a few
	// dozen receives.
	for range 40 {
		recv(10 * time.Microsecond)
	}
	if b := g.budget(); b != AdaptiveBusyPoll {
		t.Fatalf("a receive every 10 µs: budget %v, want %v (average %v)", b, AdaptiveBusyPoll, g.avg)
	}
	// One pause of 200 µs in the flow does not stop the polling.
	recv(200 * time.Microsecond)
	if b := g.budget(); b != AdaptiveBusyPoll {
		t.Fatalf("after one 200 µs pause: budget %v, want %v (average %v)", b, AdaptiveBusyPoll, g.avg)
	}
	// The flow stops for a second: one such silence is a pause too...
	recv(time.Second)
	if b := g.budget(); b != AdaptiveBusyPoll {
		t.Fatalf("after a second's silence: budget %v, want %v (average %v)", b, AdaptiveBusyPoll, g.avg)
	}
	// ...but traffic that stays sparse stops the polling within a few
	// receives,
	for range 8 {
		recv(time.Millisecond)
	}
	if b := g.budget(); b != 0 {
		t.Fatalf("after 8 receives 1 ms apart: budget %v, want 0 (average %v)", b, g.avg)
	}
	// and a flow that resumes starts it again within a few.
	for range 8 {
		recv(10 * time.Microsecond)
	}
	if b := g.budget(); b != AdaptiveBusyPoll {
		t.Fatalf("8 receives 10 µs apart after sparse traffic: budget %v, want %v (average %v)", b, AdaptiveBusyPoll, g.avg)
	}
	// Sparse traffic within flowGap whose packets the polls keep
	// missing: after maxVain polls in vain, it polls once in retryVain.
	for range 40 {
		recv(10 * time.Microsecond)
	}
	polls := 0
	for range maxVain + 2*retryVain {
		if g.budget() > 0 {
			polls++
			g.spun(false)
		}
	}
	if want := maxVain + 2; polls != want {
		t.Fatalf("polls in vain: %d polls made of %d chances, want %d", polls, maxVain+2*retryVain, want)
	}
	// One that finds a packet starts polling again.
	g.spun(true)
	if b := g.budget(); b != AdaptiveBusyPoll {
		t.Fatalf("after a poll that found a packet: budget %v, want %v", b, AdaptiveBusyPoll)
	}
	// Receives in one instant (a clock that did not move) still count as
	// a fast flow, not as no history.
	var h rxGaps
	h.received(t0)
	h.received(t0)
	if b := h.budget(); b != AdaptiveBusyPoll {
		t.Fatalf("two receives at one instant: budget %v, want %v", b, AdaptiveBusyPoll)
	}
}
