package linkio

import (
	"net/netip"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/inet"
)

// IPDst reads the destination, datagram length and EtherType of an IP
// datagram.
func IPDst(dg []byte) (netip.Addr, int, uint16, bool) {
	if len(dg) < inet.IPv4HeaderLen {
		return netip.Addr{}, 0, 0, false
	}
	switch dg[0] >> 4 {
	case 4:
		ip := inet.IPv4(dg)
		tot := int(ip.TotalLength())
		if tot < inet.IPv4HeaderLen || tot > len(dg) {
			return netip.Addr{}, 0, 0, false
		}
		return ip.Dst(), tot, bth.EtherTypeIPv4, true
	case 6:
		if len(dg) < inet.IPv6HeaderLen {
			return netip.Addr{}, 0, 0, false
		}
		ip := inet.IPv6(dg)
		tot := inet.IPv6HeaderLen + int(ip.PayloadLength())
		if tot > len(dg) {
			return netip.Addr{}, 0, 0, false
		}
		return ip.Dst(), tot, bth.EtherTypeIPv6, true
	}
	return netip.Addr{}, 0, 0, false
}
