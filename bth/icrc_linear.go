package bth

import (
	"encoding/binary"
	"hash/crc32"
	"sync"

	"github.com/goroce/goroce/inet"
)

// The ICRC covers the IPv4 identification and flags, but a UDP socket never
// shows the identification it received, and the kernel chooses the one it
// sends. CRC-32 is linear over GF(2): flipping a set of input bits changes
// the CRC by the XOR of what each bit alone changes, whatever the rest of
// the packet holds, and the change a bit makes depends only on how many
// bytes follow it. So for a packet of a given total length the difference
// between the ICRC it carries and the ICRC computed with identification 0
// and DF clear is a linear function of the 16 identification bits and the DF
// bit, and can be solved for them.
//
// In the CRC register (reflected, bit 31 = x^0) appending a zero byte
// multiplies by x^8 modulo the polynomial. The difference the 17 bits make
// is fixed right after the flags byte (byte 14 of the ICRC input: 8 bytes of
// 0xff, then IPv4 bytes 0..6) and is then multiplied by x^(8R), R being the
// number of bytes that follow. Undoing that multiplication (x is invertible
// modulo a polynomial with a constant term) brings any packet's difference
// back to that fixed point, where one small basis, computed once, solves it.
// Per packet that is one 32-step multiplication and a 17-step reduction.
//
// The price: a corrupted packet passes the ICRC whenever its error happens
// to look like some identification and DF value, which is 2^17 of the 2^32
// possible differences (about 1 in 32768), instead of 1 in 2^32. Links that
// see the IP header (AF_PACKET, AF_XDP) do not pay it.

// icrcPoly is the reflected CRC-32 (IEEE) polynomial without its x^32 term.
const icrcPoly = 0xedb88320

// idFieldEnd is the number of ICRC input bytes up to and including the IPv4
// flags byte: 8 bytes standing for the LRH, then IPv4 bytes 0..6.
const idFieldEnd = 8 + 7

// crcMulX multiplies a CRC register by x modulo the polynomial: what one
// zero input bit does.
func crcMulX(v uint32) uint32 {
	if v&1 != 0 {
		return v>>1 ^ icrcPoly
	}
	return v >> 1
}

// crcDivX is the inverse of crcMulX. crcMulX never sets bit 31 from the
// shift, so bit 31 of its result tells whether the polynomial was added.
func crcDivX(v uint32) uint32 {
	if v&0x80000000 != 0 {
		return (v^icrcPoly)<<1 | 1
	}
	return v << 1
}

// crcMulX4 multiplies a CRC register by x^4: the four bits shifted out
// (v&15) come back as their reduction modulo the polynomial.
func crcMulX4(v uint32) uint32 { return v>>4 ^ crcX4[v&15] }

// crcX4[n] is n (four bits, x^28..x^31) times x^4 modulo the polynomial.
var crcX4 = func() (t [16]uint32) {
	for n := range t {
		v := uint32(n)
		for range 4 {
			v = crcMulX(v)
		}
		t[n] = v
	}
	return
}()

// crcMul multiplies two CRC registers (polynomials modulo the CRC
// polynomial) in the reflected representation, four bits of a at a time:
// a table of b times every four-bit polynomial, then Horner's rule from
// a's highest powers down. It runs once or twice per packet on a UDP
// link, and a bit at a time with a branch per bit it took 30 ns.
func crcMul(a, b uint32) uint32 {
	// t[n]: b times the polynomial whose x^0..x^3 are n's bits 3..0, as
	// bits 31..28 of a register hold them.
	var t [16]uint32
	t[8] = b
	t[4] = crcMulX(t[8])
	t[2] = crcMulX(t[4])
	t[1] = crcMulX(t[2])
	for n := 3; n < 16; n++ {
		if n&(n-1) != 0 { // not a power of two: the sum of its bits' rows
			t[n] = t[n&(n-1)] ^ t[n&-n]
		}
	}
	p := t[a&15] // x^28..x^31
	for s := 4; s < 32; s += 4 {
		p = crcMulX4(p) ^ t[a>>s&15]
	}
	return p
}

// idBasis solves the fixed-point difference for the 17 bits. Rows are fully
// reduced: row i is the only one with bit pivot[i] set.
type idBasis struct {
	vec   [17]uint32 // difference each row stands for
	pivot [17]uint32 // one-bit mask
	bits  [17]uint32 // which ID bits (0..15) and DF (bit 16) make vec
	// hi and lo give the fixed-point difference of an identification's
	// high and low byte, for building a difference rather than solving one.
	hi, lo [256]uint32
	df     uint32
	// solve[k][v] is the elimination's answer for byte k of a difference
	// being v and the rest zero: the bits that explain it (17, shifted up
	// 32) and what is left unexplained (low 32). With the rows fully
	// reduced the elimination is linear, so a difference's answer is the
	// XOR of its four bytes'.
	solve [4][256]uint64
}

// idShift holds, for every IPv4 total length, x^(8R) and x^(-8R) modulo
// the polynomial, R = bytes of ICRC input after the flags byte.
type idShift struct {
	fwd, inv [1 << 16]uint32
}

var (
	idOnce   sync.Once
	idB      idBasis
	idShifts *idShift
)

// fixedDiff returns the CRC difference, taken right after the flags byte,
// that setting identification id and flags byte fl makes.
func fixedDiff(id uint16, fl byte) uint32 {
	var zero, b [3]byte
	binary.BigEndian.PutUint16(b[:], id)
	b[2] = fl
	return crc32.Update(0, crc32.IEEETable, b[:]) ^ crc32.Update(0, crc32.IEEETable, zero[:])
}

func idInit() {
	for i := range 256 {
		idB.hi[i] = fixedDiff(uint16(i)<<8, 0)
		idB.lo[i] = fixedDiff(uint16(i), 0)
	}
	idB.df = fixedDiff(0, 0x40)
	// Gaussian elimination over the 17 single-bit differences. A CRC
	// detects every error burst no longer than 32 bits, so these 17 bits
	// (within 3 bytes) are independent and every row gets a pivot.
	for i := range 17 {
		if i < 16 {
			idB.vec[i] = fixedDiff(1<<i, 0)
		} else {
			idB.vec[i] = idB.df
		}
		idB.bits[i] = 1 << i
	}
	for i := range 17 {
		// Choose the lowest set bit of this row as its pivot.
		v := idB.vec[i]
		p := v & -v
		idB.pivot[i] = p
		for j := range 17 {
			if j != i && idB.vec[j]&p != 0 {
				idB.vec[j] ^= v
				idB.bits[j] ^= idB.bits[i]
			}
		}
	}
	for k := range 4 {
		for v := range 256 {
			idB.solve[k][v] = eliminate(uint32(v) << (8 * k))
		}
	}
	s := new(idShift)
	s.fwd[0], s.inv[0] = 1<<31, 1<<31 // x^0
	for r := 1; r < len(s.fwd); r++ {
		f, v := s.fwd[r-1], s.inv[r-1]
		for range 8 {
			f = crcMulX(f)
			v = crcDivX(v)
		}
		s.fwd[r], s.inv[r] = f, v
	}
	idShifts = s
}

// idTail returns R for an IPv4 total length: the ICRC input is 8 bytes plus
// the datagram without its 4-byte ICRC. It is negative for lengths too short
// to hold the ICRC.
func idTail(totalLen int) int { return 8 + totalLen - ICRCLen - idFieldEnd }

// SolveIPv4ID returns the IPv4 identification and DF flag that explain
// diff, the XOR of the ICRC a packet carries and the ICRC computed with its
// identification 0 and DF clear (MF and the fragment offset are zero in
// RoCEv2), for a datagram of totalLen bytes. ok is false when no value
// explains it: the packet is corrupt. It allocates nothing.
func SolveIPv4ID(totalLen int, diff uint32) (id uint16, df, ok bool) {
	r := idTail(totalLen)
	if r < 0 || totalLen > 0xffff {
		return 0, false, false
	}
	idOnce.Do(idInit)
	d := crcMul(diff, idShifts.inv[r])
	t := &idB.solve
	e := t[0][d&0xff] ^ t[1][d>>8&0xff] ^ t[2][d>>16&0xff] ^ t[3][d>>24]
	if uint32(e) != 0 {
		return 0, false, false
	}
	bits := uint32(e >> 32)
	return uint16(bits), bits&(1<<16) != 0, true
}

// eliminate reduces a fixed-point difference by the basis: which ID and DF
// bits explain it (bits 32..48) and what none explains (bits 0..31).
func eliminate(d uint32) uint64 {
	var bits uint32
	for i := range 17 {
		if d&idB.pivot[i] != 0 {
			d ^= idB.vec[i]
			bits ^= idB.bits[i]
		}
	}
	return uint64(bits)<<32 | uint64(d)
}

// IPv4IDDiff returns how the ICRC of a datagram of totalLen bytes changes
// when idXor is XORed into its identification and, if dfXor, its DF flag
// is flipped. A sender whose kernel chooses the identification uses it to
// make the ICRC match what will be on the wire.
func IPv4IDDiff(totalLen int, idXor uint16, dfXor bool) uint32 {
	r := idTail(totalLen)
	if r < 0 || totalLen > 0xffff {
		return 0
	}
	idOnce.Do(idInit)
	d := idB.hi[idXor>>8] ^ idB.lo[idXor&0xff]
	if dfXor {
		d ^= idB.df
	}
	return crcMul(d, idShifts.fwd[r])
}

// RecoverIPv4ID fills in the identification and DF flag of an IPv4 RoCEv2
// frame whose header was rebuilt without them (as a UDP socket delivers
// it), so that VerifyICRC passes, and fixes the header checksum. It reports
// false, leaving identification 0 and DF clear, when no value makes the
// ICRC verify. IPv6 frames have neither field and report true unchanged.
func (f Frame) RecoverIPv4ID() bool {
	if f.IsIPv6() {
		return true
	}
	h := inet.IPv4(f.IP())
	h.SetID(0)
	h.SetFlagsFragmentOffset(0, 0)
	tot := len(f.L3())
	id, df, ok := SolveIPv4ID(tot, f.StoredICRC()^f.ComputeICRC())
	if ok {
		h.SetID(id)
		if df {
			h.SetFlagsFragmentOffset(inet.IPv4DontFragment, 0)
		}
	}
	h.SetChecksum(h.CalculateChecksum())
	return ok
}
