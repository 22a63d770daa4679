package sim

import (
	"testing"
	"time"
)

// TestFairShare: two DCQCN flows, the second starting 10 ms after the
// first has the whole bottleneck, share it fairly (Jain's index >= 0.9)
// within 10 ms of simulated time, keep it busy, and hold the queue near
// the marking ramp rather than at its limit.
func TestFairShare(t *testing.T) {
	cfg := Default()
	r, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	from, to := 20*time.Millisecond, cfg.Duration // from 10 ms after the second flow starts
	j := r.Jain(from, to)
	a, b := r.Mean(0, from, to), r.Mean(1, from, to)
	mq := r.MeanQueue(from, to)
	t.Logf("Jain %.3f over (%v, %v]: flow rates %.0f and %.0f Mb/s, mean queue %.0f bytes, %d marked, CNPs %v, %d dropped",
		j, from, to, a, b, mq, r.Marked, r.CNPs, r.Dropped)
	if j < 0.9 {
		t.Errorf("Jain's index %.3f < 0.9", j)
	}
	// Not only on average: period by period (1 ms) too.
	if share := r.SampleJain(from, to, 0.9); share < 0.9 {
		t.Errorf("only %.0f%% of the 1 ms periods have Jain's index >= 0.9", 100*share)
	} else {
		t.Logf("%.0f%% of the 1 ms periods have Jain's index >= 0.9", 100*share)
	}
	if sum := a + b; sum < 0.8*cfg.Bottleneck.Rate/1e6 {
		t.Errorf("the flows used %.0f Mb/s of the bottleneck's %.0f", sum, cfg.Bottleneck.Rate/1e6)
	}
	// The queue oscillates about the top of the marking ramp, well below
	// its limit (4 Kmax): nothing is dropped.
	if mq > 1.5*float64(cfg.Bottleneck.Kmax) || r.Dropped > 0 {
		t.Errorf("mean queue %.0f bytes (Kmax %d), %d dropped", mq, cfg.Bottleneck.Kmax, r.Dropped)
	}
	if r.Marked == 0 || r.CNPs[0] == 0 || r.CNPs[1] == 0 {
		t.Errorf("no congestion signal: %d marked, CNPs %v", r.Marked, r.CNPs)
	}
	// Before the second flow starts the first has the bottleneck alone.
	if first := r.Mean(0, 0, 10*time.Millisecond); first < 0.8*cfg.Bottleneck.Rate/1e6 {
		t.Errorf("flow 0 alone reached only %.0f Mb/s", first)
	}
}

// TestNoCongestionControl: with DCQCN effectively off (rp_min_dec_fac
// 100: no CNP cuts a rate) the same two flows fill the queue to its limit
// and drop: the test above would fail without the reaction point.
func TestNoCongestionControl(t *testing.T) {
	cfg := Default()
	cfg.Params.MinDecFac = 100
	r, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Dropped == 0 || r.MeanQueue(100*time.Millisecond, cfg.Duration) < float64(cfg.Bottleneck.Kmax) {
		t.Fatalf("without rate cuts: %d dropped, mean queue %.0f", r.Dropped, r.MeanQueue(100*time.Millisecond, cfg.Duration))
	}
}
