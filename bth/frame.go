package bth

import (
	"encoding/binary"
	"net/netip"
)

// Framing sizes and constants.
const (
	EthHeaderLen  = 14
	VLANTagLen    = 4
	IPv4HeaderLen = 20
	IPv6HeaderLen = 40
	UDPHeaderLen  = 8
	// UDPPort is the IANA port of RoCEv2 (Annex A17.2.2).
	UDPPort = 4791

	EtherTypeIPv4 = 0x0800
	EtherTypeIPv6 = 0x86dd
	EtherTypeVLAN = 0x8100
	EtherTypeQinQ = 0x88a8
	IPProtoUDP    = 17
)

// Frame is a decoded RoCEv2 frame: offsets of its Ethernet, IP, UDP and
// transport parts within one buffer. The IP header through the ICRC is
// contiguous (L3).
type Frame struct {
	b       []byte
	ipOff   int // 0 when the frame starts at the IP header
	udpOff  int
	roceOff int
	end     int // end of the IP datagram (Ethernet padding excluded)
	link    LinkType
}

// LinkType returns the link type the frame was decoded as: LinkEthernet
// from DecodeEthernet, LinkRaw from DecodeIP, or DecodeLink's argument.
func (f Frame) LinkType() LinkType { return f.link }

// Ethernet returns the link-layer header: the Ethernet header with any VLAN
// tags, a capture's Linux cooked header (DecodeLink), or nothing when the
// frame starts at the IP header.
func (f Frame) Ethernet() []byte { return f.b[:f.ipOff] }

// IP returns the IPv4 (with options) or IPv6 header.
func (f Frame) IP() []byte { return f.b[f.ipOff:f.udpOff] }

// IsIPv6 reports whether the frame is carried over IPv6.
func (f Frame) IsIPv6() bool { return f.b[f.ipOff]>>4 == 6 }

// SrcAddr returns the IP source address.
func (f Frame) SrcAddr() netip.Addr {
	ip := f.IP()
	if f.IsIPv6() {
		return netip.AddrFrom16([16]byte(ip[8:24]))
	}
	return netip.AddrFrom4([4]byte(ip[12:16]))
}

// DstAddr returns the IP destination address.
func (f Frame) DstAddr() netip.Addr {
	ip := f.IP()
	if f.IsIPv6() {
		return netip.AddrFrom16([16]byte(ip[24:40]))
	}
	return netip.AddrFrom4([4]byte(ip[16:20]))
}

// UDP returns the UDP header.
func (f Frame) UDP() UDP { return UDP(f.b[f.udpOff:f.roceOff]) }

// RoCE returns the transport bytes: BTH through ICRC.
func (f Frame) RoCE() []byte { return f.b[f.roceOff:f.end] }

// L3 returns the IP datagram: IP header through ICRC.
func (f Frame) L3() []byte { return f.b[f.ipOff:f.end] }

// Bytes returns the frame as decoded, from the first byte to the end of the
// IP datagram (trailing Ethernet padding excluded).
func (f Frame) Bytes() []byte { return f.b[:f.end] }

// ComputeICRC computes the ICRC the frame should carry.
func (f Frame) ComputeICRC() uint32 {
	r := f.RoCE()
	return ICRC(f.IP(), f.UDP(), r[:len(r)-ICRCLen])
}

// StoredICRC returns the ICRC the frame carries.
func (f Frame) StoredICRC() uint32 { return getICRC(f.b[f.end-ICRCLen:]) }

// VerifyICRC reports whether the stored ICRC matches the computed one.
func (f Frame) VerifyICRC() bool { return f.ComputeICRC() == f.StoredICRC() }

// CheckICRC returns ErrICRC when the stored ICRC does not match, else nil.
func (f Frame) CheckICRC() error {
	if !f.VerifyICRC() {
		return ErrICRC
	}
	return nil
}

// PutICRC computes the ICRC and stores it in the frame's last 4 bytes.
func (f Frame) PutICRC() { putICRC(f.b[f.end-ICRCLen:], f.ComputeICRC()) }

// DecodeEthernet decodes an Ethernet frame (with up to two 802.1Q/802.1ad
// tags) carrying RoCEv2 over IPv4 or IPv6.
func DecodeEthernet(b []byte) (Frame, error) {
	if len(b) < EthHeaderLen {
		return Frame{}, ErrTruncated
	}
	off := 12
	et := binary.BigEndian.Uint16(b[off:])
	for tags := 0; (et == EtherTypeVLAN || et == EtherTypeQinQ) && tags < 2; tags++ {
		off += VLANTagLen
		if len(b) < off+2 {
			return Frame{}, ErrTruncated
		}
		et = binary.BigEndian.Uint16(b[off:])
	}
	f, err := decodeTyped(b, off+2, et)
	if err != nil {
		return Frame{}, err
	}
	f.link = LinkEthernet
	return f, nil
}

// DecodeIP decodes an IP datagram (IPv4 or IPv6) carrying RoCEv2.
func DecodeIP(b []byte) (Frame, error) { return decodeIP(b, 0) }

// decodeIP checks what the datagram is (version, protocol, UDP destination
// port) before whether it is whole (lengths, checksum), so that a packet of
// another protocol cut short by a capture's snap length is reported as not
// RoCEv2 rather than as a broken RoCEv2 packet.
func decodeIP(b []byte, off int) (Frame, error) {
	if len(b) < off+1 {
		return Frame{}, ErrTruncated
	}
	ip := b[off:]
	var hl, l3len int // IP header length, IP datagram length
	switch ip[0] >> 4 {
	case 4:
		if len(ip) < IPv4HeaderLen {
			return Frame{}, ErrTruncated
		}
		hl = int(ip[0]&0x0f) * 4
		if hl < IPv4HeaderLen || hl > len(ip) {
			return Frame{}, ErrIPHeaderLength
		}
		if ip[9] != IPProtoUDP {
			return Frame{}, ErrNotUDP
		}
		if binary.BigEndian.Uint16(ip[6:])&0x3fff != 0 { // MF or fragment offset
			return Frame{}, ErrIPFragment
		}
		l3len = int(binary.BigEndian.Uint16(ip[2:]))
		if l3len < hl {
			return Frame{}, ErrIPLength
		}
	case 6:
		if len(ip) < IPv6HeaderLen {
			return Frame{}, ErrTruncated
		}
		if ip[6] != IPProtoUDP { // RoCEv2 peers send no extension headers
			return Frame{}, ErrNotUDP
		}
		hl = IPv6HeaderLen
		l3len = IPv6HeaderLen + int(binary.BigEndian.Uint16(ip[4:]))
	default:
		return Frame{}, ErrIPVersion
	}
	if len(ip) < hl+4 || l3len < hl+4 {
		return Frame{}, ErrTruncated
	}
	u := UDP(ip[hl:])
	if u.DstPort() != UDPPort {
		return Frame{}, ErrNotRoCEv2
	}
	if l3len > len(ip) {
		return Frame{}, ErrIPLength
	}
	// The ICRC leaves the header checksum out, so check it here as the
	// kernel's IP layer would before handing the datagram on.
	if ip[0]>>4 == 4 {
		if IPv4Checksum(ip) != binary.BigEndian.Uint16(ip[10:]) {
			return Frame{}, ErrIPChecksum
		}
	}
	if l3len-hl < UDPHeaderLen {
		return Frame{}, ErrTruncated
	}
	if int(u.Length()) != l3len-hl {
		return Frame{}, ErrUDPLength
	}
	f := Frame{b: b, ipOff: off, udpOff: off + hl, roceOff: off + hl + UDPHeaderLen, end: off + l3len, link: LinkRaw}
	if f.end-f.roceOff < BTHLen+ICRCLen {
		return Frame{}, ErrTruncated
	}
	return f, nil
}

// UDP is a view of a UDP header.
type UDP []byte

// SrcPort returns the source port.
func (u UDP) SrcPort() uint16 { return binary.BigEndian.Uint16(u) }

// DstPort returns the destination port (4791 for RoCEv2).
func (u UDP) DstPort() uint16 { return binary.BigEndian.Uint16(u[2:]) }

// Length returns the UDP length: header and payload, in bytes.
func (u UDP) Length() uint16 { return binary.BigEndian.Uint16(u[4:]) }

// Checksum returns the checksum (0: none, which RoCEv2 over IPv4 allows).
func (u UDP) Checksum() uint16 { return binary.BigEndian.Uint16(u[6:]) }

// SetSrcPort sets the source port.
func (u UDP) SetSrcPort(p uint16) { binary.BigEndian.PutUint16(u, p) }

// SetDstPort sets the destination port.
func (u UDP) SetDstPort(p uint16) { binary.BigEndian.PutUint16(u[2:], p) }

// SetLength sets the UDP length.
func (u UDP) SetLength(n uint16) { binary.BigEndian.PutUint16(u[4:], n) }

// SetChecksum sets the checksum.
func (u UDP) SetChecksum(c uint16) { binary.BigEndian.PutUint16(u[6:], c) }
