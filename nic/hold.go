package nic

import (
	"sync"
	"sync/atomic"
)

// QueueHold is the hold of one receive queue that Poller describes, for a
// link's implementation: one holder at a time, the receiver from a
// receive's return to its next call, a poller from PollQueue to EndPoll;
// and a count of the polls that took frames, from which a receive that
// finds nothing learns that pollers are active, and returns none so that
// its caller can stand aside. The zero value is ready.
type QueueHold struct {
	mu    sync.Mutex
	held  bool          // the receiver holds mu (the receiver's only)
	polls atomic.Uint64 // polls that took frames
	mark  uint64        // polls at the receiver's last return (the receiver's only)
}

// Lock takes the queue, waiting for its holder.
func (h *QueueHold) Lock() { h.mu.Lock() }

// TryLock takes the queue unless somebody holds it: a poll never waits.
func (h *QueueHold) TryLock() bool { return h.mu.TryLock() }

// Unlock lets go of the queue.
func (h *QueueHold) Unlock() { h.mu.Unlock() }

// ReceiverLetsGo reports whether the receiver holds the queue since its
// last return, and forgets it: the caller, the receiver's next call or
// EndRecv, then lets go of the queue in the link's own way (some give
// buffers back first). Only the receiver calls it.
func (h *QueueHold) ReceiverLetsGo() bool {
	if !h.held {
		return false
	}
	h.held = false
	return true
}

// ReceiverKeeps records that the receiver returns frames and keeps the
// queue until its next call (under the hold).
func (h *QueueHold) ReceiverKeeps() {
	h.held = true
	h.mark = h.polls.Load()
}

// PollTook counts a poll that took frames (under the hold).
func (h *QueueHold) PollTook() { h.polls.Add(1) }

// Polls is how many polls took frames so far.
func (h *QueueHold) Polls() uint64 { return h.polls.Load() }

// PollersTook reports whether polls took frames since the receiver's last
// return. Only the receiver calls it.
func (h *QueueHold) PollersTook() bool { return h.polls.Load() != h.mark }

// StandAside records that the receiver returns no frames because pollers
// are taking them (PollersTook): the next receive waits for frames unless
// more polls take some. Only the receiver calls it.
func (h *QueueHold) StandAside() { h.mark = h.polls.Load() }
