package testharness

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/nic/impair"
	"github.com/goroce/goroce/transport"
	"github.com/vishvananda/netlink"
)

// Family is the IP version the peers talk over.
type Family int

// The families.
const (
	IPv4 Family = iota
	IPv6
)

// String returns "ipv4" or "ipv6".
func (f Family) String() string {
	if f == IPv6 {
		return "ipv6"
	}
	return "ipv4"
}

// Addr returns e's address of family f.
func (f Family) Addr(e *netns.End) netip.Addr {
	if f == IPv6 {
		return e.IPv6
	}
	return e.IPv4
}

// Config chooses the topology.
type Config struct {
	// MTU is the veth MTU (VethMTU gives the one for an active MTU).
	MTU int
	// Impair, if set, joins A and B through a middle namespace whose
	// forwarder applies these faults (its A and B are filled in).
	Impair *impair.Config
	// Netem, if set, is installed on A's and B's veths (kernels that have
	// netem; see netns.NetemMissing).
	Netem *netlink.NetemQdiscAttrs
	// Offloads keeps the veths' transmit offloads (UDP segmentation) on.
	// By default A's and B's veths cut UDP GSO sends in software, as a
	// NIC without USO would: an AF_PACKET or AF_XDP peer cannot take a
	// super-frame (see nic's notes), and a UDP-link peer is indifferent.
	Offloads bool
}

// Net is a topology with its forwarder, if any.
type Net struct {
	*netns.Pair
	Fwd *impair.Forwarder // the impairing forwarder in the middle, or nil
}

// VethMTU is the veth MTU that makes a device's active MTU m (1024 to
// 4096) over IPv4 and IPv6 alike: the IPv6, UDP and largest transport
// headers fit beside an m-byte payload, and twice m does not. For 1024 it
// is Ethernet's 1500, as on an rxe host; IPv6 needs 1280 at least, so a
// smaller active MTU cannot be had from the interface.
func VethMTU(m transport.MTU) int { return max(1500, m.Bytes()+104) }

// NewNet builds the topology, starts the forwarder and makes both sides
// know each other's MAC (so the first RoCE packet of an Ethernet link is
// not dropped while the neighbour resolves). Everything is removed when t
// ends.
func NewNet(t testing.TB, cfg Config) *Net {
	t.Helper()
	n := &Net{Pair: netns.New(t, netns.Config{MTU: cfg.MTU, Middle: cfg.Impair != nil, Netem: cfg.Netem})}
	if cfg.Impair != nil {
		ic := *cfg.Impair
		ic.A, ic.B = n.M.ToA, n.M.ToB
		if err := n.M.Do(func() (err error) { n.Fwd, err = impair.Open(ic); return }); err != nil {
			t.Fatalf("impairing forwarder: %v", err)
		}
		t.Cleanup(func() { n.Fwd.Close() })
	}
	if !cfg.Offloads {
		for _, e := range []*netns.End{n.A, n.B} {
			if out, err := e.Run("ethtool", "-K", e.Link, "tx-udp-segmentation", "off"); err != nil {
				t.Fatalf("ethtool -K %s tx-udp-segmentation off: %v: %s", e.Link, err, out)
			}
		}
	}
	for _, f := range []Family{IPv4, IPv6} {
		if err := n.resolve(f); err != nil {
			t.Fatalf("%v between the namespaces: %v", f, err)
		}
	}
	return n
}

// resolve sends a datagram each way on a port no forwarder impairs, which
// leaves each side's neighbour table holding the other's MAC.
func (n *Net) resolve(f Family) error {
	var conns [2]*net.UDPConn
	for i, e := range []*netns.End{n.A, n.B} {
		if err := e.Do(func() (err error) {
			conns[i], err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(f.Addr(e), 9)))
			return
		}); err != nil {
			return err
		}
		defer conns[i].Close()
	}
	buf := make([]byte, 16)
	for i := range 2 {
		from, to := conns[i], conns[1-i]
		got := false
		for try := 0; try < 50 && !got; try++ {
			from.WriteTo(buf[:1], to.LocalAddr())
			to.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			_, err := to.Read(buf)
			got = err == nil
		}
		if !got {
			return fmt.Errorf("no datagram from %v to %v", from.LocalAddr(), to.LocalAddr())
		}
	}
	return nil
}
