package bth

import (
	"net/netip"

	"github.com/goroce/goroce/inet"
)

// Framing sizes and constants.
const (
	EthHeaderLen = 14
	VLANTagLen   = 4
	// UDPPort is the IANA port of RoCEv2 (Annex A17.2.2).
	UDPPort = 4791

	EtherTypeIPv4 = 0x0800
	EtherTypeIPv6 = 0x86dd
	EtherTypeVLAN = 0x8100
	EtherTypeQinQ = 0x88a8
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
	if f.IsIPv6() {
		return inet.IPv6(f.IP()).Src()
	}
	return inet.IPv4(f.IP()).Src()
}

// DstAddr returns the IP destination address.
func (f Frame) DstAddr() netip.Addr {
	if f.IsIPv6() {
		return inet.IPv6(f.IP()).Dst()
	}
	return inet.IPv4(f.IP()).Dst()
}

// UDP returns the UDP header.
func (f Frame) UDP() inet.UDP { return inet.UDP(f.b[f.udpOff:f.roceOff]) }

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
func DecodeEthernet(b []byte) (Frame, error) { return DecodeLink(LinkEthernet, b) }

// DecodeIP decodes an IP datagram (IPv4 or IPv6) carrying RoCEv2.
func DecodeIP(b []byte) (Frame, error) { return decodeIP(b, 0, true) }

// DecodeSealed decodes an IP datagram whose IP header this process wrote
// and nothing has since changed: one the engine sealed (nic.Frame.Sealed)
// that reached the caller through memory alone, or one whose headers a
// link rebuilt from what the kernel handed it. It makes the checks of
// DecodeIP but for the IPv4 header checksum, which the writer computed.
// Malformed bytes are still an error, never a panic.
func DecodeSealed(b []byte) (Frame, error) { return decodeIP(b, 0, false) }

// decodeIP checks what the datagram is (version, protocol, UDP destination
// port) before whether it is whole (lengths, checksum), so that a packet of
// another protocol cut short by a capture's snap length is reported as not
// RoCEv2 rather than as a broken RoCEv2 packet.
func decodeIP(b []byte, off int, sum bool) (Frame, error) {
	if len(b) < off+1 {
		return Frame{}, ErrTruncated
	}
	ip := b[off:]
	var hl, l3len int // IP header length, IP datagram length
	switch ip[0] >> 4 {
	case 4:
		if len(ip) < inet.IPv4HeaderLen {
			return Frame{}, ErrTruncated
		}
		h := inet.IPv4(ip)
		hl = h.HeaderLen()
		if hl < inet.IPv4HeaderLen || hl > len(ip) {
			return Frame{}, ErrIPHeaderLength
		}
		if h.Protocol() != inet.ProtoUDP {
			return Frame{}, ErrNotUDP
		}
		if h.IsFragment() {
			return Frame{}, ErrIPFragment
		}
		l3len = int(h.TotalLength())
		if l3len < hl {
			return Frame{}, ErrIPLength
		}
	case 6:
		if len(ip) < inet.IPv6HeaderLen {
			return Frame{}, ErrTruncated
		}
		h := inet.IPv6(ip)
		if h.NextHeader() != inet.ProtoUDP { // RoCEv2 peers send no extension headers
			return Frame{}, ErrNotUDP
		}
		hl = inet.IPv6HeaderLen
		l3len = inet.IPv6HeaderLen + int(h.PayloadLength())
	default:
		return Frame{}, ErrIPVersion
	}
	if len(ip) < hl+4 || l3len < hl+4 {
		return Frame{}, ErrTruncated
	}
	u := inet.UDP(ip[hl:])
	if u.DstPort() != UDPPort {
		return Frame{}, ErrNotRoCEv2
	}
	if l3len > len(ip) {
		return Frame{}, ErrIPLength
	}
	// The ICRC leaves the header checksum out, so check it here as the
	// kernel's IP layer would before handing the datagram on.
	if sum && ip[0]>>4 == 4 && !inet.IPv4(ip).IsChecksumValid() {
		return Frame{}, ErrIPChecksum
	}
	if l3len-hl < inet.UDPHeaderLen {
		return Frame{}, ErrTruncated
	}
	if int(u.Length()) != l3len-hl {
		return Frame{}, ErrUDPLength
	}
	f := Frame{b: b, ipOff: off, udpOff: off + hl, roceOff: off + hl + inet.UDPHeaderLen, end: off + l3len, link: LinkRaw}
	if f.end-f.roceOff < BTHLen+ICRCLen {
		return Frame{}, ErrTruncated
	}
	return f, nil
}
