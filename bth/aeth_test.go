package bth

import (
	"testing"
	"time"
)

func TestSyndrome(t *testing.T) {
	for _, tc := range []struct {
		s     Syndrome
		class AckClass
		value uint8
		str   string
	}{
		{ACKSyndrome(CreditsInvalid), ClassACK, 0x1f, "ACK credits=invalid"},
		{ACKSyndrome(0), ClassACK, 0, "ACK credits=0"},
		{ACKSyndrome(10), ClassACK, 10, "ACK credits=32"},
		{0x1f, ClassACK, 0x1f, "ACK credits=invalid"},
		{RNRNAKSyndrome(12), ClassRNRNAK, 12, "RNR NAK timer=12 (640µs)"},
		{0x2c, ClassRNRNAK, 12, "RNR NAK timer=12 (640µs)"},
		{RNRNAKSyndrome(0), ClassRNRNAK, 0, "RNR NAK timer=0 (655.36ms)"},
		{NAKSyndrome(NAKPSNSequenceError), ClassNAK, 0, "NAK PSN sequence error"},
		{0x60, ClassNAK, 0, "NAK PSN sequence error"},
		{NAKSyndrome(NAKInvalidRequest), ClassNAK, 1, "NAK invalid request"},
		{NAKSyndrome(NAKRemoteAccessError), ClassNAK, 2, "NAK remote access error"},
		{NAKSyndrome(NAKRemoteOperational), ClassNAK, 3, "NAK remote operational error"},
		{NAKSyndrome(NAKInvalidRDRequest), ClassNAK, 4, "NAK invalid RD request"},
		{0x65, ClassNAK, 5, "NAK reserved NAK code 5"},
		{0x40, ClassReserved, 0, "reserved syndrome 0x40"},
		{0x80, ClassACK, 0, "ACK credits=0"}, // bit 7 is reserved and ignored
	} {
		if tc.s.Class() != tc.class || tc.s.Value() != tc.value || tc.s.String() != tc.str {
			t.Errorf("%#02x: class %d value %d %q, want %d %d %q", uint8(tc.s), tc.s.Class(), tc.s.Value(), tc.s.String(), tc.class, tc.value, tc.str)
		}
		if tc.s.IsACK() != (tc.class == ClassACK) || tc.s.IsNAK() != (tc.class == ClassNAK) || tc.s.IsRNRNAK() != (tc.class == ClassRNRNAK) {
			t.Errorf("%#02x: IsACK/IsNAK/IsRNRNAK disagree with class %d", uint8(tc.s), tc.class)
		}
	}
	if NAKSyndrome(NAKRemoteAccessError).NAKCode() != NAKRemoteAccessError {
		t.Error("NAKCode does not round trip")
	}
	a := AETH(make([]byte, AETHLen))
	a.Encode(RNRNAKSyndrome(14), 0xabcdef)
	if a.Syndrome() != 0x2e || a.MSN() != 0xabcdef || string(a) != "\x2e\xab\xcd\xef" {
		t.Errorf("AETH encoded as % x", []byte(a))
	}
}

// rnrTimes is IBA vol 1 table 45, in milliseconds.
var rnrTimes = [32]float64{655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.48,
	0.64, 0.96, 1.28, 1.92, 2.56, 3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72, 40.96, 61.44, 81.92,
	122.88, 163.84, 245.76, 327.68, 491.52}

func ms(v float64) time.Duration { return time.Duration(v*1e5+0.5) * 10 * time.Nanosecond }

func TestRNRTimer(t *testing.T) {
	for code, v := range rnrTimes {
		if got := RNRTimer(uint8(code)); got != ms(v) {
			t.Errorf("RNRTimer(%d) = %v, want %v", code, got, ms(v))
		}
		if code > 0 && RNRTimerCode(ms(v)) != uint8(code) {
			t.Errorf("RNRTimerCode(%v) = %d, want %d", ms(v), RNRTimerCode(ms(v)), code)
		}
	}
	for _, tc := range []struct {
		d    time.Duration
		code uint8
	}{
		{0, 1},
		{641 * time.Microsecond, 13},
		{500 * time.Millisecond, 0}, // beyond 491.52 ms only code 0 (655.36 ms) is long enough
		{time.Second, 0},            // nothing is long enough: the longest
	} {
		if got := RNRTimerCode(tc.d); got != tc.code {
			t.Errorf("RNRTimerCode(%v) = %d, want %d", tc.d, got, tc.code)
		}
	}
	if RNRTimer(12|0xe0) != RNRTimer(12) {
		t.Error("RNRTimer reads more than 5 bits")
	}
}

// credits is IBA vol 1 table 44.
var credits = [31]int{0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768,
	1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768}

func TestCredits(t *testing.T) {
	for code, n := range credits {
		if got := CreditCount(uint8(code)); got != n {
			t.Errorf("CreditCount(%d) = %d, want %d", code, got, n)
		}
		if got := CreditCode(n); got != uint8(code) {
			t.Errorf("CreditCode(%d) = %d, want %d", n, got, code)
		}
	}
	if CreditCount(CreditsInvalid) != -1 {
		t.Error("credit code 0x1f is not 'invalid'")
	}
	for _, tc := range []struct{ n, code int }{{5, 4}, {7, 5}, {1000, 19}, {1 << 20, 30}, {-1, 0}} {
		if got := CreditCode(tc.n); got != uint8(tc.code) {
			t.Errorf("CreditCode(%d) = %d, want %d", tc.n, got, tc.code)
		}
	}
}
