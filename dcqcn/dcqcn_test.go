package dcqcn

import (
	"math"
	"strings"
	"testing"
	"time"
)

var t0 = time.Unix(1000, 0)

func TestParamsNames(t *testing.T) {
	p := Default()
	names := Names()
	if len(names) != 20 || names[0] != "rp_clamp_tgt_rate" || names[len(names)-1] != "np_cnp_prio" {
		t.Fatalf("names %v", names)
	}
	for _, n := range names {
		if _, ok := p.Get(n); !ok {
			t.Errorf("Get(%q) failed", n)
		}
	}
	if v, _ := p.Get("rp_ai_rate"); v != 5 {
		t.Errorf("rp_ai_rate default %d, want 5", v)
	}
	var q Params
	if err := q.Parse(p.String()); err != nil || q != p {
		t.Fatalf("Parse(String()) = %v, %+v", err, q)
	}
	for _, bad := range []string{"rp_ai_rate", "rp_nope=1", "rp_gd=x", "rp_min_dec_fac=101", "rp_time_reset=0", "np_cnp_dscp=64"} {
		q := Default()
		if err := q.Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		} else if strings.Contains(err.Error(), "\n") {
			t.Errorf("Parse(%q): multi-line error %q", bad, err)
		}
	}
	if err := q.Parse(" rp_ai_rate = 10 , np_min_time_between_cnps=50"); err != nil || q.AIRate != 10 || q.MinTimeBetweenCNPs != 50 {
		t.Fatalf("Parse with spaces: %v %+v", err, q)
	}
}

func TestFirstCNPHalves(t *testing.T) {
	p := Default()
	r := NewRP(&p, 10000)
	if r.Limited() || r.Wait(t0) != 0 || r.Rate(t0) != 10000 {
		t.Fatal("a new RP is limited")
	}
	if !r.CNP(t0) {
		t.Fatal("the first CNP did not cut the rate")
	}
	// alpha 1023/1024, rp_gd 11: rc = line * (1 - alpha/2).
	want := 10000 * (1 - 1023.0/1024/2)
	if got := r.Rate(t0); math.Abs(got-want) > 1e-6 || !r.Limited() {
		t.Fatalf("rate after the first CNP %.3f, want %.3f", got, want)
	}
	// A second CNP within rp_rate_reduce_monitor_period (4 µs) cuts nothing.
	if r.CNP(t0.Add(2 * time.Microsecond)) {
		t.Fatal("a CNP within the monitor period cut the rate")
	}
	// After it, one does, by at most rp_min_dec_fac (50%).
	before := r.Rate(t0.Add(5 * time.Microsecond))
	if !r.CNP(t0.Add(5 * time.Microsecond)) {
		t.Fatal("a CNP after the monitor period did not cut the rate")
	}
	if got := r.Rate(t0.Add(5 * time.Microsecond)); got >= before || got < before/2 {
		t.Fatalf("second cut %.1f -> %.1f", before, got)
	}
}

func TestMinDecFacAndMinRate(t *testing.T) {
	p := Default()
	p.GD = 10 // rc *= 1 - alpha: nearly to zero, but min_dec_fac keeps 50%
	r := NewRP(&p, 1000)
	r.CNP(t0)
	if got := r.Rate(t0); math.Abs(got-500) > 1e-9 {
		t.Fatalf("rate %.3f, want 500 (rp_min_dec_fac 50)", got)
	}
	p.MinDecFac = 0
	p.MinRate = 300
	now := t0
	for range 20 {
		now = now.Add(5 * time.Microsecond)
		r.CNP(now)
	}
	if got := r.Rate(now); got != 300 {
		t.Fatalf("rate %.3f after many CNPs, want rp_min_rate 300", got)
	}
}

func TestRecovery(t *testing.T) {
	p := Default()
	r := NewRP(&p, 10000)
	r.CNP(t0)
	cut := r.Rate(t0)
	// One rp_time_reset later the rate goes half way to the target (the
	// line rate: additive increase, rp_threshold 1, cannot raise it).
	at := t0.Add(300 * time.Microsecond)
	if got, want := r.Rate(at), (10000+cut)/2; math.Abs(got-want) > 1e-6 {
		t.Fatalf("rate after one timer period %.3f, want %.3f", got, want)
	}
	// With no more CNPs the limiter climbs back to the line rate and
	// switches off.
	end := t0.Add(50 * time.Millisecond)
	if got := r.Rate(end); got != 10000 || r.Limited() {
		t.Fatalf("after 50 ms without CNPs: rate %.1f limited %v", got, r.Limited())
	}
}

func TestHyperIncreaseNeedsBoth(t *testing.T) {
	p := Default()
	p.Threshold = 3
	p.RateToSetOnFirstCNP = 100
	r := NewRP(&p, 10000)
	r.CNP(t0)
	if r.Rate(t0) != 100 || r.Target() != 100 {
		t.Fatalf("rp_rate_to_set_on_first_cnp: rate %.1f target %.1f", r.Rate(t0), r.Target())
	}
	// Timer events alone: fast recovery (target unchanged) then additive.
	now := t0.Add(2 * 300 * time.Microsecond)
	r.Rate(now)
	if r.Target() != 100 {
		t.Fatalf("target %.1f in fast recovery, want 100", r.Target())
	}
	now = now.Add(300 * time.Microsecond)
	r.Rate(now)
	if r.Target() != 105 {
		t.Fatalf("target %.1f after the third timer event, want 105 (additive)", r.Target())
	}
	// Byte-counter events too: hyper increase adds rp_hai_rate.
	for range 3 {
		r.Sent(now, int(p.ByteReset))
	}
	if r.Target() != 105+5+5+50 {
		t.Fatalf("target %.1f after three byte events, want 165 (two additive, one hyper)", r.Target())
	}
}

func TestPacing(t *testing.T) {
	p := Default()
	p.RateToSetOnFirstCNP = 80 // 80 Mb/s: 10 bytes a microsecond
	p.TimeReset = 1 << 30      // no increases during the test
	p.ByteReset = 1 << 30
	r := NewRP(&p, 10000)
	r.CNP(t0)
	now := t0
	sent := 0
	// Send 1000-byte packets whenever allowed for 10 ms: the rate from
	// the cut on.
	send := func(until time.Time) {
		for now.Before(until) {
			if w := r.Wait(now); w > 0 {
				now = now.Add(w)
				continue
			}
			r.Sent(now, 1000)
			sent += 1000
		}
	}
	send(t0.Add(10 * time.Millisecond))
	if want := 10 * 10000; sent < want-2000 || sent > want+2000 {
		t.Fatalf("sent %d bytes in 10 ms at 80 Mb/s, want about %d", sent, want)
	}
	// After an idle 10 ms the sender may send BurstBytes at once, no more.
	now = now.Add(10 * time.Millisecond)
	sent = 0
	for r.Wait(now) == 0 {
		r.Sent(now, 1000)
		sent += 1000
	}
	if sent < BurstBytes || sent > BurstBytes+1000 {
		t.Fatalf("burst after idle: %d bytes, want %d", sent, BurstBytes)
	}
}

func TestAlphaDecays(t *testing.T) {
	p := Default()
	r := NewRP(&p, 10000)
	r.CNP(t0)
	a0 := r.Alpha(t0)
	a := r.Alpha(t0.Add(100 * time.Microsecond))
	if want := a0 * math.Pow(1019.0/1024, 99); math.Abs(a-want) > 1e-9 {
		t.Fatalf("alpha after 100 µs %.6f, want %.6f", a, want)
	}
}

func TestNPPacing(t *testing.T) {
	p := Default()
	p.MinTimeBetweenCNPs = 50
	var n NP
	if !n.Marked(&p, t0) {
		t.Fatal("the first marked packet sent no CNP")
	}
	if n.Marked(&p, t0.Add(49*time.Microsecond)) {
		t.Fatal("a CNP within np_min_time_between_cnps")
	}
	if !n.Marked(&p, t0.Add(50*time.Microsecond)) {
		t.Fatal("no CNP after np_min_time_between_cnps")
	}
}

// sentIn sends 1000-byte packets whenever r allows from *now until end
// and returns the bytes sent.
func sentIn(r *RP, now *time.Time, end time.Time) int {
	sent := 0
	for now.Before(end) {
		if w := r.Wait(*now); w > 0 {
			*now = now.Add(w)
			continue
		}
		r.Sent(*now, 1000)
		sent += 1000
	}
	return sent
}

// rp_max_rate below the line rate is the sender's pace from its first
// packet, the rate the first CNP cuts from, and where recovery ends: the
// sender stays paced there rather than released to the host's speed.
func TestMaxRateCaps(t *testing.T) {
	p := Default()
	p.MaxRate = 80 // 10 bytes a microsecond
	r := NewRP(&p, 25000)
	if !r.Capped() || !r.Limited() || r.Rate(t0) != 80 {
		t.Fatalf("fresh: capped %v limited %v rate %.1f, want paced at 80", r.Capped(), r.Limited(), r.Rate(t0))
	}
	now := t0
	if got, want := sentIn(r, &now, t0.Add(10*time.Millisecond)), 100000; got < want-2000 || got > want+2000 {
		t.Fatalf("sent %d bytes in 10 ms capped at 80 Mb/s, want about %d", got, want)
	}
	r.CNP(now)
	if got, want := r.Rate(now), 80*(1-1023.0/2048); math.Abs(got-want) > 1e-9 {
		t.Fatalf("first CNP: rate %.3f, want rp_max_rate cut by alpha/2, %.3f", got, want)
	}
	// No more CNPs: back to the cap, and still paced there.
	now = now.Add(100 * time.Millisecond)
	if got := r.Rate(now); got != 80 || !r.Limited() {
		t.Fatalf("recovered: rate %.1f limited %v, want paced at 80", got, r.Limited())
	}
	start := now
	if got, want := sentIn(r, &now, start.Add(10*time.Millisecond)), 100000; got > want+BurstBytes+2000 {
		t.Fatalf("sent %d bytes in 10 ms after recovery, want about %d", got, want)
	}
	// A cap at or above the line rate is no cap: the limiter switches
	// off once recovered, as before.
	p.MaxRate = 25000
	if r.Capped() {
		t.Fatal("rp_max_rate at the line rate caps")
	}
}
