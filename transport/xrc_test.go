package transport

import (
	"errors"
	"testing"
)

// TestCheckTransitionXRC: the masks ibv_modify_qp requires of XRC QPs (the
// kernel's qp_state_table): an initiator is set up as RC's sending half,
// a target as its receiving half, and neither has SQE.
func TestCheckTransitionXRC(t *testing.T) {
	rtr := AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN
	for _, c := range []struct {
		typ      QPType
		from, to QPState
		mask     QPAttrMask
		missing  QPAttrMask
		extra    QPAttrMask
		ok       bool
	}{
		{XRCIni, Reset, Init, AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags, 0, 0, true},
		{XRCTgt, Reset, Init, AttrState | AttrPKeyIndex | AttrPort, AttrAccessFlags, 0, false},
		{XRCIni, Init, RTR, rtr, 0, 0, true},
		{XRCIni, Init, RTR, rtr | AttrMaxDestRdAtomic, 0, AttrMaxDestRdAtomic, false}, // no responder
		{XRCTgt, Init, RTR, rtr, AttrMaxDestRdAtomic | AttrMinRNRTimer, 0, false},
		{XRCTgt, Init, RTR, rtr | AttrMaxDestRdAtomic | AttrMinRNRTimer, 0, 0, true},
		{XRCIni, RTR, RTS, AttrState | AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic, 0, 0, true},
		{XRCIni, RTR, RTS, AttrState | AttrSQPSN, AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic, 0, false},
		{XRCTgt, RTR, RTS, AttrState | AttrSQPSN | AttrTimeout, 0, 0, true}, // a target may be in RTS
		{XRCTgt, RTR, RTS, AttrState | AttrSQPSN | AttrTimeout | AttrRetryCnt, 0, AttrRetryCnt, false},
		{XRCIni, RTS, RTS, AttrState | AttrMinRNRTimer, 0, AttrMinRNRTimer, false},
		{XRCTgt, RTS, RTS, AttrState | AttrMinRNRTimer, 0, 0, true},
		{XRCIni, SQE, RTS, AttrState, 0, 0, false}, // reliable: never in SQE
		{XRCTgt, RTS, Err, AttrState, 0, 0, true},
		{QPType(7), Reset, Init, AttrState, 0, 0, false}, // no such type
	} {
		err := checkTransition(c.typ, c.from, c.to, c.mask)
		if (err == nil) != c.ok {
			t.Errorf("%v %v->%v %v: %v", c.typ, c.from, c.to, c.mask, err)
			continue
		}
		var ae *AttrError
		if err != nil && (!errors.As(err, &ae) || ae.Missing != c.missing || ae.Extra != c.extra || !errors.Is(err, ErrInvalid)) {
			t.Errorf("%v %v->%v: %v, want missing %v extra %v", c.typ, c.from, c.to, err, c.missing, c.extra)
		}
	}
	if XRCIni.String() != "XRC_INI" || XRCTgt.String() != "XRC_TGT" || QPType(7).String() != "QPType(7)" {
		t.Errorf("type names %v %v %v", XRCIni, XRCTgt, QPType(7))
	}
}
