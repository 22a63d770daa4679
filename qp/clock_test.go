package qp

import (
	"testing"
	"time"
)

// TestRealClockNow: RealClock's readings, which read the monotonic clock
// alone, order with time.Now's (which compare by their monotonic
// readings) and stay near the wall clock.
func TestRealClockNow(t *testing.T) {
	var c RealClock
	a := c.Now()
	b := time.Now()
	d := c.Now()
	if b.Before(a) || d.Before(b) {
		t.Fatalf("RealClock %v, time.Now %v, RealClock %v: out of order", a, b, d)
	}
	if off := b.Round(0).Sub(a.Round(0)); off < -time.Second || off > time.Second {
		t.Fatalf("RealClock's wall clock %v is %v from time.Now's", a.Round(0), off)
	}
	if time.Sleep(time.Millisecond); c.Now().Sub(d) < time.Millisecond {
		t.Fatalf("RealClock moved less than a millisecond over a millisecond's sleep")
	}
}
