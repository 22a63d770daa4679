package inet

import (
	"encoding/binary"
	"net/netip"
)

// IPv4 is a view of an IPv4 header, at least IPv4HeaderLen bytes.
type IPv4 []byte

// Field offsets (RFC 791).
const (
	v4VersionIHL = 0
	v4TOS        = 1
	v4TotalLen   = 2
	v4ID         = 4
	v4FlagsFrag  = 6
	v4TTL        = 8
	v4Protocol   = 9
	v4Checksum   = 10
	v4Src        = 12
	v4Dst        = 16
)

// IPv4 flags, as Flags returns them.
const (
	IPv4DontFragment  = 2
	IPv4MoreFragments = 1
)

// Version returns the version field (4 for a well-formed header).
func (h IPv4) Version() uint8 { return h[v4VersionIHL] >> 4 }

// HeaderLen returns the header's length in bytes (IHL × 4), options
// included.
func (h IPv4) HeaderLen() int { return int(h[v4VersionIHL]&0x0f) * 4 }

// TOS returns the type of service byte: DSCP<<2 | ECN.
func (h IPv4) TOS() uint8 { return h[v4TOS] }

// TotalLength returns the datagram's length, header included.
func (h IPv4) TotalLength() uint16 { return binary.BigEndian.Uint16(h[v4TotalLen:]) }

// ID returns the identification field.
func (h IPv4) ID() uint16 { return binary.BigEndian.Uint16(h[v4ID:]) }

// Flags returns the three flag bits (IPv4DontFragment, IPv4MoreFragments).
func (h IPv4) Flags() uint8 { return h[v4FlagsFrag] >> 5 }

// FragmentOffset returns the fragment offset, in 8-byte units.
func (h IPv4) FragmentOffset() uint16 { return binary.BigEndian.Uint16(h[v4FlagsFrag:]) & 0x1fff }

// IsFragment reports whether the datagram is a fragment: more fragments
// follow or it is not the first.
func (h IPv4) IsFragment() bool { return binary.BigEndian.Uint16(h[v4FlagsFrag:])&0x3fff != 0 }

// TTL returns the time to live.
func (h IPv4) TTL() uint8 { return h[v4TTL] }

// Protocol returns the payload's protocol number.
func (h IPv4) Protocol() uint8 { return h[v4Protocol] }

// Checksum returns the header checksum field.
func (h IPv4) Checksum() uint16 { return binary.BigEndian.Uint16(h[v4Checksum:]) }

// Src returns the source address.
func (h IPv4) Src() netip.Addr { return netip.AddrFrom4([4]byte(h[v4Src : v4Src+4])) }

// Dst returns the destination address.
func (h IPv4) Dst() netip.Addr { return netip.AddrFrom4([4]byte(h[v4Dst : v4Dst+4])) }

// Options returns the options, if the header has any.
func (h IPv4) Options() []byte { return h[IPv4HeaderLen:h.HeaderLen()] }

// SetVersionIHL writes version 4 and a header length of hl bytes (a
// multiple of 4, 20 to 60).
func (h IPv4) SetVersionIHL(hl int) { h[v4VersionIHL] = 4<<4 | uint8(hl/4)&0x0f }

// SetTOS writes the type of service byte.
func (h IPv4) SetTOS(v uint8) { h[v4TOS] = v }

// SetTotalLength writes the datagram's length.
func (h IPv4) SetTotalLength(n uint16) { binary.BigEndian.PutUint16(h[v4TotalLen:], n) }

// SetID writes the identification field.
func (h IPv4) SetID(id uint16) { binary.BigEndian.PutUint16(h[v4ID:], id) }

// SetFlagsFragmentOffset writes the flags and the fragment offset.
func (h IPv4) SetFlagsFragmentOffset(flags uint8, off uint16) {
	binary.BigEndian.PutUint16(h[v4FlagsFrag:], uint16(flags)<<13|off&0x1fff)
}

// SetTTL writes the time to live.
func (h IPv4) SetTTL(v uint8) { h[v4TTL] = v }

// SetProtocol writes the payload's protocol number.
func (h IPv4) SetProtocol(p uint8) { h[v4Protocol] = p }

// SetChecksum writes the header checksum field.
func (h IPv4) SetChecksum(c uint16) { binary.BigEndian.PutUint16(h[v4Checksum:], c) }

// SetSrc writes the source address (IPv4 or IPv4-mapped).
func (h IPv4) SetSrc(a netip.Addr) { b := a.Unmap().As4(); copy(h[v4Src:], b[:]) }

// SetDst writes the destination address (IPv4 or IPv4-mapped).
func (h IPv4) SetDst(a netip.Addr) { b := a.Unmap().As4(); copy(h[v4Dst:], b[:]) }

// CalculateChecksum returns the header checksum the header should carry:
// the one's complement sum of its 16-bit words, the checksum field taken
// as zero, over HeaderLen bytes.
func (h IPv4) CalculateChecksum() uint16 {
	var sum uint32
	n := min(h.HeaderLen(), len(h))
	for i := 0; i+1 < n; i += 2 {
		if i == v4Checksum {
			continue
		}
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// IsChecksumValid reports whether the checksum field is the one
// CalculateChecksum gives.
func (h IPv4) IsChecksumValid() bool { return h.CalculateChecksum() == h.Checksum() }
