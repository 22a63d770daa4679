package clock

import (
	"testing"
	"time"
)

// TestRealClockNow: RealClock's readings, which read the monotonic clock
// alone, order with time.Now's (which compare by their monotonic
// readings), stay near the wall clock, and their wall-clock part moves
// exactly as their monotonic part does. Each reading is bracketed by two
// of time.Now's, so the bounds hold however long the machine takes
// between them.
func TestRealClockNow(t *testing.T) {
	var c Real
	x0 := time.Now()
	a := c.Now()
	y0 := time.Now()
	x1 := time.Now()
	b := c.Now()
	y1 := time.Now()
	if a.Before(x0) || y0.Before(a) || b.Before(x1) || y1.Before(b) {
		t.Fatalf("time.Now %v, RealClock %v, time.Now %v; time.Now %v, RealClock %v, time.Now %v: out of order", x0, a, y0, x1, b, y1)
	}
	if off := y0.Round(0).Sub(a.Round(0)); off < -time.Second || off > time.Second {
		t.Fatalf("RealClock's wall clock %v is %v from time.Now's", a.Round(0), off)
	}
	el := b.Sub(a)
	if el < x1.Sub(y0) || el > y1.Sub(x0) {
		t.Fatalf("RealClock moved %v between readings that time.Now brackets as %v to %v", el, x1.Sub(y0), y1.Sub(x0))
	}
	if w := b.Round(0).Sub(a.Round(0)); w != el {
		t.Fatalf("RealClock's wall-clock part moved %v where its monotonic part moved %v", w, el)
	}
}
