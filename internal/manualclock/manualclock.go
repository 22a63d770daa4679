// Package manualclock is a clock.Clock that moves only when told to: a test
// decides exactly when a QP's local ACK timeout or RNR timer fires, and
// can prove one did not, however slowly the machine runs; roced conform
// steps its own goroce peer's timers with it the same way, so a case's
// timings are the suite's, not the machine's.
package manualclock

import (
	"sync"
	"time"

	"github.com/goroce/goroce/clock"
)

// Clock is a manual clock. Its zero value is not ready; use New.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64
	timers []*timer
}

// New returns a clock standing at an arbitrary fixed instant.
func New() *Clock { return &Clock{now: time.Unix(1_000_000_000, 0)} }

// Now implements clock.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc implements clock.Clock. f runs inside Advance, in the advancing
// goroutine, so that when Advance returns whatever the timer did (a
// retransmission, say) has been done.
func (c *Clock) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := &timer{c: c, f: f}
	c.mu.Lock()
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	t.Reset(d)
	return t
}

// Advance moves the clock forward by d, firing each timer that falls due,
// in order of expiry (ties in the order they were armed), with the clock
// standing at its expiry while it runs.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	for {
		var next *timer
		for _, t := range c.timers {
			if t.armed && !t.when.After(end) &&
				(next == nil || t.when.Before(next.when) || t.when.Equal(next.when) && t.seq < next.seq) {
				next = t
			}
		}
		if next == nil {
			break
		}
		next.armed = false
		if next.when.After(c.now) {
			c.now = next.when
		}
		c.mu.Unlock()
		next.f() // without the lock: f may reset its own timer
		c.mu.Lock()
	}
	c.now = end
	c.mu.Unlock()
}

type timer struct {
	c     *Clock
	f     func()
	when  time.Time
	seq   uint64
	armed bool
}

// Reset implements clock.Timer.
func (t *timer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.armed
	t.armed = true
	t.when = t.c.now.Add(d)
	t.c.seq++
	t.seq = t.c.seq
	return was
}

// Stop implements clock.Timer.
func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.armed
	t.armed = false
	return was
}
