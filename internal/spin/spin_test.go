package spin

import (
	"testing"
	"time"
)

// fakeClock advances by step at each read, and by a long stall at the
// reads listed in stalls (the scheduler interrupting a run).
type fakeClock struct {
	t      time.Time
	step   time.Duration
	reads  int
	stalls map[int]bool
}

func (c *fakeClock) now() time.Time {
	c.reads++
	c.t = c.t.Add(c.step)
	if c.stalls[c.reads] {
		c.t = c.t.Add(10 * time.Millisecond)
	}
	return c.t
}

func TestPeriod(t *testing.T) {
	for _, tc := range []struct {
		name   string
		step   time.Duration
		stalls map[int]bool
		want   int
	}{
		{"vDSO", 25 * time.Nanosecond, nil, 1},
		{"just under", SlowClock - time.Nanosecond, nil, 1},
		{"system call", SlowClock, nil, SlowEvery},
		{"HPET in TCG", 8 * time.Microsecond, nil, SlowEvery},
		// Seven of the eight runs stalled (run k reads 17k+1 to 17k+17;
		// a stall at its second read counts in its time), the last one
		// clean: the clean run decides.
		{"vDSO interrupted", 25 * time.Nanosecond, map[int]bool{2: true, 19: true, 36: true, 53: true, 70: true, 87: true, 104: true}, 1},
		{"vDSO, every run interrupted", 25 * time.Nanosecond, map[int]bool{2: true, 19: true, 36: true, 53: true, 70: true, 87: true, 104: true, 121: true}, SlowEvery},
	} {
		c := &fakeClock{t: time.Unix(0, 0), step: tc.step, stalls: tc.stalls}
		if got := period(c.now); got != tc.want {
			t.Errorf("%s: period = %d, want %d", tc.name, got, tc.want)
		}
		if c.reads != 8*17 {
			t.Errorf("%s: %d reads, want %d", tc.name, c.reads, 8*17)
		}
	}
}

// TestYields counts the yields of 64 polls numbered from 0 and from 1: at
// period 1 every poll yields, at SlowEvery one in SlowEvery.
func TestYields(t *testing.T) {
	for _, tc := range []struct{ n, from, want int }{{1, 0, 64}, {1, 1, 64}, {SlowEvery, 0, 64 / SlowEvery}, {SlowEvery, 1, 64 / SlowEvery}} {
		got := 0
		for i := tc.from; i < tc.from+64; i++ {
			if yields(i, tc.n) {
				got++
			}
		}
		if got != tc.want {
			t.Errorf("period %d from %d: %d yields in 64 polls, want %d", tc.n, tc.from, got, tc.want)
		}
	}
	t.Logf("this host's period for cheap polls: %d", Every(true))
	if n := Every(false); n != 1 {
		t.Errorf("Every(false) = %d: polls that are system calls yield at each", n)
	}
}
