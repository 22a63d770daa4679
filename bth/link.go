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
	if lt == LinkRaw {
		return DecodeIP(b)
	}
	off, et, err := LinkHeader(lt, b)
	if err != nil {
		return Frame{}, err
	}
	f, err := decodeTyped(b, off, et)
	if err != nil {
		return Frame{}, err
	}
	f.link = lt
	return f, nil
}

// LinkHeader walks the link-layer header of a captured frame of link type
// lt: where the IP datagram starts and the EtherType announcing it (for
// LinkRaw, 0: the version nibble says). It reads no further, so a capture
// cut short after its headers (tcpdump -s) still yields them; DecodeLink
// checks the rest.
func LinkHeader(lt LinkType, b []byte) (off int, et uint16, err error) {
	switch lt {
	case LinkEthernet:
		if len(b) < EthHeaderLen {
			return 0, 0, ErrTruncated
		}
		off = 12
		et = binary.BigEndian.Uint16(b[off:])
		for tags := 0; (et == EtherTypeVLAN || et == EtherTypeQinQ) && tags < 2; tags++ {
			off += VLANTagLen
			if len(b) < off+2 {
				return 0, 0, ErrTruncated
			}
			et = binary.BigEndian.Uint16(b[off:])
		}
		return off + 2, et, nil
	case LinkRaw:
		return 0, 0, nil
	case LinkIPv4:
		return 0, EtherTypeIPv4, nil
	case LinkIPv6:
		return 0, EtherTypeIPv6, nil
	case LinkLinuxSLL:
		if len(b) < SLLHeaderLen {
			return 0, 0, ErrTruncated
		}
		return SLLHeaderLen, binary.BigEndian.Uint16(b[14:]), nil
	case LinkLinuxSLL2:
		if len(b) < SLL2HeaderLen {
			return 0, 0, ErrTruncated
		}
		return SLL2HeaderLen, binary.BigEndian.Uint16(b), nil
	}
	return 0, 0, ErrLinkType
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
