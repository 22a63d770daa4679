package linktest

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic"
)

// PollHold checks nic.Poller's contract on b, fed by a: frames go to
// whoever holds the queue, one holder at a time, each frame once and in
// the order sent; a frame that arrives while a poller holds the queue is
// the receiver's once the poller lets go (it must not wait for another
// frame to wake the receiver); and a receiver and a poller taking from
// the queue at once hand over count frames without a loss, a repeat or a
// reordering; and a receive that finds nothing after pollers took frames
// since the receiver's last return returns none at once, so that its
// caller can stand aside. b's queue 0 is used; b is closed at the end.
//
// The frames are recorded in one slice without a lock of the test's own:
// only the queue's hold orders the holders, so a hold that let two in at
// once is a data race the race detector reports.
func PollHold(t *testing.T, a, b nic.Link, o bth.Outer, count int) {
	t.Helper()
	p := b.(nic.Poller)
	frames := Frames(o, 12+count, 16)
	var seen []int // PSNs in the order their holders took them
	take := func(fs []nic.Frame) error {
		for _, f := range fs {
			psn, err := CheckFrame(f, o, 16)
			if err != nil {
				return err
			}
			if psn != len(seen) {
				return fmt.Errorf("frame %d handled after %d frames: out of order, lost or repeated", psn, len(seen))
			}
			seen = append(seen, psn)
		}
		return nil
	}
	send := func(from, to int) {
		if n, err := a.Send(frames[from:to]); n != to-from || err != nil {
			t.Fatalf("send %d..%d: %d, %v", from, to, n, err)
		}
	}
	// A frame that never comes fails the test rather than hang it.
	guard := time.AfterFunc(60*time.Second, func() { b.Close() })
	defer guard.Stop()
	buf := make([]nic.Frame, 64)
	pollUntil := func(want int, end bool) {
		for len(seen) < want {
			n := p.PollQueue(0, buf)
			if n == 0 {
				if guard.Stop() {
					guard.Reset(60 * time.Second)
				} else {
					t.Fatalf("%d of %d frames came to the poller", len(seen), want)
				}
				runtime.Gosched()
				continue
			}
			if err := take(buf[:n]); err != nil {
				t.Fatal(err)
			}
			if end || len(seen) < want {
				p.EndPoll(0)
			}
		}
	}

	// 0. The receiver holds the queue from Recv's return: a poller gets
	// nothing until the receiver calls Recv again, or lets go (EndRecv).
	send(0, 1)
	if n, err := b.Recv(buf); err != nil || n != 1 {
		t.Fatalf("receiver: %d frames, %v", n, err)
	} else if err := take(buf[:1]); err != nil {
		t.Fatal(err)
	}
	send(1, 2)
	if n := p.PollQueue(0, make([]nic.Frame, 4)); n != 0 {
		t.Fatalf("a poller took %d frames from a queue the receiver holds", n)
	}
	p.EndRecv(0)

	// 1. No receiver: the poller alone takes the next five.
	send(2, 6)
	pollUntil(6, true)

	// 1b. Pollers took frames since the receiver's last return, and none
	// is waiting: Recv returns none at once, so that its caller can stand
	// aside (should it wait, the guard closes b and Recv fails).
	if n, err := b.Recv(buf); n != 0 || err != nil {
		t.Fatalf("receive after pollers took frames, none waiting: %d frames, %v; want none at once", n, err)
	}
	// No poll since that return: the next Recv waits for a frame.
	send(6, 7)
	if n, err := b.Recv(buf); n != 1 || err != nil {
		t.Fatalf("receive with no poll since the last: %d frames, %v; want frame 6", n, err)
	} else if err := take(buf[:1]); err != nil {
		t.Fatal(err)
	}
	p.EndRecv(0)

	// 2. The poller holds the queue while frames 8..11 arrive and the
	// receiver starts; they are the receiver's when the poller lets go.
	send(7, 8)
	pollUntil(8, false) // holding
	var byRecv, byPoll, empty atomic.Int64
	byRecv.Store(2) // frames 0 and 6
	byPoll.Store(6) // frames 1..5 and 7
	errs := make(chan error, 2)
	go func() {
		rb := make([]nic.Frame, 64)
		for {
			n, err := b.Recv(rb)
			if err == nil {
				err = take(rb[:n])
			}
			if err != nil {
				errs <- fmt.Errorf("receiver: %w", err)
				return
			}
			if n == 0 {
				empty.Add(1)
			}
			byRecv.Add(int64(n))
		}
	}()
	send(8, 12)
	p.EndPoll(0)
	wait := func(want int64) {
		for byRecv.Load()+byPoll.Load() < want {
			select {
			case err := <-errs:
				t.Fatalf("%d of %d frames handled: %v (tx %+v rx %+v)", byRecv.Load()+byPoll.Load(), want, err, a.Stats(), b.Stats())
			default:
			}
			runtime.Gosched()
		}
	}
	wait(12)
	if byRecv.Load() != 6 {
		t.Fatalf("the receiver took %d frames, want frames 0 and 6 and the 4 that came while the poller held the queue", byRecv.Load())
	}

	// 3. Both at once: the receiver keeps receiving, the poller polls, and
	// the sender stays at most a window ahead of what was handled (nothing
	// in a path has flow control).
	total := int64(12 + count)
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for byRecv.Load()+byPoll.Load() < total {
			n := p.PollQueue(0, buf)
			if n == 0 {
				runtime.Gosched()
				continue
			}
			err := take(buf[:n])
			byPoll.Add(int64(n))
			p.EndPoll(0)
			if err != nil {
				errs <- fmt.Errorf("poller: %w", err)
				return
			}
		}
	}()
	for i := 12; i < 12+count; i += 16 {
		wait(int64(i - 256))
		send(i, min(i+16, 12+count))
	}
	wait(total)
	<-polled
	t.Logf("%d frames: %d by the receiver, %d by the poller; %d receives returned none", total, byRecv.Load(), byPoll.Load(), empty.Load())

	b.Close()
}
