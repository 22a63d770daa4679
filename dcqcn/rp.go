package dcqcn

import (
	"math"
	"time"
)

// maxIncreaseSteps bounds the increase events one call replays after a
// long idle time; the rate reaches its ceiling long before.
const maxIncreaseSteps = 1 << 16

// BurstBytes is how far the pacer lets a sender run ahead of its rate:
// what it may send at once after a pause. A software sender wakes on
// timers that fire tens of microseconds late, so a smaller burst would
// leave it below its rate for want of a timer, not for congestion.
const BurstBytes = 64 << 10

// RP is the reaction point of one sender (a QP's requester): its rate
// limiter. The zero RP is unusable: NewRP. It is not safe for
// concurrent use; the QP's lock guards it.
type RP struct {
	p    *Params
	line float64 // Mb/s: the rate an unlimited sender may reach

	limited bool    // a CNP has cut the rate and it has not yet recovered
	rc, rt  float64 // current and target rate, Mb/s
	alpha   float64 // the congestion estimate, 0..1

	alphaAt   time.Time // start of alpha's current update period
	cnpPeriod bool      // a CNP arrived in it
	reducedAt time.Time // the last reduction (rate_reduce_monitor_period)

	timerAt   time.Time // start of the increase timer's current period
	bytes     uint64    // sent since the last byte-counter event
	t, bc     int       // increase events by timer and by byte counter since the last reduction
	timerRise bool      // the timer raised the rate since the last reduction (rp_clamp_tgt_rate_ati)

	// The pacer, a token bucket: bytes of credit as of tokAt, refilled at
	// the current rate up to BurstBytes; a packet may leave while the
	// credit is not negative.
	tokens float64
	tokAt  time.Time
}

// NewRP returns a reaction point for a sender whose link carries
// lineMbps; params are read at each event, so a change applies at once.
func NewRP(params *Params, lineMbps float64) *RP {
	return &RP{p: params, line: lineMbps}
}

// Limited reports whether the limiter is on: a CNP cut the rate and it
// has not climbed back to the ceiling, or rp_max_rate caps the sender
// below the line rate (Capped).
func (r *RP) Limited() bool { return r.limited || r.Capped() }

// Capped reports whether rp_max_rate is below the line rate. An mlx5
// port releases a recovered QP's limiter and the wire holds it to the
// port's speed; a software sender's wire is the host's, as fast as its
// cores, so below the line rate rp_max_rate stays the sender's pace, from
// its first packet and after each recovery: the port of that speed the
// setting asks for (docs/congestion.md).
func (r *RP) Capped() bool { return r.p.Caps(r.line) }

// Rate returns the current rate in Mb/s as of now (the ceiling when not
// limited), after the increase events due by then.
func (r *RP) Rate(now time.Time) float64 {
	r.advance(now)
	return r.pace()
}

// pace is the rate the pacer runs at: the current rate in a congestion
// episode, the ceiling otherwise.
func (r *RP) pace() float64 {
	if r.limited {
		return r.rc
	}
	return r.ceiling()
}

// Target returns the target rate (Mb/s).
func (r *RP) Target() float64 { return r.rt }

// Alpha returns the congestion estimate as of now, 0..1.
func (r *RP) Alpha(now time.Time) float64 {
	r.decayAlpha(now)
	return r.alpha
}

func (r *RP) ceiling() float64 {
	if m := float64(r.p.MaxRate); m > 0 && m < r.line {
		return m
	}
	return r.line
}

func us(n uint32) time.Duration { return time.Duration(n) * time.Microsecond }

// decayAlpha runs alpha's update periods that ended by now: a period with
// a CNP raised alpha when the CNP came (CNP), each one without lowers it,
// alpha = G/1024 * alpha.
func (r *RP) decayAlpha(now time.Time) {
	period := us(max(r.p.DCETCPRTT, 1))
	n := now.Sub(r.alphaAt) / period
	if n <= 0 {
		return
	}
	if r.cnpPeriod {
		n-- // the period that held the CNP: alpha rose already
		r.cnpPeriod = false
	}
	r.alpha *= math.Pow(float64(r.p.DCETCPG)/1024, float64(n))
	r.alphaAt = r.alphaAt.Add(n * period)
	if r.alphaAt.Before(now.Add(-period)) {
		r.alphaAt = now
	}
}

// CNP handles a congestion notification received at now: alpha rises,
// and the rate drops unless it dropped less than
// rp_rate_reduce_monitor_period ago. It reports whether it cut the rate.
func (r *RP) CNP(now time.Time) bool {
	g := float64(r.p.DCETCPG) / 1024
	if !r.limited {
		// The first CNP of a flow at full speed: the limiter starts from
		// the line rate (or rp_rate_to_set_on_first_cnp) with alpha at
		// its initial value.
		top := r.ceiling()
		if !r.Capped() {
			r.tokens, r.tokAt = 0, now // the pacer starts now
		}
		r.limited = true
		r.rc, r.rt = top, top
		r.alpha = float64(r.p.InitialAlphaValue) / 1024
		r.alphaAt, r.cnpPeriod = now, true
		if f := float64(r.p.RateToSetOnFirstCNP); f > 0 {
			r.rc, r.rt = min(f, top), min(f, top)
			r.restart(now)
			return true
		}
		r.reduce(now)
		return true
	}
	r.advance(now)
	if !r.cnpPeriod {
		r.alpha = g*r.alpha + (1 - g)
		r.cnpPeriod = true
	}
	if now.Sub(r.reducedAt) < us(r.p.RateReduceMonitorPeriod) {
		return false
	}
	r.reduce(now)
	return true
}

// reduce cuts the current rate: rc *= 1 - alpha/2^(gd-10), by no more
// than rp_min_dec_fac allows and to no less than rp_min_rate.
func (r *RP) reduce(now time.Time) {
	if r.p.ClampTgtRate == 1 || r.p.ClampTgtRateATI == 1 && r.timerRise {
		r.rt = r.rc
	}
	div := math.Exp2(float64(int(r.p.GD) - 10)) // rp_gd 11: alpha/2, the paper's
	rc := r.rc * (1 - r.alpha/div)
	rc = max(rc, r.rc*float64(r.p.MinDecFac)/100, float64(max(r.p.MinRate, 1)))
	r.rc = min(rc, r.rc)
	r.restart(now)
}

func (r *RP) restart(now time.Time) {
	r.reducedAt = now
	r.timerAt = now
	r.bytes, r.t, r.bc, r.timerRise = 0, 0, 0, false
}

// advance replays the increase timer's periods that ended by now.
func (r *RP) advance(now time.Time) {
	r.decayAlpha(now)
	if !r.limited {
		return
	}
	period := us(max(r.p.TimeReset, 1))
	for steps := 0; r.limited && now.Sub(r.timerAt) >= period; steps++ {
		r.timerAt = r.timerAt.Add(period)
		if steps == maxIncreaseSteps {
			r.timerAt = now
		}
		r.t++
		r.timerRise = true
		r.increase(r.t, r.bc)
	}
}

// increase is one increase event (the timer's or the byte counter's).
// Below rp_threshold events of both kinds it is fast recovery, towards
// the target; past it for one kind additive increase raises the target by
// rp_ai_rate; past it for both, hyper increase by rp_hai_rate times the
// stage.
func (r *RP) increase(t, bc int) {
	f := int(max(r.p.Threshold, 1))
	switch lo, hi := min(t, bc), max(t, bc); {
	case hi < f: // fast recovery
	case lo < f: // additive increase
		r.rt += float64(r.p.AIRate)
	default: // hyper increase
		r.rt += float64(lo-f+1) * float64(r.p.HAIRate)
	}
	top := r.ceiling()
	r.rt = min(r.rt, top)
	r.rc = (r.rt + r.rc) / 2
	if top-r.rc < 0.5 { // within half a Mb/s of the ceiling: recovered
		r.limited = false
		r.rc, r.rt = top, top
	}
}

// refill credits the bytes the current rate earned since tokAt.
func (r *RP) refill(now time.Time) {
	if r.tokAt.IsZero() {
		r.tokAt = now // a capped sender's first packet: no credit saved up
	}
	if d := now.Sub(r.tokAt); d > 0 {
		r.tokens = min(r.tokens+r.pace()*1e6/8*d.Seconds(), BurstBytes)
		r.tokAt = now
	}
}

// Wait returns how long the sender must wait at now before its next
// packet may leave: 0 when it may send.
func (r *RP) Wait(now time.Time) time.Duration {
	if !r.Limited() {
		return 0
	}
	r.advance(now)
	if !r.Limited() {
		return 0
	}
	r.refill(now)
	if r.tokens >= 0 {
		return 0
	}
	return time.Duration(-r.tokens*8/r.pace()*1e3) + 1 // ns; +1 rounds up
}

// Sent accounts for n bytes sent at now: the pacer's credit and the byte
// counter's increase events.
func (r *RP) Sent(now time.Time, n int) {
	if !r.Limited() {
		return
	}
	r.advance(now)
	if !r.Limited() {
		return
	}
	r.refill(now)
	r.tokens -= float64(n)
	if !r.limited {
		return // capped, between congestion episodes: nothing to recover
	}
	r.bytes += uint64(n)
	for reset := uint64(max(r.p.ByteReset, 1)); r.limited && r.bytes >= reset; {
		r.bytes -= reset
		r.bc++
		r.increase(r.t, r.bc)
	}
}
