// Package latency turns the round trips a benchmark timed one by one into
// the figures the project reports for latency: p50 and p99, never only a
// mean, so that goroce's path and the raw path beside it compare like for
// like.
package latency

import (
	"slices"
	"testing"
	"time"
)

// Sample is a set of measured durations.
type Sample []time.Duration

// Quantile returns the q-quantile (0 <= q <= 1) by the nearest-rank
// method: the smallest duration that at least q of the sample does not
// exceed. An empty sample gives 0.
func (s Sample) Quantile(q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	t := slices.Clone(s)
	slices.Sort(t)
	i := int(q*float64(len(t))+0.999999999) - 1 // ceil(q*n) - 1
	return t[min(max(i, 0), len(t)-1)]
}

// Report adds p50 and p99 in microseconds to the benchmark's figures.
func (s Sample) Report(b *testing.B) {
	b.ReportMetric(usec(s.Quantile(0.50)), "p50-usec")
	b.ReportMetric(usec(s.Quantile(0.99)), "p99-usec")
}

func usec(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
