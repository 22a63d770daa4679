package transport

import (
	"sync/atomic"

	"github.com/goroce/goroce/bth"
)

// AH is an address handle: a resolved destination for UD sends (ibv_ah).
type AH struct {
	pd        *PD
	attr      AHAttr
	outer     bth.Outer
	destroyed atomic.Bool
}

// newAH resolves an address vector (ibv_create_ah).
func newAH(env *env, pd *PD, attr AHAttr) (*AH, error) {
	o, err := resolveAH(env, &attr, 0)
	if err != nil {
		return nil, err
	}
	pd.hold()
	return &AH{pd: pd, attr: attr, outer: o}, nil
}

// Attr returns the address vector.
func (a *AH) Attr() AHAttr { return a.attr }

// Destroy releases the address handle (ibv_destroy_ah). A send posted
// with it afterwards fails, and so does a second Destroy (ErrInvalid).
func (a *AH) Destroy() error {
	if a.pd.closed() {
		return errQPClosed("destroy_ah")
	}
	if !a.destroyed.CompareAndSwap(false, true) {
		return invalid("destroy_ah: the address handle was destroyed already")
	}
	a.pd.release()
	return nil
}

// AHAttrFromWC builds the address vector that answers a UD receive, from
// its completion and the 40-byte GRH area of its buffer
// (ibv_init_ah_from_wc): the destination is the packet's source.
func AHAttrFromWC(wc *WC, grh []byte, sgidIndex uint8) (AHAttr, error) {
	if wc.Flags&WithGRH == 0 || len(grh) < bth.GRHLen {
		return AHAttr{}, invalid("completion without a GRH")
	}
	g := bth.GRH(grh)
	a := AHAttr{DGID: bth.GIDFromAddr(g.Source()), SGIDIndex: sgidIndex, PortNum: 1, HopLimit: 0xff}
	if !g.IsIPv4() {
		a.FlowLabel = g.FlowLabel()
		a.TrafficClass = g.TClass()
	} else {
		a.TrafficClass = grh[20+1]
	}
	return a, nil
}
