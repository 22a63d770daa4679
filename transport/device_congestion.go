package transport

import (
	"fmt"
	"strings"

	"github.com/goroce/goroce/dcqcn"
)

// The device's side of congestion control (congestion.go has the
// QP's, docs/congestion.md the story): the options that set it up and
// the CNPs it hands to the QP they name.

// CongestionOptions set up DCQCN on a device. The zero value is mlx5's
// with congestion control on: packets leave ECT(0), CE-marked ones are
// answered with CNPs, and CNPs cut the rate of the QP they name, with
// dcqcn.Default's parameters.
type CongestionOptions struct {
	// NoECT sends packets Not-ECT: a congested queue then drops them
	// rather than marks them, and no CNP comes back.
	NoECT bool
	// Off turns DCQCN off: marked packets are counted but no CNP is
	// sent, and CNPs received are counted as ignored (rp_cnp_ignored).
	Off bool
	// Params, if set, replaces dcqcn.Default(); the device keeps its own
	// copy, so later changes to *Params do not reach it.
	Params *dcqcn.Params
}

// envParams returns the parameters the QPs run with, nil for off.
func (o CongestionOptions) envParams() *dcqcn.Params {
	if o.Off {
		return nil
	}
	p := dcqcn.Default()
	if o.Params != nil {
		p = *o.Params
	}
	return &p
}

// inputCNP handles a received CNP: the QP it names slows down, or the
// CNP is counted as ignored when no such QP exists.
func (d *Device) inputCNP(destQP uint32) {
	d.counters.CNPs.Add(1)
	q := d.qps.get(destQP)
	if q == nil {
		d.counters.RPCNPIgnored.Add(1)
		return
	}
	q.cnp()
}

// Congestion returns the DCQCN parameters the device runs with, and
// false when congestion control is off.
func (d *Device) Congestion() (dcqcn.Params, bool) {
	if d.env.CC == nil {
		return dcqcn.Params{}, false
	}
	return *d.env.CC, true
}

// ParseCongestion reads the congestion settings of GOROCE_CC: a
// comma-separated list of "on" (the default: DCQCN with mlx5's
// parameters, packets ECT(0)), "off" (no DCQCN and Not-ECT packets, an
// mlx5 port with ECN disabled), "paper" (dcqcn.Paper's parameters) and
// mlx5 parameter settings name=value, applied in order
// ("paper,rp_ai_rate=10").
func ParseCongestion(s string) (CongestionOptions, error) {
	var o CongestionOptions
	p := dcqcn.Default()
	for _, w := range strings.Split(s, ",") {
		switch w = strings.TrimSpace(w); w {
		case "", "on":
		case "off":
			o.Off, o.NoECT = true, true
		case "paper":
			p = dcqcn.Paper()
		default:
			if !strings.Contains(w, "=") {
				return o, fmt.Errorf("congestion setting %q: want on, off, paper or an mlx5 parameter name=value", w)
			}
			if err := p.Parse(w); err != nil {
				return o, err
			}
		}
	}
	if !o.Off {
		o.Params = &p
	}
	return o, nil
}
