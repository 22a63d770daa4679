package bth

import (
	"net/netip"

	"github.com/goroce/goroce/inet"
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
		return inet.IPv4HeaderLen + inet.UDPHeaderLen
	}
	return inet.IPv6HeaderLen + inet.UDPHeaderLen
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
		ip := inet.IPv4(b[:inet.IPv4HeaderLen])
		ip.SetVersionIHL(inet.IPv4HeaderLen)
		ip.SetTOS(o.TClass)
		ip.SetTotalLength(uint16(inet.IPv4HeaderLen + inet.UDPHeaderLen + roceLen))
		ip.SetID(0)
		ip.SetFlagsFragmentOffset(inet.IPv4DontFragment, 0)
		ip.SetTTL(hop)
		ip.SetProtocol(inet.ProtoUDP)
		ip.SetSrc(o.Src)
		ip.SetDst(o.Dst)
		ip.SetChecksum(ip.CalculateChecksum())
		n = inet.IPv4HeaderLen
	} else {
		ip := inet.IPv6(b[:inet.IPv6HeaderLen])
		ip.SetVersionTrafficClassFlowLabel(o.TClass, o.FlowLabel)
		ip.SetPayloadLength(uint16(inet.UDPHeaderLen + roceLen))
		ip.SetNextHeader(inet.ProtoUDP)
		ip.SetHopLimit(hop)
		ip.SetSrc(o.Src)
		ip.SetDst(o.Dst)
		n = inet.IPv6HeaderLen
	}
	u := inet.UDP(b[n : n+inet.UDPHeaderLen])
	u.SetSrcPort(o.SrcPort)
	u.SetDstPort(UDPPort)
	u.SetLength(uint16(inet.UDPHeaderLen + roceLen))
	u.SetChecksum(0)
	return n + inet.UDPHeaderLen
}

// GIDAddr converts a 16-byte GID to the IP address it stands for in RoCEv2:
// an IPv4-mapped GID gives the IPv4 address.
func GIDAddr(gid [16]byte) netip.Addr { return netip.AddrFrom16(gid).Unmap() }

// AddrGID converts an IP address to its RoCEv2 GID (IPv4 becomes IPv4-mapped).
func AddrGID(a netip.Addr) [16]byte { return a.As16() }
