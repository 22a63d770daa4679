package bth

import (
	"encoding/binary"
	"net/netip"
)

// Outer describes the IP and UDP headers of the RoCEv2 packets on one path:
// what an address vector turns into on the wire.
type Outer struct {
	Src, Dst  netip.Addr // both IPv4 (plain or IPv4-mapped) or both IPv6
	SrcPort   uint16     // UDP source port: flow entropy
	TClass    uint8      // IPv4 TOS / IPv6 traffic class: DSCP<<2 | ECN
	FlowLabel uint32     // IPv6 only
	HopLimit  uint8      // IPv4 TTL / IPv6 hop limit; 0 means 64
}

// DefaultHopLimit is the TTL Linux uses, and so rxe.
const DefaultHopLimit = 64

// IsIPv4 reports whether the path is IPv4 (an IPv4-mapped GID counts as IPv4).
func (o *Outer) IsIPv4() bool { return o.Dst.Unmap().Is4() }

// Len returns the length of the IP and UDP headers.
func (o *Outer) Len() int {
	if o.IsIPv4() {
		return IPv4HeaderLen + UDPHeaderLen
	}
	return IPv6HeaderLen + UDPHeaderLen
}

// Put writes the IP and UDP headers for roceLen transport bytes (BTH through
// ICRC) at the start of b and returns their length. IPv4 packets get DF set,
// identification 0 (what Linux sends for an unconnected socket with DF) and
// a correct header checksum; the UDP checksum is 0, as rxe and HCAs send it:
// the ICRC protects the packet.
func (o *Outer) Put(b []byte, roceLen int) int {
	hop := o.HopLimit
	if hop == 0 {
		hop = DefaultHopLimit
	}
	var n int
	if o.IsIPv4() {
		ip := b[:IPv4HeaderLen]
		ip[0] = 0x45
		ip[1] = o.TClass
		binary.BigEndian.PutUint16(ip[2:], uint16(IPv4HeaderLen+UDPHeaderLen+roceLen))
		binary.BigEndian.PutUint32(ip[4:], 0x00004000) // ID 0, DF
		ip[8] = hop
		ip[9] = IPProtoUDP
		ip[10], ip[11] = 0, 0
		s, d := o.Src.Unmap().As4(), o.Dst.Unmap().As4()
		copy(ip[12:16], s[:])
		copy(ip[16:20], d[:])
		binary.BigEndian.PutUint16(ip[10:], IPv4Checksum(ip))
		n = IPv4HeaderLen
	} else {
		ip := b[:IPv6HeaderLen]
		binary.BigEndian.PutUint32(ip, 6<<28|uint32(o.TClass)<<20|o.FlowLabel&0xfffff)
		binary.BigEndian.PutUint16(ip[4:], uint16(UDPHeaderLen+roceLen))
		ip[6] = IPProtoUDP
		ip[7] = hop
		s, d := o.Src.As16(), o.Dst.As16()
		copy(ip[8:24], s[:])
		copy(ip[24:40], d[:])
		n = IPv6HeaderLen
	}
	u := UDP(b[n : n+UDPHeaderLen])
	u.SetSrcPort(o.SrcPort)
	u.SetDstPort(UDPPort)
	u.SetLength(uint16(UDPHeaderLen + roceLen))
	u.SetChecksum(0)
	return n + UDPHeaderLen
}

// IPv4Checksum computes the header checksum of an IPv4 header as it would
// be with its checksum field zero.
func IPv4Checksum(ip []byte) uint16 {
	ihl := int(ip[0]&0x0f) * 4
	var sum uint32
	for i := 0; i+1 < ihl; i += 2 {
		if i == 10 {
			continue
		}
		sum += uint32(ip[i])<<8 | uint32(ip[i+1])
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// GIDAddr converts a 16-byte GID to the IP address it stands for in RoCEv2:
// an IPv4-mapped GID gives the IPv4 address.
func GIDAddr(gid [16]byte) netip.Addr { return netip.AddrFrom16(gid).Unmap() }

// AddrGID converts an IP address to its RoCEv2 GID (IPv4 becomes IPv4-mapped).
func AddrGID(a netip.Addr) [16]byte { return a.As16() }
