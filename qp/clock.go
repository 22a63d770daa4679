package qp

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

// RealClock is the wall clock.
type RealClock struct{}

// Now implements Clock.
func (RealClock) Now() time.Time { return time.Now() }

// AfterFunc implements Clock.
func (RealClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
