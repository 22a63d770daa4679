package rawudp

import (
	"bytes"
	"testing"
)

// TestPlace: GSOICRC's receiver takes a coalesced read of sealed segments
// (the last shorter) segment by segment, copies each payload after the
// one before, and counts a segment with a flipped bit, or too short to
// hold a BTH and an ICRC, as bad without placing it.
func TestPlace(t *testing.T) {
	const seg = 64
	b := make([]byte, 3*seg+40)
	for i := range b {
		b[i] = byte(i * 7)
	}
	seal(b[:3*seg], seg)
	seal(b[3*seg:], 40)
	pl := newPlacer()
	if bad := pl.place(b, seg); bad != 0 {
		t.Fatalf("%d bad segments in a sealed read", bad)
	}
	var want []byte
	for s := b; len(s) > 0; {
		p := s[:min(seg, len(s))]
		s = s[len(p):]
		want = append(want, p[12:len(p)-4]...)
	}
	if pl.at != len(want) || !bytes.Equal(pl.sink[:pl.at], want) {
		t.Fatalf("placed %d bytes, want the %d bytes of the payloads in order", pl.at, len(want))
	}
	b[seg+20] ^= 1
	if bad := pl.place(b, seg); bad != 1 || pl.at != 2*len(want)-(seg-16) {
		t.Fatalf("one flipped bit: %d bad, %d bytes placed", bad, pl.at)
	}
	if bad := pl.place(make([]byte, 10), seg); bad != 1 {
		t.Fatalf("a 10-byte segment: %d bad", bad)
	}
}
