package dcqcn

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Params are the DCQCN parameters an mlx5 port exposes
// (/sys/kernel/debug/mlx5/PCI/cc_params/NAME, drivers/infiniband/hw/mlx5/
// cong.c), under the same names (the struct tags) and in the same units,
// with the firmware's defaults (Default). Rates are in Mb/s, times in
// microseconds, alpha and g in fixed point with 10 fractional bits.
type Params struct {
	// Reaction point: the sender's rate limiter.
	ClampTgtRate            uint32 `cc:"rp_clamp_tgt_rate"`             // 1: every reduction sets the target rate to the current rate
	ClampTgtRateATI         uint32 `cc:"rp_clamp_tgt_rate_ati"`         // 1: a reduction sets it if the timer raised the rate since the last one
	TimeReset               uint32 `cc:"rp_time_reset"`                 // µs between timer-driven rate increases
	ByteReset               uint32 `cc:"rp_byte_reset"`                 // bytes sent between byte-counter-driven increases
	Threshold               uint32 `cc:"rp_threshold"`                  // F: increase events before additive increase
	AIRate                  uint32 `cc:"rp_ai_rate"`                    // Mb/s the target rises by in additive increase
	MaxRate                 uint32 `cc:"rp_max_rate"`                   // Mb/s the limiter never exceeds; 0: the line rate
	HAIRate                 uint32 `cc:"rp_hai_rate"`                   // Mb/s per stage in hyper increase
	MinDecFac               uint32 `cc:"rp_min_dec_fac"`                // %: one reduction keeps at least this share of the rate
	MinRate                 uint32 `cc:"rp_min_rate"`                   // Mb/s the limiter never goes below
	RateToSetOnFirstCNP     uint32 `cc:"rp_rate_to_set_on_first_cnp"`   // Mb/s set by the first CNP; 0: reduce from the line rate
	DCETCPG                 uint32 `cc:"rp_dce_tcp_g"`                  // G: alpha keeps G/1024 of itself per update period
	DCETCPRTT               uint32 `cc:"rp_dce_tcp_rtt"`                // µs: alpha's update period
	RateReduceMonitorPeriod uint32 `cc:"rp_rate_reduce_monitor_period"` // µs: at most one reduction per period
	InitialAlphaValue       uint32 `cc:"rp_initial_alpha_value"`        // alpha on the first CNP (1023: 1)
	GD                      uint32 `cc:"rp_gd"`                         // log2 of alpha's divisor in a reduction, fixed point (11: alpha/2)

	// Notification point: the receiver's CNP generator.
	MinTimeBetweenCNPs uint32 `cc:"np_min_time_between_cnps"` // µs between two CNPs for one QP
	CNPDSCP            uint32 `cc:"np_cnp_dscp"`              // DSCP of the CNPs sent
	CNPPrioMode        uint32 `cc:"np_cnp_prio_mode"`         // 1: CNPs take the marked packet's priority (no VLANs here: kept for the name)
	CNPPrio            uint32 `cc:"np_cnp_prio"`              // 802.1p priority of the CNPs (no VLANs here: kept for the name)
}

// Default returns the parameters a ConnectX-4 or later port starts with
// (NVIDIA's "DCQCN CC Parameters" page, the firmware's defaults; the
// driver only relays them).
func Default() Params {
	return Params{
		ClampTgtRate:            0,
		ClampTgtRateATI:         1,
		TimeReset:               300,
		ByteReset:               32767,
		Threshold:               1,
		AIRate:                  5,
		MaxRate:                 0,
		HAIRate:                 50,
		MinDecFac:               50,
		MinRate:                 1,
		RateToSetOnFirstCNP:     0,
		DCETCPG:                 1019,
		DCETCPRTT:               1,
		RateReduceMonitorPeriod: 4,
		InitialAlphaValue:       1023,
		GD:                      11,
		MinTimeBetweenCNPs:      4,
		CNPDSCP:                 48,
		CNPPrioMode:             1,
		CNPPrio:                 6,
	}
}

// Caps reports whether rp_max_rate holds a sender whose line carries
// lineMbps below that rate (RP.Capped).
func (p *Params) Caps(lineMbps float64) bool {
	m := float64(p.MaxRate)
	return m > 0 && m < lineMbps
}

// limits are each parameter's largest value, where the firmware bounds it
// more tightly than 32 bits (the ranges of NVIDIA's page).
var limits = map[string]uint32{
	"rp_clamp_tgt_rate": 1, "rp_clamp_tgt_rate_ati": 1, "rp_threshold": 31, "rp_min_dec_fac": 100,
	"rp_dce_tcp_g": 1023, "rp_dce_tcp_rtt": 131071, "rp_initial_alpha_value": 1023, "rp_gd": 15,
	"np_min_time_between_cnps": 4095, "np_cnp_dscp": 63, "np_cnp_prio_mode": 1, "np_cnp_prio": 7,
}

// Names returns the parameters' mlx5 names, in the struct's order.
func Names() []string {
	t := reflect.TypeFor[Params]()
	names := make([]string, t.NumField())
	for i := range names {
		names[i] = t.Field(i).Tag.Get("cc")
	}
	return names
}

func (p *Params) field(name string) (reflect.Value, bool) {
	v := reflect.ValueOf(p).Elem()
	for i := range v.NumField() {
		if v.Type().Field(i).Tag.Get("cc") == name {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// Get returns the parameter called name (its mlx5 name).
func (p *Params) Get(name string) (uint32, bool) {
	f, ok := p.field(name)
	if !ok {
		return 0, false
	}
	return uint32(f.Uint()), true
}

// Set sets the parameter called name, checking it against its range.
func (p *Params) Set(name string, v uint32) error {
	f, ok := p.field(name)
	if !ok {
		return fmt.Errorf("dcqcn: no parameter %q (one of %s)", name, strings.Join(Names(), ", "))
	}
	if m, ok := limits[name]; ok && v > m {
		return fmt.Errorf("dcqcn: %s=%d is beyond its range 0..%d", name, v, m)
	}
	if (name == "rp_dce_tcp_rtt" || name == "rp_time_reset" || name == "rp_byte_reset") && v == 0 {
		return fmt.Errorf("dcqcn: %s must be at least 1", name)
	}
	f.SetUint(uint64(v))
	return nil
}

// Parse applies a comma-separated list of name=value settings (the
// syntax of GOROCE_CC and roced's -cc), e.g. "rp_ai_rate=10,np_min_time_between_cnps=50".
func (p *Params) Parse(s string) error {
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		name, val, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("dcqcn: %q is not name=value", kv)
		}
		n, err := strconv.ParseUint(strings.TrimSpace(val), 0, 32)
		if err != nil {
			return fmt.Errorf("dcqcn: %s: %q is not a number", name, val)
		}
		if err := p.Set(strings.TrimSpace(name), uint32(n)); err != nil {
			return err
		}
	}
	return nil
}

// String lists every parameter as name=value, comma-separated: what
// Parse reads back.
func (p *Params) String() string {
	var b strings.Builder
	for i, n := range Names() {
		v, _ := p.Get(n)
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%d", n, v)
	}
	return b.String()
}

// Paper returns Default with the values of Zhu et al.'s evaluation
// (SIGCOMM 2015, section 5) where mlx5 has a parameter for them: a CNP
// at most every 50 µs per QP, one rate cut per 50 µs, alpha's period
// 55 µs with g = 1/256, the increase timer 55 µs, F = 5, R_AI 40 Mb/s and
// R_HAI 100 Mb/s. In package sim's two-flow run they share the
// bottleneck fairly in 97% of 1 ms periods at 89% of its rate; the
// firmware's microsecond defaults cut a sender every 4 µs while a queue
// drains, and their flows swing between a trickle and the line rate
// (fair on average, in 28% of the periods, at 61% of the rate):
// docs/congestion.md.
func Paper() Params {
	p := Default()
	p.MinTimeBetweenCNPs = 50
	p.RateReduceMonitorPeriod = 50
	p.DCETCPRTT = 55
	p.DCETCPG = 1020
	p.TimeReset = 55
	p.Threshold = 5
	p.AIRate = 40
	p.HAIRate = 100
	return p
}
