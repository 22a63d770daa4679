package rawudp

import (
	"encoding/binary"

	"github.com/goroce/goroce/bth"
)

// The headers GSOICRC's ICRCs cover: the IP and UDP headers go into every
// ICRC (masked), but which ones is of no matter to its cost.
var (
	icrcIP  = [20]byte{0: 0x45, 8: 64, 9: 17}
	icrcUDP = [8]byte{2: 0x12, 3: 0xb7} // destination port 4791
)

// minICRCSize is the shortest GSOICRC datagram: a BTH and the ICRC.
const minICRCSize = bth.BTHLen + bth.ICRCLen

// seal writes the ICRC of each size-byte segment of b into its last four
// bytes, as a sender seals each packet of a GSO send.
func seal(b []byte, size int) {
	for ; len(b) >= size; b = b[size:] {
		bth.Seal(icrcIP[:], icrcUDP[:], b[:size])
	}
}

// placer is GSOICRC's receiver's memory: it places payloads in turn into
// 4 MiB, more than the last-level cache, as a bandwidth test's buffers.
type placer struct {
	sink []byte
	at   int // where the next payload goes
}

func newPlacer() *placer { return &placer{sink: make([]byte, 4<<20)} }

// place checks the ICRC of each seg-byte segment of a coalesced read b (the
// last may be shorter) and copies its payload, past the BTH, into the
// sink, as a responder places a WRITE; it returns how many ICRCs did not
// match.
func (pl *placer) place(b []byte, seg int) (bad int) {
	for len(b) > 0 {
		p := b[:min(seg, len(b))]
		b = b[len(p):]
		if len(p) < minICRCSize {
			bad++
			continue
		}
		n := len(p) - bth.ICRCLen
		if bth.ICRC(icrcIP[:], icrcUDP[:], p[:n]) != binary.LittleEndian.Uint32(p[n:]) {
			bad++
			continue
		}
		pay := p[bth.BTHLen:n]
		if pl.at+len(pay) > len(pl.sink) {
			pl.at = 0
		}
		pl.at += copy(pl.sink[pl.at:], pay)
	}
	return bad
}
