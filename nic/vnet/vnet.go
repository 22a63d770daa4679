// Package vnet undoes the offloads a Linux sender leaves to "hardware" when
// its frames are read from an AF_PACKET socket instead: with PACKET_VNET_HDR
// the kernel puts a virtio_net_hdr before each frame saying which checksum
// is still partial (CHECKSUM_PARTIAL) and whether the frame is a GSO
// super-frame. A veth pair passes both through unchanged, so a program that
// reads a veth with AF_PACKET (a forwarder, a RoCE link) sees UDP datagrams
// whose checksum is a pseudo-header sum, and UDP GSO sends of up to 64 KiB
// as one frame. This package completes the checksum and cuts a UDP GSO
// super-frame into the datagrams it stands for, as the kernel's software
// GSO would (include/uapi/linux/virtio_net.h, net/ipv4/udp_offload.c).
//
// Frames start at the Ethernet header; an 802.1Q tag is allowed. Nothing
// allocates.
package vnet

import (
	"encoding/binary"
	"errors"

	"github.com/goroce/goroce/inet"
)

// HdrLen is the size of struct virtio_net_hdr.
const HdrLen = 10

// Header flags and GSO types (virtio_net.h).
const (
	FlagNeedsCsum = 1 // the checksum at CsumStart+CsumOffset is partial
	FlagDataValid = 2

	GSONone   = 0
	GSOTCPv4  = 1
	GSOUDP    = 3 // UFO: IP fragmentation, not produced by UDP_SEGMENT
	GSOTCPv6  = 4
	GSOUDPL4  = 5 // UDP_SEGMENT (USO): one datagram per GSOSize bytes
	GSOECNBit = 0x80
)

// Hdr is a decoded virtio_net_hdr. AF_PACKET writes it in host byte order.
type Hdr struct {
	Flags      uint8  // FlagNeedsCsum and the other VIRTIO_NET_HDR_F_ bits
	GSOType    uint8  // GSONone, GSOUDPL4, ... possibly with GSOECNBit
	HdrLen     uint16 // Ethernet, IP and L4 headers
	GSOSize    uint16 // payload bytes per segment
	CsumStart  uint16 // where the checksummed region starts (the L4 header)
	CsumOffset uint16 // where, from CsumStart, the checksum field is
}

// Parse decodes the header at the start of b.
func Parse(b []byte) Hdr {
	_ = b[HdrLen-1]
	return Hdr{
		Flags:      b[0],
		GSOType:    b[1],
		HdrLen:     binary.NativeEndian.Uint16(b[2:]),
		GSOSize:    binary.NativeEndian.Uint16(b[4:]),
		CsumStart:  binary.NativeEndian.Uint16(b[6:]),
		CsumOffset: binary.NativeEndian.Uint16(b[8:]),
	}
}

// Put encodes h at the start of b.
func (h Hdr) Put(b []byte) {
	_ = b[HdrLen-1]
	b[0], b[1] = h.Flags, h.GSOType
	binary.NativeEndian.PutUint16(b[2:], h.HdrLen)
	binary.NativeEndian.PutUint16(b[4:], h.GSOSize)
	binary.NativeEndian.PutUint16(b[6:], h.CsumStart)
	binary.NativeEndian.PutUint16(b[8:], h.CsumOffset)
}

// IsUDPGSO reports whether h describes a UDP_SEGMENT super-frame.
func (h Hdr) IsUDPGSO() bool { return h.GSOType&^GSOECNBit == GSOUDPL4 && h.GSOSize > 0 }

// ErrMalformed is returned for a frame whose headers do not match its
// virtio_net_hdr.
var ErrMalformed = errors.New("vnet: frame does not match its virtio_net_hdr")

// CompleteChecksum finishes a partial checksum: the field holds the
// pseudo-header sum and the sum over the rest is still to be added, as
// skb_checksum_help does. Frames without FlagNeedsCsum are left alone.
func CompleteChecksum(frame []byte, h Hdr) error {
	if h.Flags&FlagNeedsCsum == 0 {
		return nil
	}
	start, field := int(h.CsumStart), int(h.CsumStart)+int(h.CsumOffset)
	if start >= len(frame) || field+2 > len(frame) {
		return ErrMalformed
	}
	c := inet.Checksum(frame[start:])
	if c == 0 && h.CsumOffset == 6 { // UDP sends 0 as all ones (RFC 768)
		c = 0xffff
	}
	binary.BigEndian.PutUint16(frame[field:], c)
	return nil
}

// UDPSegments returns how many datagrams a UDP GSO super-frame holds, and
// the length of its headers (Ethernet through UDP).
func UDPSegments(frame []byte, h Hdr) (n, hdrLen int, err error) {
	l3, l4, ok := offsets(frame, h)
	if !ok || l4+8 > len(frame) || l3 >= l4 || h.GSOSize == 0 {
		return 0, 0, ErrMalformed
	}
	pay := len(frame) - (l4 + 8)
	g := int(h.GSOSize)
	return max(1, (pay+g-1)/g), l4 + 8, nil
}

// UDPSegment writes datagram i of a UDP GSO super-frame into dst, headers
// and all, and returns its length (dst must hold the headers and GSOSize
// payload bytes). IPv4 datagrams get identification id+i, as the kernel's
// segmentation numbers them; lengths and checksums are recomputed.
func UDPSegment(dst, frame []byte, h Hdr, i int) (int, error) {
	l3, l4, ok := offsets(frame, h)
	if !ok || l4+8 > len(frame) || h.GSOSize == 0 {
		return 0, ErrMalformed
	}
	g := int(h.GSOSize)
	from := l4 + 8 + i*g
	if from > len(frame) || (from == len(frame) && i > 0) {
		return 0, ErrMalformed
	}
	pay := frame[from:min(from+g, len(frame))]
	n := l4 + 8 + len(pay)
	if n > len(dst) {
		return 0, ErrMalformed
	}
	copy(dst, frame[:l4+8])
	copy(dst[l4+8:], pay)
	seg := dst[:n]
	l3h, udp := seg[l3:l4], inet.UDP(seg[l4:])
	ulen := inet.UDPHeaderLen + len(pay)
	udp.SetLength(uint16(ulen))
	var ps uint64
	switch l3h[0] >> 4 {
	case 4:
		ip := inet.IPv4(l3h)
		if ip.HeaderLen() != len(ip) {
			return 0, ErrMalformed // options or a header that does not end where UDP starts
		}
		ip.SetTotalLength(uint16(len(ip) + ulen))
		ip.SetID(ip.ID() + uint16(i))
		ip.SetChecksum(ip.CalculateChecksum())
		ps = ip.PseudoHeaderSum(ulen)
	case 6:
		ip := inet.IPv6(l3h)
		if len(ip) != inet.IPv6HeaderLen { // RoCEv2 sends no extension headers
			return 0, ErrMalformed
		}
		ip.SetPayloadLength(uint16(ulen))
		ps = ip.PseudoHeaderSum(ulen)
	default:
		return 0, ErrMalformed
	}
	udp.SetChecksum(udp.CalculateChecksum(ps))
	return n, nil
}

// offsets finds the IP and UDP headers: IP after the Ethernet header (and
// one VLAN tag), UDP where the checksum region starts.
func offsets(frame []byte, h Hdr) (l3, l4 int, ok bool) {
	if len(frame) < 14 {
		return 0, 0, false
	}
	l3 = 14
	if binary.BigEndian.Uint16(frame[12:]) == 0x8100 {
		l3 = 18
	}
	l4 = int(h.CsumStart)
	if h.Flags&FlagNeedsCsum == 0 || h.CsumOffset != 6 || l4 < l3+20 || l4 > len(frame) {
		return 0, 0, false
	}
	return l3, l4, true
}

// UDP finds the UDP header of an Ethernet frame holding an IPv4 (without
// options being required) or IPv6 (no extension headers) UDP datagram,
// after one optional VLAN tag. It returns the IP and UDP header offsets.
func UDP(frame []byte) (l3, l4 int, ok bool) {
	if len(frame) < 14 {
		return 0, 0, false
	}
	l3 = 14
	et := binary.BigEndian.Uint16(frame[12:])
	if et == 0x8100 && len(frame) >= 18 {
		l3, et = 18, binary.BigEndian.Uint16(frame[16:])
	}
	ip := frame[l3:]
	switch {
	case et == 0x0800 && len(ip) >= 20 && ip[0]>>4 == 4 && ip[0]&0xf >= 5 && ip[9] == 17 && binary.BigEndian.Uint16(ip[6:])&0x3fff == 0:
		// An IHL under 5 would put UDP inside the IPv4 header's 20 bytes.
		l4 = l3 + int(ip[0]&0xf)*4
	case et == 0x86dd && len(ip) >= 40 && ip[0]>>4 == 6 && ip[6] == 17:
		l4 = l3 + 40
	default:
		return 0, 0, false
	}
	if l4+8 > len(frame) {
		return 0, 0, false
	}
	return l3, l4, true
}

// FixUDPChecksum recomputes the UDP checksum of a frame UDP accepts, after
// its payload was changed; an IPv4 datagram sent without a checksum (0)
// keeps none. It reports whether the frame was a UDP datagram.
func FixUDPChecksum(frame []byte) bool {
	l3, l4, ok := UDP(frame)
	if !ok {
		return false
	}
	l3h, udp := frame[l3:l4], inet.UDP(frame[l4:])
	ulen := int(udp.Length())
	if ulen < inet.UDPHeaderLen || ulen > len(udp) {
		return false
	}
	udp = udp[:ulen]
	var ps uint64
	if l3h[0]>>4 == 4 {
		if udp.Checksum() == 0 {
			return true
		}
		ps = inet.IPv4(l3h).PseudoHeaderSum(ulen)
	} else {
		ps = inet.IPv6(l3h).PseudoHeaderSum(ulen)
	}
	udp.SetChecksum(udp.CalculateChecksum(ps))
	return true
}
