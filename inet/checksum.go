package inet

import "encoding/binary"

// The Internet checksum (RFC 1071): the one's complement of the one's
// complement sum of 16-bit big-endian words. Sums are kept unfolded in a
// uint64 while they run, so that adding a header, a pseudo-header and a
// payload costs no folding in between.

// Sum adds b to the running sum s as 16-bit big-endian words, eight bytes
// at a time; an odd last byte is padded with zero (RFC 1071).
func Sum(s uint64, b []byte) uint64 {
	for len(b) >= 8 {
		v := binary.BigEndian.Uint64(b)
		s += v >> 32
		s += v & 0xffffffff
		b = b[8:]
	}
	for len(b) >= 2 {
		s += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	return s
}

// Fold reduces a running sum to 16 bits, end-around carries added.
func Fold(s uint64) uint16 {
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// Checksum is the Internet checksum of b: ^Fold(Sum(0, b)).
func Checksum(b []byte) uint16 { return ^Fold(Sum(0, b)) }

// PseudoHeaderSum is the running sum of the IPv4 pseudo-header a UDP
// checksum covers (RFC 768): source, destination, protocol and udpLen.
func (h IPv4) PseudoHeaderSum(udpLen int) uint64 {
	return Sum(0, h[v4Src:v4Dst+4]) + uint64(h.Protocol()) + uint64(udpLen)
}

// PseudoHeaderSum is the running sum of the IPv6 pseudo-header a UDP
// checksum covers (RFC 8200 8.1): source, destination, upper-layer length
// and next header.
func (h IPv6) PseudoHeaderSum(udpLen int) uint64 {
	return Sum(0, h[v6Src:v6Dst+16]) + uint64(h.NextHeader()) + uint64(udpLen)
}

// CalculateChecksum returns the checksum u (the header and its payload,
// len(u) bytes) should carry, given its pseudo-header's sum; the checksum
// field is taken as zero. A result of zero is sent as all ones, since zero
// means "no checksum" (RFC 768).
func (u UDP) CalculateChecksum(pseudo uint64) uint16 {
	s := pseudo + Sum(0, u[:udpChecksum]) + Sum(0, u[udpChecksum+2:])
	if c := ^Fold(s); c != 0 {
		return c
	}
	return 0xffff
}
