package inet

import (
	"encoding/binary"
	"net/netip"
)

// IPv6 is a view of an IPv6 fixed header, IPv6HeaderLen bytes.
type IPv6 []byte

// Field offsets (RFC 8200).
const (
	v6VersionTCFlow = 0
	v6PayloadLen    = 4
	v6NextHeader    = 6
	v6HopLimit      = 7
	v6Src           = 8
	v6Dst           = 24
)

// Version returns the version field (6 for a well-formed header).
func (h IPv6) Version() uint8 { return h[0] >> 4 }

// TrafficClass returns the traffic class: DSCP<<2 | ECN.
func (h IPv6) TrafficClass() uint8 {
	return uint8(binary.BigEndian.Uint32(h[v6VersionTCFlow:]) >> 20)
}

// FlowLabel returns the 20-bit flow label.
func (h IPv6) FlowLabel() uint32 { return binary.BigEndian.Uint32(h[v6VersionTCFlow:]) & 0xfffff }

// PayloadLength returns the length after the fixed header.
func (h IPv6) PayloadLength() uint16 { return binary.BigEndian.Uint16(h[v6PayloadLen:]) }

// NextHeader returns the next header's protocol number.
func (h IPv6) NextHeader() uint8 { return h[v6NextHeader] }

// HopLimit returns the hop limit.
func (h IPv6) HopLimit() uint8 { return h[v6HopLimit] }

// Src returns the source address.
func (h IPv6) Src() netip.Addr { return netip.AddrFrom16([16]byte(h[v6Src : v6Src+16])) }

// Dst returns the destination address.
func (h IPv6) Dst() netip.Addr { return netip.AddrFrom16([16]byte(h[v6Dst : v6Dst+16])) }

// SetVersionTrafficClassFlowLabel writes version 6, the traffic class and
// the flow label (its low 20 bits).
func (h IPv6) SetVersionTrafficClassFlowLabel(tc uint8, flow uint32) {
	binary.BigEndian.PutUint32(h[v6VersionTCFlow:], 6<<28|uint32(tc)<<20|flow&0xfffff)
}

// SetPayloadLength writes the length after the fixed header.
func (h IPv6) SetPayloadLength(n uint16) { binary.BigEndian.PutUint16(h[v6PayloadLen:], n) }

// SetNextHeader writes the next header's protocol number.
func (h IPv6) SetNextHeader(p uint8) { h[v6NextHeader] = p }

// SetHopLimit writes the hop limit.
func (h IPv6) SetHopLimit(v uint8) { h[v6HopLimit] = v }

// SetSrc writes the source address.
func (h IPv6) SetSrc(a netip.Addr) { b := a.As16(); copy(h[v6Src:], b[:]) }

// SetDst writes the destination address.
func (h IPv6) SetDst(a netip.Addr) { b := a.As16(); copy(h[v6Dst:], b[:]) }
