package clock

import "time"

// Clock is the time source of a QP's timers: the local ACK timeout and the
// RNR timer. The device passes the real clock; a test passes one it moves
// by hand, so that "the timer fired" and "it did not fire" are decided by
// the test rather than by how busy the machine is.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed, like
	// time.AfterFunc.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a timer made by a Clock (*time.Timer is one).
type Timer interface {
	// Reset makes the timer fire d from now, as time.Timer.Reset.
	Reset(d time.Duration) bool
	// Stop keeps the timer from firing, as time.Timer.Stop.
	Stop() bool
}

// RealClock is the system's clock.
type Real struct{}

// realEpoch anchors RealClock's readings. A time derived from it by Add
// carries its monotonic reading, so Now reads the monotonic clock alone,
// where time.Now reads the wall clock as well: a QP reads its clock at
// every send that moves its ACK deadline, and where a read is a system
// call (the lab's TCG guests run on an emulated HPET: about 1 µs a read,
// 2.3-4.8 µs a time.Now) the second read lay on every round trip.
var realEpoch = time.Now()

// Now implements Clock. Its readings measure time; their wall-clock part
// runs on from the process's start at the monotonic clock's rate.
func (Real) Now() time.Time { return realEpoch.Add(time.Since(realEpoch)) }

// AfterFunc implements Clock.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
