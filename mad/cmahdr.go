package mad

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// CMAHdr is a view of the 36-byte header Linux's rdma_cm puts at the start
// of a REQ's (and a SIDR_REQ's) private data for the IP port spaces (cma.c's
// struct cma_hdr): version, IP version, the client's port and both IP
// addresses. The user's private data follows it.
type CMAHdr []byte

// Sizes and offsets of the rdma_cm header.
const (
	CMAHdrLen     = 36
	CMAVersion    = 0x00 // cma.c's CMA_VERSION
	offCMAVersion = 0
	offCMAIPVer   = 1 // IP version in the high nibble
	offCMAPort    = 2
	offCMASrc     = 4
	offCMADst     = 20
	// IPv4 addresses sit in the last 4 bytes of each 16-byte field after 12
	// zero bytes (cma_ip_addr's pad[3]), not in the IPv4-mapped form.
	cmaIPv4Off = 12
)

// ErrCMAHdr reports a private data too short for the rdma_cm header, or an
// IP version other than 4 or 6.
var ErrCMAHdr = fmt.Errorf("mad: bad rdma_cm header")

// ParseCMAHdr checks that p starts with an rdma_cm header of IP version 4
// or 6 and returns a view of it.
func ParseCMAHdr(p []byte) (CMAHdr, error) {
	if len(p) < CMAHdrLen {
		return nil, fmt.Errorf("%w: %d bytes of private data, want at least %d", ErrCMAHdr, len(p), CMAHdrLen)
	}
	h := CMAHdr(p[:CMAHdrLen])
	if v := h.IPVersion(); v != 4 && v != 6 {
		return nil, fmt.Errorf("%w: IP version %d", ErrCMAHdr, v)
	}
	return h, nil
}

// Version returns the header's version byte (major in the high nibble,
// minor in the low one; Linux sends 0).
func (h CMAHdr) Version() uint8 { return h[offCMAVersion] }

// IPVersion returns the IP version, 4 or 6.
func (h CMAHdr) IPVersion() uint8 { return h[offCMAIPVer] >> 4 }

// Port returns the active side's source port.
func (h CMAHdr) Port() uint16 { return binary.BigEndian.Uint16(h[offCMAPort:]) }

// SrcAddr returns the active side's address.
func (h CMAHdr) SrcAddr() netip.Addr { return h.addr(offCMASrc) }

// DstAddr returns the passive side's address.
func (h CMAHdr) DstAddr() netip.Addr { return h.addr(offCMADst) }

func (h CMAHdr) addr(off int) netip.Addr {
	if h.IPVersion() == 4 {
		return netip.AddrFrom4([4]byte(h[off+cmaIPv4Off:]))
	}
	return netip.AddrFrom16([16]byte(h[off:]))
}

// SetVersion sets the version byte.
func (h CMAHdr) SetVersion(v uint8) { h[offCMAVersion] = v }

// SetPort sets the source port.
func (h CMAHdr) SetPort(p uint16) { binary.BigEndian.PutUint16(h[offCMAPort:], p) }

// SetAddrs sets the IP version and both addresses, which must be of one
// family. Two IPv4-mapped IPv6 addresses (or one and an IPv4 address)
// count as IPv4, as cma.c sends them; beside a true IPv6 address an
// IPv4-mapped one stays IPv6, as a header of IP version 6 may carry it.
func (h CMAHdr) SetAddrs(src, dst netip.Addr) error {
	if s, d := src.Unmap(), dst.Unmap(); s.Is4() && d.Is4() {
		src, dst = s, d
	}
	if !src.IsValid() || !dst.IsValid() || src.Is4() != dst.Is4() {
		return fmt.Errorf("%w: addresses %v and %v are not of one family", ErrCMAHdr, src, dst)
	}
	ver := uint8(6)
	if src.Is4() {
		ver = 4
	}
	h[offCMAIPVer] = ver << 4
	h.putAddr(offCMASrc, src)
	h.putAddr(offCMADst, dst)
	return nil
}

func (h CMAHdr) putAddr(off int, a netip.Addr) {
	f := h[off : off+16]
	if a.Is4() {
		clear(f[:cmaIPv4Off])
		a4 := a.As4()
		copy(f[cmaIPv4Off:], a4[:])
		return
	}
	a16 := a.As16()
	copy(f, a16[:])
}

// PortSpace is an rdma_cm port space (rdma_cma.h's enum rdma_ucm_port_space).
type PortSpace uint16

// Port spaces.
const (
	PortSpaceIPoIB PortSpace = 0x0002
	PortSpaceTCP   PortSpace = 0x0106 // RC connections
	PortSpaceUDP   PortSpace = 0x0111 // UD, resolved through SIDR
	PortSpaceIB    PortSpace = 0x013f
)

// String returns the port space's name in rdma_cma.h without its RDMA_PS_
// prefix ("TCP", "UDP", "IPOIB", "IB"; rdma(8) prints TCP and UDP so), or
// its value in hex.
func (ps PortSpace) String() string {
	switch ps {
	case PortSpaceTCP:
		return "TCP"
	case PortSpaceUDP:
		return "UDP"
	case PortSpaceIPoIB:
		return "IPOIB"
	case PortSpaceIB:
		return "IB"
	}
	return fmt.Sprintf("%#04x", uint16(ps))
}

// ServiceID returns rdma_cm's service ID for a port in a port space:
// (port space << 16) | port (cma.c's cma_get_service_id).
func ServiceID(ps PortSpace, port uint16) uint64 { return uint64(ps)<<16 | uint64(port) }

// SplitServiceID returns the port space and port of an rdma_cm service ID;
// ok is false when the ID is not of that form (its top 16 bits set, or an
// unknown port space).
func SplitServiceID(id uint64) (ps PortSpace, port uint16, ok bool) {
	ps, port = PortSpace(id>>16), uint16(id)
	if id>>32 != 0 {
		return 0, 0, false
	}
	switch ps {
	case PortSpaceIPoIB, PortSpaceTCP, PortSpaceUDP, PortSpaceIB:
		return ps, port, true
	}
	return 0, 0, false
}
