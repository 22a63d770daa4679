package perftest

import (
	"math"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestBWReportFigures checks print_report_bw's arithmetic on hand-made samples
// (nanosecond cycles: 1e9 per second).
func TestBWReportFigures(t *testing.T) {
	const mib = 1048576.0
	tests := []struct {
		name                  string
		s                     bwSamples
		gbits                 bool
		peak, avg, rate, iter float64
	}{{
		// Four messages, a completion every two: the run takes 200 ns;
		// the best window is message 0 to the completion of message 1:
		// 60 ns for 2, 30 ns each.
		name: "peak",
		s: bwSamples{size: 1000, iters: 4, cqMod: 2, postList: 1,
			posted: []int64{0, 10, 20, 30}, completed: []int64{0, 60, 0, 200}},
		peak: 1000 * 1e9 / (30 * mib), avg: 4000 * 1e9 / (200 * mib), rate: 4e9 / (200 * 1e6), iter: 4,
	}, {
		// Five messages, moderation 2: the last one is signaled off the
		// grid and its window counts (posted[4]..completed[4] = 5 ns).
		name: "last signaled",
		s: bwSamples{size: 100, iters: 5, cqMod: 2, postList: 1,
			posted: []int64{0, 1, 2, 3, 95}, completed: []int64{0, 400, 0, 800, 100}},
		peak: 100 * 1e9 / (5 * mib), avg: 500 * 1e9 / (100 * mib), rate: 5e9 / (100 * 1e6), iter: 5,
	}, {
		// Integer division of the window, as cycles_t: 100 ns for 3
		// messages is 33 ns each.
		name: "truncated window",
		s: bwSamples{size: 64, iters: 3, cqMod: 3, postList: 1,
			posted: []int64{0, 1, 2}, completed: []int64{0, 0, 100}},
		peak: 64 * 1e9 / (33 * mib), avg: 192 * 1e9 / (100 * mib), rate: 3e9 / (100 * 1e6), iter: 3,
	}, {
		name:  "no peak, Gbit/s",
		s:     bwSamples{size: 125, iters: 10, noPeak: true, cqMod: 1, postList: 1, posted: []int64{1000}, completed: []int64{2000}},
		gbits: true,
		peak:  0, avg: 1250 * 1e9 / (1000 * 125e6), rate: 10e9 / (1000 * 1e6), iter: 10,
	}, {
		name: "post list",
		s: bwSamples{size: 10, iters: 4, cqMod: 2, postList: 2,
			posted: []int64{0, 0, 50, 0}, completed: []int64{0, 20, 0, 60}},
		// windows from posts 0 and 2: 20/2, 60/4, 10/2 → 5 ns
		peak: 10 * 1e9 / (5 * mib), avg: 40 * 1e9 / (60 * mib), rate: 4e9 / (60 * 1e6), iter: 4,
	}}
	for _, tt := range tests {
		r := bwReport(tt.s, tt.gbits)
		if !near(r.BWPeak, tt.peak) || !near(r.BWAvg, tt.avg) || !near(r.MsgRate, tt.rate) || float64(r.Iters) != tt.iter || r.Size != tt.s.size {
			t.Errorf("%s: got peak %v avg %v rate %v iters %d, want %v %v %v %v", tt.name, r.BWPeak, r.BWAvg, r.MsgRate, r.Iters, tt.peak, tt.avg, tt.rate, tt.iter)
		}
	}
	if r := bwReport(bwSamples{size: 8}, false); r.BWAvg != 0 || r.BWPeak != 0 {
		t.Errorf("empty run: %+v", r)
	}
}

// TestLatReport checks print_report_lat on hand-made samples.
func TestLatReport(t *testing.T) {
	// Deltas 10, 20, 5, 65, 1 µs; sorted 1 5 10 20 65; the two largest
	// are dropped from the statistics (but 20 is the max and the
	// percentiles, delta[measure_cnt] and delta[ceil(3*0.99)]).
	posted := []int64{0, 10000, 30000, 35000, 100000, 101000}
	tests := []struct {
		name                               string
		roundTrip, cycles                  bool
		min, max, typ, avg, p99, p999, std float64
	}{
		{"read", false, false, 1, 20, 5, 16.0 / 3, 20, 20, math.Sqrt(((16.0/3-1)*(16.0/3-1) + (16.0/3-5)*(16.0/3-5) + (16.0/3-10)*(16.0/3-10)) / 3)},
		{"write", true, false, 0.5, 10, 2.5, 8.0 / 3, 10, 10, math.Sqrt(((8.0/3-0.5)*(8.0/3-0.5) + (8.0/3-2.5)*(8.0/3-2.5) + (8.0/3-5)*(8.0/3-5)) / 3)},
		{"cycles", false, true, 1000, 20000, 5000, 16000.0 / 3, 20000, 20000, 1000 * math.Sqrt(((16.0/3-1)*(16.0/3-1)+(16.0/3-5)*(16.0/3-5)+(16.0/3-10)*(16.0/3-10))/3)},
	}
	for _, tt := range tests {
		res, err := latReport(latSamples{size: 64, iters: 6, posted: posted, roundTrip: tt.roundTrip, reportCycles: tt.cycles})
		if err != nil {
			t.Fatal(err)
		}
		r := res.LatReport
		if !near(r.Min, tt.min) || !near(r.Max, tt.max) || !near(r.Typical, tt.typ) || !near(r.Avg, tt.avg) ||
			!near(r.Percentile99, tt.p99) || !near(r.Percentile999, tt.p999) || !near(r.Stdev, tt.std) || r.Iters != 6 {
			t.Errorf("%s: %+v", tt.name, r)
		}
		if len(res.unsorted) != 5 || len(res.sorted) != 3 {
			t.Errorf("%s: %d unsorted, %d sorted samples", tt.name, len(res.unsorted), len(res.sorted))
		}
	}
	// An even count takes the mean of the middle two (get_median).
	res, _ := latReport(latSamples{size: 2, iters: 7, posted: []int64{0, 1000, 3000, 6000, 10000, 15000, 21000}})
	if !near(res.Typical, 2.5) {
		t.Errorf("median of 1 2 3 4: %v", res.Typical)
	}
	if _, err := latReport(latSamples{iters: 3, posted: []int64{0, 1, 2}}); err == nil {
		t.Error("3 iterations gave a report")
	}
	d := latDurationReport(64, 1000, int64(2e9), true)
	if !near(d.Avg, 1000) || !near(d.TPSAverage, 500) {
		t.Errorf("duration: %+v", d)
	}
}

// TestCycleOffsets checks the buffer addressing both sides compute.
func TestCycleOffsets(t *testing.T) {
	tests := []struct{ size, n, off uint64 }{
		{1, 0, 0}, {1, 1, 64}, {1, 63, 4032}, {1, 64, 0}, // 64 messages of a cache line
		{65, 1, 128}, {65, 32, 0}, // 2 lines each: 32 per cycle
		{2048, 1, 2048}, {2048, 2, 0}, // half the cycle buffer still rotates
		{2049, 5, 0}, {65536, 3, 0}, // larger ones do not
	}
	for _, tt := range tests {
		if got := ptCycleOffset(tt.size, tt.n); got != tt.off {
			t.Errorf("offset(size %d, message %d) = %d, want %d", tt.size, tt.n, got, tt.off)
		}
	}
	if ptBuffSize(100) != 4096 || ptBuffSize(65536) != 65536 || ptInc(1) != 64 || ptInc(65) != 128 {
		t.Error("BUFF_SIZE / INC")
	}
}

// TestDeviceAttr: the negotiation struct carries the engine's limits; the
// peer lowers its outstanding reads to MaxQPRdAtom.
func TestDeviceAttr(t *testing.T) {
	link, err := mem.NewNet(1).Attach(netip.MustParseAddr("192.0.2.1"), mem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := transport.Open(link, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	a := ptDeviceAttr(dev)
	if a.MaxQPRdAtom != transport.MaxRdAtomic || a.MaxQPInitRdAtom != transport.MaxRdAtomic || a.MaxQPWR != transport.MaxWR ||
		a.MaxSGE != transport.MaxSGE || a.MaxSRQWR != transport.MaxWR || a.PhysPortCnt != 1 || a.MaxPkeys != 1 || a.AtomicCap != 1 {
		t.Errorf("%+v", a)
	}
	p := Params{Attr: a}
	back, err := ParseParams(p.Marshal())
	if err != nil || back.Attr != a {
		t.Errorf("attributes do not survive the wire: %v", err)
	}
}
