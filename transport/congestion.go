package transport

import (
	"github.com/goroce/goroce/clock"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/dcqcn"
	"github.com/goroce/goroce/inet"
	"github.com/goroce/goroce/nic"
)

// Congestion control, DCQCN's two roles on every QP as mlx5 plays them
// (package dcqcn has the algorithms, docs/congestion.md the story):
//
//   - the notification point: a packet for the QP that arrives marked
//     Congestion Experienced is counted (np_ecn_marked_roce_packets) and,
//     at most once per np_min_time_between_cnps, answered with a CNP to
//     the QP that sent it (np_cnp_sent);
//   - the reaction point: a CNP for the QP cuts its requester's rate
//     (rp_cnp_handled), and the requester then paces its request packets
//     to that rate, which recovers while no CNP comes.
//
// Packets leave ECT(0) (env.ECT) so that a congested queue marks them
// rather than drops them. With DCQCN off (env.CC nil) marked packets are
// still counted and CNPs received are counted as ignored (rp_cnp_ignored),
// as on an mlx5 port with congestion control disabled.

// lineMbps is the rate an unlimited QP may reach, from which the first
// CNP cuts: the port speed libgoroce reports (25 Gb/s, active_speed 32),
// a figure rather than a measurement, as for any software device.
// rp_max_rate caps it.
const lineMbps = 25000

// ccState is a QP's congestion control state, guarded by the QP's lock.
type ccState struct {
	rp    *dcqcn.RP // nil until the first CNP
	np    dcqcn.NP
	timer clock.Timer // runs the requester when the pacer allows the next packet
	armed bool
}

// ectMark returns the traffic class a packet of the QP carries for one
// its address vector sets: ECT(0) in the ECN bits when the device marks
// and the vector leaves them Not-ECT. The ICRC does not cover these bits
// (IBA A17.8), so a peer that ignores ECN (rxe) sees nothing new.
func ectMark(env *env, tc uint8) uint8 {
	if env.ECT && tc&inet.ECNMask == inet.NotECT {
		tc |= inet.ECT0
	}
	return tc
}

// congestionExperienced is the notification point: p arrived in f marked
// CE. Called with q.mu held, once the packet passed the header checks.
func (q *QP) congestionExperienced(p bth.Packet, f bth.Frame) {
	q.env.Counters.NPECNMarkedRoCE.Add(1)
	cc := q.env.CC
	if cc == nil || !q.cc.np.Marked(cc, q.clock.Now()) {
		return
	}
	// The CNP goes back along the path the packet came: to the QP that
	// sent it (a connected QP's peer; a UD sender names itself in the
	// DETH), at the DSCP np_cnp_dscp gives, Not-ECT.
	o := q.outer
	dqpn := q.attr.DestQPN
	if q.typ == UD {
		if !p.Info().Headers.Has(bth.ExtDETH) {
			return
		}
		o = bth.Outer{Src: f.DstAddr(), Dst: f.SrcAddr(), SrcPort: q.srcPort}
		dqpn = bth.DETH(p.Ext(bth.ExtDETH)).SrcQP()
	}
	o.TClass = uint8(cc.CNPDSCP << 2)
	buf := bufPool.Get().(*[nic.BufSize]byte)
	pk := packet{buf: buf, Draft: bth.NewCNP(buf[nic.Headroom:], &o, q.pkey, dqpn)}
	q.send(&pk)
	q.env.Counters.NPCNPSent.Add(1)
}

// cnp is the reaction point: a CNP arrived for the QP.
func (q *QP) cnp() {
	q.mu.Lock()
	defer q.unlock()
	c := q.env.Counters
	if q.env.CC == nil || q.destroyed || q.typ == XRCTgt {
		c.RPCNPIgnored.Add(1) // no congestion control, or no requester to slow
		return
	}
	q.reactionPoint().CNP(q.clock.Now())
	c.RPCNPHandled.Add(1)
}

// reactionPoint returns the QP's rate limiter, made at its first use:
// the first CNP, or the first packet where rp_max_rate caps the rate.
// QPs that never meet either carry none (100,000 QPs on a device).
func (q *QP) reactionPoint() *dcqcn.RP {
	if q.cc.rp == nil {
		q.cc.rp = dcqcn.NewRP(q.env.CC, lineMbps)
		q.cc.timer = q.clock.AfterFunc(time.Hour, q.onPace)
		q.cc.timer.Stop()
	}
	return q.cc.rp
}

// paced reports whether the rate limiter holds the requester's next
// packet back, and if so arms the timer that runs it when it may go.
func (q *QP) paced() bool {
	rp := q.cc.rp
	if rp == nil {
		if cc := q.env.CC; cc == nil || !cc.Caps(lineMbps) {
			return false
		}
		rp = q.reactionPoint()
	}
	if !rp.Limited() {
		return false
	}
	w := rp.Wait(q.clock.Now())
	if w == 0 {
		return false
	}
	if !q.cc.armed {
		q.cc.armed = true
		q.cc.timer.Reset(w)
	}
	return true
}

// ccSent accounts for a request packet of n bytes handed to the link.
func (q *QP) ccSent(p *packet, n int) {
	if rp := q.cc.rp; rp != nil && rp.Limited() && p.Info().IsRequest() {
		rp.Sent(q.clock.Now(), n)
	}
}

func (q *QP) onPace() {
	q.mu.Lock()
	defer q.unlock()
	q.cc.armed = false
	if !q.destroyed {
		q.run()
	}
}

// ccReset forgets the QP's congestion state (RESET, destroy): a new
// connection starts at full rate.
func (q *QP) ccReset() {
	if q.cc.timer != nil {
		q.cc.timer.Stop()
	}
	q.cc = ccState{}
}

// RateMbps returns the rate DCQCN allows the QP's requester, in Mb/s,
// and whether the limiter is on; off, the QP sends as fast as it can.
func (q *QP) RateMbps() (float64, bool) {
	q.mu.Lock()
	defer q.unlock()
	if q.cc.rp == nil || !q.cc.rp.Limited() {
		return lineMbps, false
	}
	return q.cc.rp.Rate(q.clock.Now()), q.cc.rp.Limited()
}
