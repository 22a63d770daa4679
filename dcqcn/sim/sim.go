// Package sim runs DCQCN flows through one ECN-marking bottleneck on a
// simulated clock: each flow's sender is a dcqcn.RP pacing its packets,
// the bottleneck is nic/impair's Queue (the one the forwarder applies to
// real packets), and each receiver is a dcqcn.NP that answers CE marks
// with CNPs. Nothing waits on the machine's clock, so a run is the same
// on a loaded machine as on an idle one, and it takes milliseconds.
//
// It is how the fairness of goroce's DCQCN is shown (TestFairShare) and
// plotted (cmd/bottleneck): the same RP and NP code the QPs run, in a
// network this host's kernel cannot build (no sch_red).
package sim

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/goroce/goroce/dcqcn"
	"github.com/goroce/goroce/nic/impair"
)

// Config describes a run.
type Config struct {
	Params     dcqcn.Params      // every sender's and receiver's
	LineMbps   float64           // each sender's link rate
	Bottleneck impair.Bottleneck // the shared egress
	Packet     int               // bytes a packet (IP datagram)
	Delay      time.Duration     // one-way propagation, sender to receiver and back
	Starts     []time.Duration   // each flow's start: len(Starts) flows
	Duration   time.Duration     // the run's length
	Sample     time.Duration     // the rate and queue sampling period
	Seed       uint64            // the bottleneck's marking draws

	// For the plot of a Result read from captures (FromCaptures):
	Captured bool          // the times are a capture's, not simulated
	Settle   time.Duration // fairness is judged from this long after the last start (0: 10 ms)
	Until    time.Duration // and up to here (0: Duration)
}

// Default is the run docs/congestion.md shows: two 10 Gb/s senders into
// a 10 Gb/s bottleneck with the DCQCN paper's marking (Kmin 5 KB, Kmax
// 200 KB, Pmax 1%) and parameters (dcqcn.Paper), the second starting
// 10 ms after the first.
func Default() Config {
	return Config{
		Params:     dcqcn.Paper(),
		LineMbps:   10000,
		Bottleneck: impair.Bottleneck{Rate: 10e9, Kmin: 5000, Kmax: 200000, Pmax: 0.01},
		Packet:     1078, // a 1024-byte payload's RoCEv2 IPv4 datagram
		Delay:      5 * time.Microsecond,
		Starts:     []time.Duration{0, 10 * time.Millisecond},
		Duration:   200 * time.Millisecond,
		Sample:     time.Millisecond,
		Seed:       1,
	}
}

// Result is what a run measured.
type Result struct {
	Times   []time.Duration // the end of each sampling period
	Rates   [][]float64     // Rates[f][i]: flow f's delivered rate in period i, Mb/s
	Queue   []int           // bytes queued at the end of each period
	Marked  int             // packets marked CE
	CNPs    []int           // CNPs each flow's sender received
	Dropped int             // packets the queue dropped
}

// Jain returns Jain's fairness index of the flows' mean rates over the
// periods ending in (from, to]: 1 when equal, 1/n when one flow has all.
func (r *Result) Jain(from, to time.Duration) float64 {
	var sum, sq float64
	for f := range r.Rates {
		x := r.Mean(f, from, to)
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(r.Rates)) * sq)
}

// SampleJain returns the share of the sampling periods ending in (from,
// to] whose own Jain's index (of the flows' rates in that period alone)
// is at least min: how often the flows are fair period by period, not
// only on average.
func (r *Result) SampleJain(from, to time.Duration, min float64) float64 {
	n, ok := 0, 0
	for i, t := range r.Times {
		if t <= from || t > to {
			continue
		}
		var sum, sq float64
		for f := range r.Rates {
			sum += r.Rates[f][i]
			sq += r.Rates[f][i] * r.Rates[f][i]
		}
		n++
		if sq > 0 && sum*sum/(float64(len(r.Rates))*sq) >= min {
			ok++
		}
	}
	if n == 0 {
		return 0
	}
	return float64(ok) / float64(n)
}

// Mean returns flow f's mean rate over the periods ending in (from, to].
func (r *Result) Mean(f int, from, to time.Duration) float64 {
	var s float64
	n := 0
	for i, t := range r.Times {
		if t > from && t <= to {
			s += r.Rates[f][i]
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return s / float64(n)
}

// MeanQueue returns the mean of the queue samples in (from, to].
func (r *Result) MeanQueue(from, to time.Duration) float64 {
	var s float64
	n := 0
	for i, t := range r.Times {
		if t > from && t <= to {
			s += float64(r.Queue[i])
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return s / float64(n)
}

type evKind uint8

const (
	evSend   evKind = iota // a flow may send its next packet
	evArrive               // a packet reaches its receiver
	evCNP                  // a CNP reaches a sender
	evSample               // the end of a sampling period
)

type event struct {
	at   time.Duration
	seq  uint64
	kind evKind
	flow int
	mark bool
	size int
}

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	if e[i].at != e[j].at {
		return e[i].at < e[j].at
	}
	return e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// Run simulates cfg.
func Run(cfg Config) (*Result, error) {
	if err := cfg.Bottleneck.Check(); err != nil {
		return nil, err
	}
	if cfg.LineMbps <= 0 || cfg.Packet <= 0 || cfg.Duration <= 0 || cfg.Sample <= 0 || len(cfg.Starts) == 0 {
		return nil, fmt.Errorf("sim: a run needs a line rate, a packet size, a duration, a sampling period and a flow")
	}
	epoch := time.Unix(0, 0) // the RPs' and NPs' clock: epoch + simulated time
	n := len(cfg.Starts)
	rps := make([]*dcqcn.RP, n)
	nps := make([]dcqcn.NP, n)
	for i := range rps {
		rps[i] = dcqcn.NewRP(&cfg.Params, cfg.LineMbps)
	}
	q := impair.NewQueue(cfg.Bottleneck)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0xdc9c))
	res := &Result{Rates: make([][]float64, n), CNPs: make([]int, n)}
	delivered := make([]int, n)
	serial := time.Duration(float64(cfg.Packet) * 8 / cfg.LineMbps * float64(time.Microsecond))

	var h events
	var seq uint64
	push := func(e event) {
		seq++
		e.seq = seq
		heap.Push(&h, e)
	}
	for f, s := range cfg.Starts {
		push(event{at: s, kind: evSend, flow: f})
	}
	push(event{at: cfg.Sample, kind: evSample})
	for h.Len() > 0 {
		e := heap.Pop(&h).(event)
		if e.at > cfg.Duration {
			break
		}
		now := epoch.Add(e.at)
		switch e.kind {
		case evSend:
			rp := rps[e.flow]
			if w := rp.Wait(now); w > 0 {
				push(event{at: e.at + w, kind: evSend, flow: e.flow})
				continue
			}
			rp.Sent(now, cfg.Packet)
			dep, mark, drop := q.Arrive(e.at+serial, cfg.Packet, rng.Float64(), true)
			if drop {
				res.Dropped++
			} else {
				if mark {
					res.Marked++
				}
				push(event{at: dep + cfg.Delay, kind: evArrive, flow: e.flow, mark: mark, size: cfg.Packet})
			}
			// The sender's own link: one packet per serialization time.
			push(event{at: e.at + serial, kind: evSend, flow: e.flow})
		case evArrive:
			delivered[e.flow] += e.size
			if e.mark && nps[e.flow].Marked(&cfg.Params, now) {
				push(event{at: e.at + cfg.Delay, kind: evCNP, flow: e.flow})
			}
		case evCNP:
			res.CNPs[e.flow]++
			rps[e.flow].CNP(now)
		case evSample:
			res.Times = append(res.Times, e.at)
			for f := range n {
				res.Rates[f] = append(res.Rates[f], float64(delivered[f])*8/cfg.Sample.Seconds()/1e6)
				delivered[f] = 0
			}
			res.Queue = append(res.Queue, q.Backlog(e.at))
			push(event{at: e.at + cfg.Sample, kind: evSample})
		}
	}
	return res, nil
}
