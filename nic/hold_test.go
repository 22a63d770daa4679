package nic

import "testing"

// TestQueueHold: the receiver's record of the queue it keeps, and of the
// polls since its last return, through one receive's life (the links'
// own tests run the whole contract: linktest.PollHold).
func TestQueueHold(t *testing.T) {
	var h QueueHold
	if h.ReceiverLetsGo() || h.PollersTook() {
		t.Fatal("a new hold: the receiver holds nothing and no poll took frames")
	}
	h.Lock()
	h.ReceiverKeeps()
	if !h.ReceiverLetsGo() {
		t.Fatal("the receiver kept the queue and does not let go")
	}
	if h.ReceiverLetsGo() {
		t.Fatal("the receiver lets go twice")
	}
	h.Unlock()
	if !h.TryLock() {
		t.Fatal("a poll cannot take the queue the receiver let go")
	}
	h.PollTook()
	h.Unlock()
	if !h.PollersTook() || h.Polls() != 1 {
		t.Fatalf("after a poll took frames: PollersTook %v, Polls %d", h.PollersTook(), h.Polls())
	}
	h.StandAside()
	if h.PollersTook() {
		t.Fatal("the receiver stood aside and still sees the same poll")
	}
	h.Lock()
	h.ReceiverKeeps()
	if h.TryLock() {
		t.Fatal("a poll took the queue the receiver holds")
	}
	h.PollTook() // as if a poll had taken frames before the receiver held it
	if !h.PollersTook() {
		t.Fatal("a poll after the receiver's return is not seen")
	}
}
