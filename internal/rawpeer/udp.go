package rawpeer

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/nic/udp"
)

// UDPLinks opens, for a test, the udp links of two ends on loopback
// addresses a and b (port 4791 on each), closed when the test ends. A
// Peer on one sends only from its ports: give New the link's SrcPort.
func UDPLinks(tb testing.TB, a, b netip.Addr) (la, lb *udp.Link) {
	tb.Helper()
	la, err := udp.Open(udp.Config{Addr: a})
	if err != nil {
		tb.Fatal(err)
	}
	lb, err = udp.Open(udp.Config{Addr: b})
	if err != nil {
		la.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() { la.Close(); lb.Close() })
	return la, lb
}
