package transport

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

func TestPollOrderAndWrap(t *testing.T) {
	c := newCQ(3, nil)
	out := make([]WC, 2)
	for round := range 5 {
		for i := range 3 {
			if !c.push(WC{WRID: uint64(round*10 + i)}, false) {
				t.Fatal("push failed below depth")
			}
		}
		n, err := c.Poll(out)
		if n != 2 || err != nil || out[0].WRID != uint64(round*10) || out[1].WRID != uint64(round*10+1) {
			t.Fatalf("round %d: %d %v %+v", round, n, err, out)
		}
		n, _ = c.Poll(out)
		if n != 1 || out[0].WRID != uint64(round*10+2) {
			t.Fatalf("round %d tail: %d %+v", round, n, out)
		}
	}
	if n, err := c.Poll(out); n != 0 || err != nil {
		t.Fatalf("empty poll: %d %v", n, err)
	}
}

func TestOverrunReportsAndKeeps(t *testing.T) {
	var got error
	c := newCQ(2, func(_ *CQ, err error) { got = err })
	c.push(WC{WRID: 1}, false)
	c.push(WC{WRID: 2}, false)
	if c.push(WC{WRID: 3}, false) || !errors.Is(got, ErrOverrun) {
		t.Fatalf("overrun not reported: %v", got)
	}
	c.push(WC{WRID: 4}, false)
	if c.Lost() != 2 {
		t.Fatalf("lost %d", c.Lost())
	}
	out := make([]WC, 4)
	if n, err := c.Poll(out); n != 2 || err != nil || out[1].WRID != 2 {
		t.Fatalf("held completions: %d %v", n, err)
	}
	if _, err := c.Poll(out); !errors.Is(err, ErrOverrun) {
		t.Fatalf("after overrun: %v", err)
	}
	if err := c.Wait(context.Background()); !errors.Is(err, ErrOverrun) {
		t.Fatalf("wait after overrun: %v", err)
	}
}

func TestWaitAndContext(t *testing.T) {
	c := newCQ(4, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := c.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait on empty: %v", err)
	}
	go func() {
		waitForWaiters(c, 1)
		c.push(WC{WRID: 9}, false)
	}()
	out := make([]WC, 1)
	n, err := c.PollWait(context.Background(), out)
	if n != 1 || err != nil || out[0].WRID != 9 {
		t.Fatalf("%d %v", n, err)
	}
}

// waitForWaiters returns once n goroutines are counted in c's Wait.
func waitForWaiters(c *CQ, n int) {
	for {
		c.mu.Lock()
		w := c.waiting
		c.mu.Unlock()
		if w == n {
			return
		}
		runtime.Gosched()
	}
}

// TestPushSignalsOnlyWaiters: a push with nobody in Wait leaves no wake-up
// behind (its channel send was a lock every completion paid), while one
// with a goroutine in Wait wakes it, and a Wait that leaves on its
// context is no longer counted.
func TestPushSignalsOnlyWaiters(t *testing.T) {
	c := newCQ(4, nil)
	c.push(WC{WRID: 1}, false)
	if len(c.wake) != 0 {
		t.Fatal("a push with no waiter signalled wake")
	}
	out := make([]WC, 4)
	if n, _ := c.Poll(out); n != 1 {
		t.Fatalf("polled %d", n)
	}

	done := make(chan error, 1)
	go func() { done <- c.Wait(context.Background()) }()
	waitForWaiters(c, 1)
	c.push(WC{WRID: 2}, false)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait not woken by a push")
	}
	waitForWaiters(c, 0)
	c.Poll(out)

	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- c.Wait(ctx) }()
	waitForWaiters(c, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Wait: %v", err)
	}
	waitForWaiters(c, 0)
	c.push(WC{WRID: 3}, false)
	if len(c.wake) != 0 {
		t.Fatal("a push after the waiter left signalled wake")
	}
}

// pushingCtx is a context already done whose Done pushes a completion
// into c first: the completion comes while Wait is waiting, in the same
// instant as the context's end, which Wait sees together.
type pushingCtx struct {
	context.Context
	c    *CQ
	done chan struct{}
}

func (p pushingCtx) Done() <-chan struct{} {
	p.c.push(WC{WRID: 5}, false)
	return p.done
}

// TestWaitCompletionBeatsContext: a completion that is in the queue when
// the context ends is what Wait and PollWait return (a connection's end
// cancels a wait after its QP's flushes, or the last message, went in),
// in both modes: a wait that found the queue empty and then sees the
// context done and the completion together, and a poll-mode PollWait
// whose context ended while a completion came in beside its poll.
func TestWaitCompletionBeatsContext(t *testing.T) {
	c := newCQ(4, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	closed := make(chan struct{})
	close(closed)
	if err := c.Wait(pushingCtx{ctx, c, closed}); err != nil {
		t.Fatalf("Wait with a completion in at the context's end: %v", err)
	}
	wc := make([]WC, 1)
	if n, _ := c.Poll(wc); n != 1 || wc[0].WRID != 5 {
		t.Fatalf("polled %d %+v", n, wc[0])
	}

	// Poll mode: the completion arrives (another goroutine's push, here
	// the progress call itself, which reports nothing made) as the
	// context ends; PollWait returns it, not the context's error.
	pctx, pcancel := context.WithCancel(context.Background())
	c.setProgress(func(uint64) bool {
		if pctx.Err() == nil {
			pcancel()
			c.push(WC{WRID: 6}, false)
		}
		return false
	}, 1, nil)
	if n, err := c.PollWait(pctx, wc); n != 1 || err != nil || wc[0].WRID != 6 {
		t.Fatalf("poll-mode PollWait: %d %v %+v; want the completion", n, err, wc[0])
	}
	// With nothing in, the context's end is still the answer.
	if _, err := c.PollWait(pctx, wc); !errors.Is(err, context.Canceled) {
		t.Fatalf("poll-mode PollWait on an empty queue: %v", err)
	}
}

func TestReqNotify(t *testing.T) {
	c := newCQ(8, nil)
	c.push(WC{}, false) // not armed: no event
	select {
	case <-c.Events():
		t.Fatal("event without ReqNotify")
	default:
	}
	c.ReqNotify(true)
	c.push(WC{}, false) // armed for solicited only: an unsolicited success does not fire
	select {
	case <-c.Events():
		t.Fatal("unsolicited completion fired a solicited-only notify")
	default:
	}
	c.push(WC{}, true)
	select {
	case <-c.Events():
	default:
		t.Fatal("solicited completion did not fire")
	}
	c.push(WC{}, true) // one event per ReqNotify
	select {
	case <-c.Events():
		t.Fatal("second event without re-arming")
	default:
	}
	c.ReqNotify(true)
	c.push(WC{Status: RemAccessErr}, false) // errors always fire
	select {
	case <-c.Events():
	default:
		t.Fatal("error completion did not fire")
	}
}

// TestEventHook: with a hook set, each event calls it, once per arming,
// by the pusher, with the completion already pollable, and nothing goes
// to Events; once it is taken away (nil), events go to Events again.
func TestEventHook(t *testing.T) {
	c := newCQ(8, nil)
	calls, seen := 0, 0
	c.SetEventHook(func() {
		calls++
		seen = int(c.n) // under the lock: the completion is in the queue
	})
	c.push(WC{}, false) // not armed
	c.ReqNotify(false)
	c.push(WC{}, false)
	c.push(WC{}, false) // one event per arming
	if calls != 1 || seen != 2 {
		t.Fatalf("hook called %d times, seeing %d completions; want once, seeing 2", calls, seen)
	}
	select {
	case <-c.Events():
		t.Fatal("an event went to Events with a hook set")
	default:
	}
	c.SetEventHook(nil)
	c.ReqNotify(false)
	c.push(WC{}, false)
	select {
	case <-c.Events():
	default:
		t.Fatal("without the hook, the event did not go to Events")
	}
	if calls != 1 {
		t.Fatalf("the hook taken away was called: %d calls", calls)
	}
}

func TestResize(t *testing.T) {
	c := newCQ(4, nil)
	for i := range 3 {
		c.push(WC{WRID: uint64(i)}, false)
	}
	if err := c.Resize(2); !errors.Is(err, ErrTooShallow) {
		t.Fatalf("shrink below fill: %v", err)
	}
	if err := c.Resize(8); err != nil || c.Depth() != 8 {
		t.Fatal(err)
	}
	out := make([]WC, 8)
	if n, _ := c.Poll(out); n != 3 || out[2].WRID != 2 {
		t.Fatalf("%d %+v", n, out[:n])
	}
}

func TestStatusStrings(t *testing.T) {
	// The strings of ibv_wc_status_str, which tools print.
	for s, want := range map[WCStatus]string{Success: "success", WRFlushErr: "Work Request Flushed Error",
		RetryExcErr: "transport retry counter exceeded", RNRRetryExcErr: "RNR retry counter exceeded",
		RemAccessErr: "remote access error"} {
		if s.String() != want {
			t.Errorf("%d: %q, want %q", s, s.String(), want)
		}
	}
}

// TestMirror: a mirrored queue's length is in the mirror after every push
// and poll, and reads ^0 once the queue has an error (an overrun, or its
// device closed), so that a C poller never takes it for empty; unmirrored,
// the word is left alone.
func TestMirror(t *testing.T) {
	var m uint32 = 7
	c := newCQ(2, nil)
	c.SetMirror(&m)
	if m != 0 {
		t.Fatalf("mirror %d of an empty queue", m)
	}
	c.push(WC{WRID: 1}, false)
	c.push(WC{WRID: 2}, false)
	if m != 2 {
		t.Fatalf("mirror %d after two pushes", m)
	}
	out := make([]WC, 1)
	c.Poll(out)
	if m != 1 {
		t.Fatalf("mirror %d after a poll", m)
	}
	c.push(WC{WRID: 3}, false)
	c.push(WC{WRID: 4}, false) // overruns
	if m != ^uint32(0) {
		t.Fatalf("mirror %d after an overrun", m)
	}
	c.Poll(make([]WC, 4))
	if m != ^uint32(0) {
		t.Fatalf("mirror %d of a drained queue in error", m)
	}
	d := newCQ(2, nil)
	var n uint32
	d.SetMirror(&n)
	d.shutdown(errors.New("closed"))
	if n != ^uint32(0) {
		t.Fatalf("mirror %d after shutdown", n)
	}
	d.SetMirror(nil)
	n = 5
	d.Poll(out)
	if n != 5 {
		t.Fatal("an unmirrored queue wrote the word")
	}
}

// TestPollProgress: on a device in poll mode an empty Poll calls the
// device's progress, and a completion it makes is returned by that same
// Poll; PollWait keeps polling (no wake-up needed) until one comes; a
// queue with completions does not call progress; and a full wc of zero
// length asks for nothing.
func TestPollProgress(t *testing.T) {
	c := newCQ(4, nil)
	calls := 0
	c.setProgress(func(uint64) bool {
		calls++
		if calls%3 == 0 {
			c.push(WC{WRID: uint64(calls)}, false)
			return true
		}
		return false
	}, 1, nil)
	wc := make([]WC, 1)
	if n, err := c.Poll(wc); n != 0 || err != nil || calls != 1 {
		t.Fatalf("first poll: %d %v, progress called %d times", n, err, calls)
	}
	if n, err := c.Poll(wc); n != 0 || err != nil || calls != 2 {
		t.Fatalf("second poll: %d %v, progress called %d times", n, err, calls)
	}
	if n, err := c.Poll(wc); n != 1 || err != nil || wc[0].WRID != 3 {
		t.Fatalf("third poll: %d %v %+v; want the completion progress made", n, err, wc[0])
	}
	if n, err := c.PollWait(context.Background(), wc); n != 1 || err != nil || wc[0].WRID != 6 || calls != 6 {
		t.Fatalf("PollWait: %d %v %+v after %d calls; want the completion of call 6", n, err, wc[0], calls)
	}
	c.push(WC{WRID: 100}, false)
	if n, _ := c.Poll(wc); n != 1 || wc[0].WRID != 100 || calls != 6 {
		t.Fatalf("a queue holding a completion: %d %+v, progress called %d times; want 6", n, wc[0], calls)
	}
	if n, _ := c.Poll(nil); n != 0 || calls != 6 {
		t.Fatalf("Poll(nil) called progress")
	}
	// A cancelled context ends a PollWait that finds nothing.
	c.setProgress(func(uint64) bool { return false }, 1, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.PollWait(ctx, wc); !errors.Is(err, context.Canceled) {
		t.Fatalf("PollWait with a cancelled context: %v", err)
	}
}

// TestPollArmed: in poll mode a queue armed for an event does not drive
// the device: arming calls onArm (the device wakes its receive
// goroutine), an empty Poll of the armed queue calls no progress, and
// once the event fired the queue's polls drive the device again.
func TestPollArmed(t *testing.T) {
	c := newCQ(4, nil)
	calls, arms := 0, 0
	c.setProgress(func(uint64) bool { calls++; return false }, 1, func() { arms++ })
	wc := make([]WC, 1)
	c.Poll(wc)
	if calls != 1 {
		t.Fatalf("unarmed empty poll: progress called %d times, want 1", calls)
	}
	c.ReqNotify(false)
	if arms != 1 {
		t.Fatalf("ReqNotify called onArm %d times, want 1", arms)
	}
	for range 3 {
		if n, _ := c.Poll(wc); n != 0 {
			t.Fatal("a completion from nowhere")
		}
	}
	if calls != 1 {
		t.Fatalf("armed empty polls called progress %d more times, want none", calls-1)
	}
	c.push(WC{WRID: 1}, false) // the event fires: disarmed
	select {
	case <-c.Events():
	default:
		t.Fatal("no event for the completion")
	}
	if n, _ := c.Poll(wc); n != 1 || wc[0].WRID != 1 {
		t.Fatalf("the completion: %d %+v", n, wc[0])
	}
	c.Poll(wc)
	if calls != 2 {
		t.Fatalf("after the event an empty poll called progress %d times in all, want 2", calls)
	}
}

// TestPollArmedKeepsPolling: a program that keeps polling a queue it
// armed (UCX's UD transport arms its receive queue for solicited events
// only and busy-polls it; non-solicited completions leave it armed) is a
// poller: after armedIdlePolls empty polls the queue drives the device
// again, and a new arming gives the program its idle polls anew. Before,
// every poll of such a queue drove nothing, and UCX's ud_verbs tag_lat
// in poll mode waited for the receive goroutine: 540 µs against 20.
func TestPollArmedKeepsPolling(t *testing.T) {
	c := newCQ(4, nil)
	calls := 0
	c.setProgress(func(uint64) bool { calls++; return false }, 1, func() {})
	wc := make([]WC, 1)
	c.ReqNotify(true)
	c.push(WC{WRID: 1}, false) // not solicited: the queue stays armed
	select {
	case <-c.Events():
		t.Fatal("an event for a completion that is not solicited")
	default:
	}
	if n, _ := c.Poll(wc); n != 1 {
		t.Fatal("the completion is not polled")
	}
	for i := range armedIdlePolls {
		c.Poll(wc)
		if calls != 0 {
			t.Fatalf("empty poll %d after the arming called progress", i+1)
		}
	}
	for range 3 {
		c.Poll(wc)
	}
	if calls != 3 {
		t.Fatalf("the polls after the idle ones called progress %d times, want 3", calls)
	}
	c.ReqNotify(true)
	c.Poll(wc)
	if calls != 3 {
		t.Fatal("a new arming gave no idle poll")
	}
}

// TestPollWaitSleepsAfterSpin: on a device in poll mode, a PollWait that
// finds nothing polls (calling progress) for pollSpin, then sleeps in Wait
// rather than spinning on, and a push wakes it with the completion.
func TestPollWaitSleepsAfterSpin(t *testing.T) {
	c := newCQ(4, nil)
	var calls atomic.Int64
	c.setProgress(func(uint64) bool { calls.Add(1); return false }, 1, nil)
	type result struct {
		n   int
		err error
		wc  WC
	}
	done := make(chan result, 1)
	go func() {
		wc := make([]WC, 1)
		n, err := c.PollWait(context.Background(), wc)
		done <- result{n, err, wc[0]}
	}()
	waitForWaiters(c, 1)
	if calls.Load() < pollClock {
		t.Fatalf("slept after %d polls", calls.Load())
	}
	c.push(WC{WRID: 7}, false)
	select {
	case r := <-done:
		if r.n != 1 || r.err != nil || r.wc.WRID != 7 {
			t.Fatalf("woken with %d %v %+v", r.n, r.err, r.wc)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a sleeping PollWait was not woken by a push")
	}
}

// TestPollEmptyTakesNoLock: polling an empty queue reads ready and takes no
// lock, so that a poller spinning on it does not contend with the pushes
// it waits for. The test holds the lock while it polls: a Poll that took
// it would block until the lock is let go, which the test does only after
// Poll returned or a bound that fails the test.
func TestPollEmptyTakesNoLock(t *testing.T) {
	c := newCQ(2, nil)
	progressed := 0
	c.setProgress(func(uint64) bool { progressed++; return false }, 1, nil)
	c.mu.Lock()
	done := make(chan struct{})
	var n int
	var err error
	go func() {
		defer close(done)
		n, err = c.Poll(make([]WC, 1))
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		c.mu.Unlock()
		<-done
		t.Fatal("Poll of an empty queue waited for the queue's lock")
	}
	c.mu.Unlock()
	if n != 0 || err != nil || progressed != 1 {
		t.Fatalf("Poll of an empty queue: %d %v, progress called %d times; want 0, nil, once", n, err, progressed)
	}
	// ready follows n and err: a push, a poll, an error.
	c.push(WC{WRID: 1}, false)
	if got := c.ready.Load(); got != 1 {
		t.Fatalf("ready %d after a push", got)
	}
	if n, _ := c.Poll(make([]WC, 1)); n != 1 || c.ready.Load() != 0 {
		t.Fatalf("poll took %d, ready %d after", n, c.ready.Load())
	}
	c.shutdown(errors.New("closed"))
	if n, err := c.Poll(make([]WC, 1)); n != 0 || err == nil {
		t.Fatalf("poll after shutdown: %d %v, want the error", n, err)
	}
}
