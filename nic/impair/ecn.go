package impair

import (
	"fmt"
	"time"

	"github.com/goroce/goroce/inet"
	"github.com/goroce/goroce/nic/vnet"
)

// Bottleneck is a congested egress: a queue drained at Rate that marks
// ECN-capable packets Congestion Experienced as it grows, as a switch
// port does for DCQCN's congestion point (RED with ECN: no marks below
// Kmin bytes queued, a probability rising linearly to Pmax at Kmax, every
// packet above Kmax). The queue holds at most Limit bytes; an arrival
// beyond that is dropped, as is one that is not ECN-capable and would
// have been marked (RED drops what it cannot mark).
//
// It is here because this host's kernel has no sch_red, sch_fq_codel or
// sch_netem (docs/congestion.md); the forwarder applies it to real
// packets (Faults.Bottleneck) and a simulation to modelled ones (Queue).
type Bottleneck struct {
	Rate       float64 // bits per second the queue drains at
	Kmin, Kmax int     // bytes queued: the marking ramp
	Pmax       float64 // marking probability at Kmax
	Limit      int     // bytes the queue holds; 0 means 4*Kmax
}

// Check reports a bottleneck that cannot work.
func (b *Bottleneck) Check() error {
	switch {
	case b.Rate <= 0:
		return fmt.Errorf("impair: bottleneck rate %v bit/s is not positive", b.Rate)
	case b.Kmin < 0 || b.Kmax <= b.Kmin:
		return fmt.Errorf("impair: bottleneck needs 0 <= Kmin < Kmax, got %d and %d", b.Kmin, b.Kmax)
	case b.Pmax < 0 || b.Pmax > 1:
		return fmt.Errorf("impair: bottleneck Pmax %v is not a probability", b.Pmax)
	}
	return nil
}

// Queue is a Bottleneck's state: the bytes queued, drained in the
// arrival's time. Times are durations from any fixed origin, so a
// simulation passes its own clock and the forwarder its monotonic one.
type Queue struct {
	b       Bottleneck
	backlog float64       // bytes queued at the last arrival, before draining
	at      time.Duration // time of the last arrival
	busy    time.Duration // when the last queued byte leaves
}

// NewQueue returns an empty queue for b (checked with Check).
func NewQueue(b Bottleneck) *Queue {
	if b.Limit <= 0 {
		b.Limit = 4 * b.Kmax
	}
	return &Queue{b: b}
}

// Backlog returns the bytes queued at now.
func (q *Queue) Backlog(now time.Duration) int {
	left := q.backlog - q.b.Rate/8*(now-q.at).Seconds()
	return int(max(left, 0))
}

// Arrive queues a packet of size bytes at now. r is a uniform random
// number in [0, 1) that decides a mark on the ramp; ect says the packet
// is ECN-capable. It returns when the packet's last byte leaves and
// whether to mark it CE; drop means it never leaves.
func (q *Queue) Arrive(now time.Duration, size int, r float64, ect bool) (depart time.Duration, mark, drop bool) {
	backlog := q.Backlog(now)
	if backlog+size > q.b.Limit {
		return 0, false, true
	}
	switch {
	case backlog <= q.b.Kmin:
	case backlog >= q.b.Kmax:
		mark = true
	default:
		mark = r < q.b.Pmax*float64(backlog-q.b.Kmin)/float64(q.b.Kmax-q.b.Kmin)
	}
	if mark && !ect {
		return 0, false, true
	}
	q.backlog, q.at = float64(backlog+size), now
	q.busy = max(q.busy, now) + time.Duration(float64(size)*8/q.b.Rate*float64(time.Second))
	return q.busy, mark, false
}

// congest passes packet p (an Ethernet frame), ready to leave at due,
// through the bottleneck b: it returns when the packet leaves the queue,
// marks it CE if the queue says so, and reports false for a packet the
// queue drops. Frames that are not IP pass untouched.
func (d *direction) congest(b *Bottleneck, p []byte, due int64) (int64, bool) {
	if d.bneckOf != b {
		d.bneck, d.bneckOf = NewQueue(*b), b
	}
	l3, _, ok := vnet.UDP(p)
	if !ok {
		return due, true
	}
	dg := p[l3:]
	dep, mark, drop := d.bneck.Arrive(time.Duration(due), len(dg), d.rng.Float64(), inet.ECN(dg) != inet.NotECT)
	if drop {
		return 0, false
	}
	if mark && inet.SetECN(dg, inet.CE) {
		d.ctr.marked.Add(1)
	}
	return int64(dep), true
}
