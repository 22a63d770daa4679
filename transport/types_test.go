package transport

import (
	"errors"
	"testing"
)

func TestMTUFor(t *testing.T) {
	for _, c := range []struct {
		ip   int
		v6   bool
		want MTU
	}{
		{1500, false, MTU1024}, // rxe's lab: a 1500-byte link gives 1024
		{9000, false, MTU4096},
		{4176, false, MTU4096}, // 4096 + rxe's 80 bytes of headers
		{4175, false, MTU2048},
		{4196, true, MTU4096},
		{4195, true, MTU2048},
		{600, false, MTU512},
		{591, false, MTU256},
		{0, false, MTU256},
	} {
		if got := MTUFor(c.ip, c.v6); got != c.want {
			t.Errorf("MTUFor(%d, v6=%v) = %v, want %v", c.ip, c.v6, got, c.want)
		}
	}
	for m, b := range map[MTU]int{MTU256: 256, MTU512: 512, MTU1024: 1024, MTU2048: 2048, MTU4096: 4096, 0: 0, 6: 0} {
		if m.Bytes() != b {
			t.Errorf("%d.Bytes() = %d, want %d", m, m.Bytes(), b)
		}
	}
}

func TestCheckTransition(t *testing.T) {
	for _, c := range []struct {
		typ      QPType
		from, to QPState
		mask     QPAttrMask
		missing  QPAttrMask
		extra    QPAttrMask
		ok       bool
	}{
		{RC, Reset, Init, AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags, 0, 0, true},
		{UD, Reset, Init, AttrState | AttrPKeyIndex | AttrPort, AttrQKey, 0, false},
		{UD, Reset, Init, AttrState | AttrPKeyIndex | AttrPort | AttrQKey | AttrAccessFlags, 0, AttrAccessFlags, false},
		{RC, Init, RTR, AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic, AttrMinRNRTimer, 0, false},
		{UC, Init, RTR, AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN, 0, 0, true},
		{UC, Init, RTR, AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMinRNRTimer, 0, AttrMinRNRTimer, false},
		{RC, RTR, RTS, AttrState | AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic | AttrMinRNRTimer, 0, 0, true},
		{RC, RTS, SQE, AttrState, 0, 0, false},   // no such transition
		{UC, SQE, RTS, AttrState, 0, 0, true},    // UC recovers from SQE
		{RC, SQE, RTS, AttrState, 0, 0, false},   // RC never is in SQE
		{RC, Init, RTS, AttrState, 0, 0, false},  // no skipping RTR
		{RC, Reset, Err, AttrState, 0, 0, false}, // the kernel's table has no RESET->ERR
		{RC, RTS, Err, AttrState, 0, 0, true},
		{RC, Init, Init, AttrState | AttrCurState, 0, AttrCurState, false}, // CUR_STATE only from RTR/RTS/SQD/SQE
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
}

func TestStrings(t *testing.T) {
	if s := (AttrState | AttrAV | AttrDestQPN).String(); s != "STATE|AV|DEST_QPN" {
		t.Errorf("mask string %q", s)
	}
	if RTS.String() != "RTS" || UD.String() != "UD" || WRAtomicFetchAndAdd.String() != "ATOMIC_FETCH_AND_ADD" {
		t.Error("names differ from libibverbs'")
	}
}
