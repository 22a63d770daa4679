package bth

import (
	"encoding/binary"
	"net/netip"

	"github.com/goroce/goroce/inet"
)

// GRH is a view of the 40-byte InfiniBand Global Route Header. Over RoCEv2
// it never travels on the wire, but HCAs write it at the start of every UD
// receive buffer: for IPv6 the IPv6 header itself (same layout), for IPv4 20
// zero bytes followed by the IPv4 header, as rdma-core's ibv_grh readers and
// Linux rxe expect (union rdma_network_hdr).
type GRH []byte

// IPVer returns the IP version nibble (6 in an IPv6 GRH).
func (g GRH) IPVer() uint8 { return g[0] >> 4 }

// TClass returns the traffic class.
func (g GRH) TClass() uint8 { return g[0]<<4 | g[1]>>4 }

// FlowLabel returns the 20-bit flow label.
func (g GRH) FlowLabel() uint32 { return binary.BigEndian.Uint32(g) & 0xfffff }

// PayLen returns the payload length.
func (g GRH) PayLen() uint16 { return binary.BigEndian.Uint16(g[4:]) }

// NextHdr returns the next header (0x1b for IB, 17 for UDP).
func (g GRH) NextHdr() uint8 { return g[6] }

// HopLimit returns the hop limit.
func (g GRH) HopLimit() uint8 { return g[7] }

// SGID returns the source GID (bytes 8-23).
func (g GRH) SGID() (gid [16]byte) { copy(gid[:], g[8:24]); return }

// DGID returns the destination GID (bytes 24-39).
func (g GRH) DGID() (gid [16]byte) { copy(gid[:], g[24:40]); return }

// IsIPv4 reports whether the GRH area holds an IPv4 header in its last 20
// bytes (RoCEv2 over IPv4) rather than an IPv6/IB GRH.
func (g GRH) IsIPv4() bool { return g[20]>>4 == 4 && g[0] == 0 }

// Source returns the sender's address: the IPv4 source of a RoCEv2-over-IPv4
// GRH area, or the SGID of an IPv6 one.
func (g GRH) Source() netip.Addr {
	if g.IsIPv4() {
		return netip.AddrFrom4([4]byte(g[20+12 : 20+16]))
	}
	return netip.AddrFrom16([16]byte(g[8:24]))
}

// PutNetworkHeader fills the 40-byte GRH area from a received packet's
// network header: an IPv6 header is copied whole, an IPv4 header lands in
// the last 20 bytes after 20 zero bytes.
func (g GRH) PutNetworkHeader(ip []byte) {
	if len(ip) >= inet.IPv6HeaderLen && ip[0]>>4 == 6 {
		copy(g[:GRHLen], ip[:inet.IPv6HeaderLen])
		return
	}
	clear(g[:20])
	copy(g[20:GRHLen], ip[:inet.IPv4HeaderLen])
}
