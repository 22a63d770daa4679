package cm

import "sync"

// maxQueued bounds the MADs waiting for the manager's goroutine: past it
// one is dropped (and counted), as a MAD layer whose receive queue is
// full drops it. It is far above what a burst of connections brings (a
// thousand REQs at once, cmtime -c 1000, with their RTUs and the DREQs
// that follow), so that no connection waits 6.4 s for a retry because
// its MAD came with a crowd.
const maxQueued = 1 << 16

// madQueue is the manager's inbound queue: the device's receive path puts
// a MAD and goes on at once; it grows with a burst instead of dropping.
type madQueue struct {
	mu    sync.Mutex
	q     []inMAD
	ready chan struct{} // holds a token while q is not empty
}

func newMADQueue() *madQueue { return &madQueue{ready: make(chan struct{}, 1)} }

// put queues x, or reports false when maxQueued are waiting.
func (mq *madQueue) put(x inMAD) bool {
	mq.mu.Lock()
	if len(mq.q) >= maxQueued {
		mq.mu.Unlock()
		return false
	}
	mq.q = append(mq.q, x)
	mq.mu.Unlock()
	select {
	case mq.ready <- struct{}{}:
	default:
	}
	return true
}

// take returns what is queued, in order, and empties the queue.
func (mq *madQueue) take() []inMAD {
	mq.mu.Lock()
	defer mq.mu.Unlock()
	q := mq.q
	mq.q = nil
	return q
}
