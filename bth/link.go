package bth

import "encoding/binary"

// LinkType is a capture file's link-layer header type (the LINKTYPE_
// numbers pcap and pcapng files record). Captures of RoCEv2 traffic come in
// these: Ethernet from a NIC or veth, raw IP from tun devices, and Linux
// cooked headers from tcpdump -i any.
type LinkType uint32

// Link types DecodeLink understands.
const (
	LinkEthernet  LinkType = 1   // LINKTYPE_ETHERNET
	LinkRaw       LinkType = 101 // LINKTYPE_RAW: IPv4 or IPv6, by the version nibble
	LinkLinuxSLL  LinkType = 113 // LINKTYPE_LINUX_SLL: 16-byte cooked header
	LinkIPv4      LinkType = 228 // LINKTYPE_IPV4
	LinkIPv6      LinkType = 229 // LINKTYPE_IPV6
	LinkLinuxSLL2 LinkType = 276 // LINKTYPE_LINUX_SLL2: 20-byte cooked header
)

// Cooked-capture header sizes.
const (
	SLLHeaderLen  = 16
	SLL2HeaderLen = 20
)

// DecodeLink decodes a captured frame of link type lt carrying RoCEv2.
// For the cooked and raw link types the frame's link-layer header (what
// Frame.Ethernet returns) is the cooked header or empty. An unknown link
// type gives ErrLinkType. Like DecodeEthernet it never allocates.
func DecodeLink(lt LinkType, b []byte) (Frame, error) {
	var et uint16
	off := 0
	switch lt {
	case LinkEthernet:
		return DecodeEthernet(b)
	case LinkRaw:
		return DecodeIP(b)
	case LinkIPv4:
		et = EtherTypeIPv4
	case LinkIPv6:
		et = EtherTypeIPv6
	case LinkLinuxSLL:
		if len(b) < SLLHeaderLen {
			return Frame{}, ErrTruncated
		}
		et, off = binary.BigEndian.Uint16(b[14:]), SLLHeaderLen
	case LinkLinuxSLL2:
		if len(b) < SLL2HeaderLen {
			return Frame{}, ErrTruncated
		}
		et, off = binary.BigEndian.Uint16(b), SLL2HeaderLen
	default:
		return Frame{}, ErrLinkType
	}
	f, err := decodeTyped(b, off, et)
	if err != nil {
		return Frame{}, err
	}
	f.link = lt
	return f, nil
}

// decodeTyped decodes the IP datagram at b[off:] that a link header with
// EtherType et announced, checking that its version agrees.
func decodeTyped(b []byte, off int, et uint16) (Frame, error) {
	if et != EtherTypeIPv4 && et != EtherTypeIPv6 {
		return Frame{}, ErrNotIP
	}
	f, err := decodeIP(b, off, true)
	if err == nil && (et == EtherTypeIPv6) != f.IsIPv6() {
		return Frame{}, ErrIPVersion
	}
	return f, err
}
