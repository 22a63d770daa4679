// Package testharness is the engine's test harness: it runs goroce
// devices across real links between network namespaces, for tests and
// benchmarks: it builds the topology (a veth pair, or two through a
// middle namespace with an impairing forwarder),
// opens a link of each kind inside a namespace, a device over it and
// connected RC, UC or UD queue pairs, and checks that every byte and every
// completion of an exchange is right.
//
// Like internal/netns it needs root; without it the test fails saying so,
// and -short skips it.
package testharness

import (
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/afpacket"
	"github.com/goroce/goroce/nic/afxdp"
	"github.com/goroce/goroce/nic/udp"
)

// Kind is a kind of link.
type Kind int

// The links goroce has that run over an Ethernet interface.
const (
	UDP          Kind = iota // kernel UDP sockets (sendmmsg/recvmmsg, GSO/GRO)
	AFPacket                 // AF_PACKET sockets
	AFXDPGeneric             // AF_XDP, XDP program in generic (SKB) mode
	AFXDPNative              // AF_XDP, XDP program in the veth driver
	// UDPQueues is the UDP link with two receive queues (nic.MultiQueue):
	// the device receives and runs QPs on two goroutines. Not in Kinds:
	// its own tests run it.
	UDPQueues
	// UDPNoGSO is the UDP link with GSO and GRO off: one datagram per
	// packet each way, the path raw sendmmsg/recvmmsg measures. Not in
	// Kinds: a benchmark compares it with that path.
	UDPNoGSO
)

// Kinds lists every kind.
var Kinds = []Kind{UDP, AFPacket, AFXDPGeneric, AFXDPNative}

// String returns the kind's name as --link and test names spell it.
func (k Kind) String() string {
	switch k {
	case UDP:
		return "udp"
	case AFPacket:
		return "afpacket"
	case AFXDPGeneric:
		return "afxdp-generic"
	case AFXDPNative:
		return "afxdp-native"
	case UDPQueues:
		return "udp-2queues"
	case UDPNoGSO:
		return "udp-nogso"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// OpenLink opens a link of kind k on e's veth inside e's namespace,
// answering for addr alone (so the device's GID table is the link-local
// GID, if the link has a MAC, and addr).
func OpenLink(k Kind, e *netns.End, addr netip.Addr) (nic.Link, error) {
	var l nic.Link
	err := e.Do(func() (err error) {
		switch k {
		case UDP, UDPQueues, UDPNoGSO:
			if addr.IsLinkLocalUnicast() {
				addr = addr.WithZone(e.Link)
			}
			cfg := udp.Config{Addr: addr}
			switch k {
			case UDPQueues:
				cfg.RxQueues = 2
			case UDPNoGSO:
				cfg.NoGSO, cfg.NoGRO = true, true
			}
			l, err = udp.Open(cfg)
		case AFPacket:
			l, err = afpacket.Open(afpacket.Config{Interface: e.Link, Addrs: []netip.Addr{addr}})
		case AFXDPGeneric, AFXDPNative:
			l, err = afxdp.Open(afxdp.Config{Interface: e.Link, Addrs: []netip.Addr{addr}, Native: k == AFXDPNative})
		default:
			err = fmt.Errorf("testharness: no link kind %v", k)
		}
		return
	})
	if err != nil {
		return nil, fmt.Errorf("open %v link on %s (%v): %w", k, e.Link, addr, err)
	}
	return l, nil
}
