package manualclock

import (
	"slices"
	"testing"
	"time"
)

func TestAdvanceFiresDueTimersInOrder(t *testing.T) {
	c := New()
	start := c.Now()
	var fired []string
	at := map[string]time.Duration{}
	mk := func(name string, d time.Duration) {
		c.AfterFunc(d, func() { fired = append(fired, name); at[name] = c.Now().Sub(start) })
	}
	mk("b", 2*time.Millisecond)
	mk("a", time.Millisecond)
	mk("c", 3*time.Millisecond)
	mk("a2", time.Millisecond) // same expiry as a, armed later
	c.Advance(2*time.Millisecond - 1)
	if !slices.Equal(fired, []string{"a", "a2"}) {
		t.Fatalf("after 2ms-1ns fired %v", fired)
	}
	c.Advance(1)
	if !slices.Equal(fired, []string{"a", "a2", "b"}) || at["b"] != 2*time.Millisecond || at["a"] != time.Millisecond {
		t.Fatalf("after 2ms fired %v at %v", fired, at)
	}
	if got := c.Now().Sub(start); got != 2*time.Millisecond {
		t.Fatalf("now %v", got)
	}
}

func TestStopResetAndRearmFromCallback(t *testing.T) {
	c := New()
	n := 0
	var tm interface{ Reset(time.Duration) bool }
	tm = c.AfterFunc(time.Second, func() {
		n++
		if n < 3 {
			tm.Reset(time.Second) // a periodic timer re-arms itself
		}
	})
	c.Advance(10 * time.Second)
	if n != 3 {
		t.Fatalf("fired %d times, want 3", n)
	}
	s := c.AfterFunc(time.Second, func() { t.Fatal("a stopped timer fired") })
	if !s.Stop() || s.Stop() {
		t.Fatal("Stop reports wrongly whether the timer was armed")
	}
	c.Advance(time.Hour)
	r := c.AfterFunc(time.Second, func() { n = 100 })
	c.Advance(500 * time.Millisecond)
	if !r.Reset(time.Second) { // now due 1.5 s after arming
		t.Fatal("Reset of an armed timer reports it idle")
	}
	c.Advance(999 * time.Millisecond)
	if n == 100 {
		t.Fatal("fired at its first expiry after Reset")
	}
	c.Advance(time.Millisecond)
	if n != 100 {
		t.Fatal("did not fire at its reset expiry")
	}
}
