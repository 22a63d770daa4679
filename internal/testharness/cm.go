package testharness

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

// CMNode attaches a device at addr to an in-memory network and starts its
// connection manager: one end of a test of a tool that connects through
// the RDMA CM. Both close when the test ends.
func CMNode(tb testing.TB, net *mem.Net, addr string) (*transport.Device, *cm.Manager) {
	tb.Helper()
	l, err := net.Attach(netip.MustParseAddr(addr), mem.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	dev, err := transport.Open(l, transport.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { dev.Close() })
	m, err := cm.New(dev, cm.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	return dev, m
}
