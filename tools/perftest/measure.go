package perftest

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// The perftest commands measure with "cycles" as the tools do, but their
// cycles are nanoseconds of the monotonic clock: goroce's CPU may be
// virtual, shared or frequency-scaled, and the tools' own cycle counter
// (rdtsc scaled by a measured MHz) is exactly what gives the lab's TCG
// guests their inf and -nan figures. ptMHz is the clock rate the formulas
// divide by.
const ptMHz = 1000

var ptEpoch = time.Now()

// cycles is get_cycles(): nanoseconds since the command started.
func cycles() int64 { return int64(time.Since(ptEpoch)) }

// bwSamples is what run_iter_bw records for print_report_bw.
type bwSamples struct {
	size     uint64
	iters    uint64 // messages counted: iterations × QPs, or those of the sample window with -D
	noPeak   bool
	postList int
	cqMod    int
	// posted[i] is when message i was posted, completed[j] when the
	// completion covering message j was polled; with noPeak only index
	// 0 of each is used (start and end of the run).
	posted, completed []int64
}

// bwReport is print_report_bw's arithmetic: the average over the run, the
// peak over every window from a post to a later completion (the window's
// cycles per message, truncated to whole cycles as cycles_t division is),
// and the message rate. Figures are MiB/s (MB/s on 6.06, the same 2^20
// bytes) or Gbit/s with --report_gbits, as the report format says.
func bwReport(s bwSamples, gbits bool) BWReport {
	n := int(s.iters)
	rep := BWReport{Size: s.size, Iters: s.iters}
	if n == 0 || len(s.posted) == 0 || len(s.completed) == 0 {
		return rep
	}
	cqMod := max(s.cqMod, 1)
	postList := max(s.postList, 1)
	last := 0
	if !s.noPeak {
		last = n - 1
	}
	sum := float64(s.completed[last] - s.posted[0])
	format := 1048576.0
	if gbits {
		format = 125000000
	}
	unitsPerSec := float64(ptMHz) * 1e6
	rep.BWAvg = float64(s.size) * float64(n) * unitsPerSec / (sum * format)
	rep.MsgRate = float64(n) * unitsPerSec / (sum * 1e6)
	if s.noPeak {
		return rep
	}
	// completed[0] is unset unless message 0 was signaled; as the
	// unsigned cycles_t difference, it never wins the minimum.
	best := int64(math.MaxInt64)
	for i := 0; i < n; i += postList {
		for j := roundUp(i+1, cqMod) - 1; j < n; j += cqMod {
			if t := (s.completed[j] - s.posted[i]) / int64(j-i+1); t < best {
				best = t
			}
		}
		// The last message is signaled even off the moderation grid.
		if n%cqMod != 0 {
			j := n - 1
			if t := (s.completed[j] - s.posted[i]) / int64(j-i+1); t < best {
				best = t
			}
		}
	}
	if best > 0 {
		rep.BWPeak = float64(s.size) * unitsPerSec / (float64(best) * format)
	} else {
		rep.BWPeak = math.Inf(1)
	}
	return rep
}

func roundUp(v, to int) int { return (v + to - 1) / to * to }

// latSamples is what the latency loops record for print_report_lat.
type latSamples struct {
	size  uint64
	iters uint64
	// posted[i] is when iteration i started; consecutive differences are
	// the round trips.
	posted []int64
	// roundTrip: write and send latency are half of a ping-pong round
	// trip (rtt_factor 2); read and atomic are one operation (1).
	roundTrip bool
	// reportCycles is -C: figures in cycles (nanoseconds here) instead of
	// microseconds.
	reportCycles bool
}

// latResult is print_report_lat's figures plus the per-sample lines -U
// and -H print.
type latResult struct {
	LatReport
	unsorted, sorted []float64 // in the report's unit
}

// latReport is print_report_lat: the deltas between consecutive posts,
// sorted, with the two largest dropped (LAT_MEASURE_TAIL), then min, max,
// median ("typical"), mean, standard deviation and the 99th and 99.9th
// percentiles, in microseconds of one-way latency.
func latReport(s latSamples) (latResult, error) {
	measure := int(s.iters) - 1
	if measure < 3 || len(s.posted) < measure+1 {
		return latResult{}, fmt.Errorf("latency report needs at least 4 samples, have %d", max(measure, 0))
	}
	factor := float64(ptMHz)
	if s.reportCycles {
		factor = 1
	}
	if s.roundTrip {
		factor *= 2
	}
	delta := make([]int64, measure)
	for i := range delta {
		delta[i] = s.posted[i+1] - s.posted[i]
	}
	var res latResult
	for _, d := range delta {
		res.unsorted = append(res.unsorted, float64(d)/factor)
	}
	slices.Sort(delta)
	measure -= 2
	var median int64
	if (measure-1)%2 != 0 {
		median = (delta[measure/2] + delta[measure/2-1]) / 2
	} else {
		median = delta[measure/2]
	}
	var sum float64
	for _, d := range delta[:measure] {
		v := float64(d) / factor
		sum += v
		res.sorted = append(res.sorted, v)
	}
	avg := sum / float64(measure)
	var dev float64
	for _, d := range delta[:measure] {
		x := avg - float64(d)/factor
		dev += x * x
	}
	res.LatReport = LatReport{
		Size: s.size, Iters: s.iters,
		Min:           float64(delta[0]) / factor,
		Max:           float64(delta[measure]) / factor,
		Typical:       float64(median) / factor,
		Avg:           avg,
		Stdev:         math.Sqrt(dev / float64(measure)),
		Percentile99:  float64(delta[int(math.Ceil(float64(measure)*0.99))]) / factor,
		Percentile999: float64(delta[int(math.Ceil(float64(measure)*0.999))]) / factor,
	}
	return res, nil
}

// latDurationReport is print_report_lat_duration: the mean one-way latency
// over the sample window and the transactions per second.
func latDurationReport(size, iters uint64, window int64, roundTrip bool) LatReport {
	rtt := 1.0
	if roundTrip {
		rtt = 2
	}
	r := LatReport{Size: size, Iters: iters}
	if iters == 0 || window <= 0 {
		return r
	}
	r.Avg = float64(window) / ptMHz / rtt / float64(iters)
	r.TPSAverage = float64(iters) / (float64(window) / (ptMHz * 1e6))
	return r
}
