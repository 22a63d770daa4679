package impair

import (
	"testing"
	"time"
)

func TestQueueMarks(t *testing.T) {
	b := Bottleneck{Rate: 8e6, Kmin: 2000, Kmax: 4000, Pmax: 0.5} // a byte a microsecond
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
	q := NewQueue(b)
	// 1000-byte packets arriving together: the queue grows by 1000 each.
	var marks []bool
	for i := range 6 {
		dep, mark, drop := q.Arrive(0, 1000, 0.49, true)
		if drop {
			t.Fatalf("packet %d dropped", i)
		}
		if want := time.Duration(i+1) * time.Millisecond; dep != want {
			t.Fatalf("packet %d departs at %v, want %v", i, dep, want)
		}
		marks = append(marks, mark)
	}
	// backlog before each: 0 1000 2000 (=Kmin: no mark) 3000 (p 0.25 < r 0.49: no) 4000 (>=Kmax) 5000.
	want := []bool{false, false, false, false, true, true}
	for i := range want {
		if marks[i] != want[i] {
			t.Fatalf("marks %v, want %v", marks, want)
		}
	}
	if got := q.Backlog(3 * time.Millisecond); got != 3000 {
		t.Fatalf("backlog after 3 ms %d, want 3000", got)
	}
	// Limit 4*Kmax = 16000: a packet that does not fit is dropped.
	if _, _, drop := q.Arrive(3*time.Millisecond, 14000, 0, true); !drop {
		t.Fatal("a packet beyond the limit was queued")
	}
	// A Not-ECT packet that would be marked is dropped (RED).
	if _, _, drop := q.Arrive(3*time.Millisecond, 1000, 0, false); !drop {
		t.Fatal("a Not-ECT packet on the ramp with r 0 (p 0.25: marked) was not dropped")
	}
}

func TestBottleneckCheck(t *testing.T) {
	for _, b := range []Bottleneck{{}, {Rate: 1, Kmin: 5, Kmax: 5}, {Rate: 1, Kmax: 5, Pmax: 2}} {
		if b.Check() == nil {
			t.Errorf("%+v passed Check", b)
		}
	}
}
