package bth

import "testing"

func TestPSNArithmetic(t *testing.T) {
	const top = PSN(PSNMask)
	for _, tc := range []struct {
		p    PSN
		n    int
		want PSN
	}{
		{0, 1, 1},
		{top, 1, 0},
		{top, 2, 1},
		{0, -1, top},
		{5, -10, top - 4},
		{0x800000, 0x800000, 0},
		{top - 9, PSNSpace + 20, 10},
		{123, -PSNSpace, 123},
	} {
		if got := tc.p.Add(tc.n); got != tc.want {
			t.Errorf("%#x.Add(%d) = %#x, want %#x", tc.p, tc.n, got, tc.want)
		}
	}
	if top.Next() != 0 || PSN(7).Next() != 8 {
		t.Error("Next does not wrap at 2^24")
	}
}

func TestPSNCompare(t *testing.T) {
	const top = PSN(PSNMask)
	for _, tc := range []struct {
		p, q PSN
		diff int32
	}{
		{0, 0, 0},
		{1, 0, 1},
		{0, top, 1},  // across the wrap: 0 follows 0xffffff
		{top, 0, -1}, // and 0xffffff precedes 0
		{10, top - 9, 20},
		{PSNHalf - 1, 0, PSNHalf - 1},
		{PSNHalf, 0, -PSNHalf}, // exactly half way: counts as behind
		{0, PSNHalf, -PSNHalf},
		{0x123456, 0x123400, 0x56},
	} {
		if got := tc.p.Diff(tc.q); got != tc.diff {
			t.Errorf("%#x.Diff(%#x) = %d, want %d", tc.p, tc.q, got, tc.diff)
		}
		if tc.p.Before(tc.q) != (tc.diff < 0) || tc.p.After(tc.q) != (tc.diff > 0) {
			t.Errorf("%#x vs %#x: Before %v After %v, diff %d", tc.p, tc.q, tc.p.Before(tc.q), tc.p.After(tc.q), tc.diff)
		}
	}
}

func TestPSNWindow(t *testing.T) {
	const top = PSN(PSNMask)
	for _, tc := range []struct {
		p, lo PSN
		n     uint32
		in    bool
	}{
		{5, 5, 1, true},
		{5, 5, 0, false},
		{6, 5, 1, false},
		{top, top - 1, 2, true},
		{0, top - 1, 2, false},
		{0, top - 1, 3, true},  // window across the wrap
		{2, top - 1, 3, false}, //
		{top - 2, top - 1, 3, false},
		{100, 0, PSNSpace, true},
	} {
		if got := tc.p.InWindow(tc.lo, tc.n); got != tc.in {
			t.Errorf("%#x.InWindow(%#x, %d) = %v, want %v", tc.p, tc.lo, tc.n, got, tc.in)
		}
	}
	if !top.Valid() || (top + 1).Valid() {
		t.Error("Valid does not stop at 24 bits")
	}
}
