package latency

import (
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	var s Sample
	for i := 100; i >= 1; i-- { // unsorted on purpose
		s = append(s, time.Duration(i)*time.Microsecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0, 1 * time.Microsecond}, {0.5, 50 * time.Microsecond}, {0.99, 99 * time.Microsecond}, {1, 100 * time.Microsecond}} {
		if got := s.Quantile(tc.q); got != tc.want {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if s[0] != 100*time.Microsecond {
		t.Error("Quantile sorted the caller's sample")
	}
	if (Sample{}).Quantile(0.5) != 0 || (Sample{7}).Quantile(0.99) != 7 {
		t.Error("empty or single sample")
	}
	// Three values: the median is the second, p99 the third.
	if m := (Sample{3, 1, 2}).Quantile(0.5); m != 2 {
		t.Errorf("median of 1,2,3 = %v", m)
	}
}
