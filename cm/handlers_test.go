package cm

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/mad"
)

// TestTakes checks which requests a listener takes by its bound address:
// the header's destination decides (cma_match_private_data), except for
// a loopback address no device holds, which the kernel binds to no
// device and which only this host's own connections reach.
func TestTakes(t *testing.T) {
	a := netip.MustParseAddr
	dev, other := a("192.0.2.1"), a("192.0.2.2")
	self := peer{local: dev, remote: dev}
	remote := peer{local: dev, remote: other}
	for _, c := range []struct {
		bound, dst netip.Addr
		from       peer
		want       bool
	}{
		{netip.Addr{}, dev, remote, true},    // never bound
		{a("0.0.0.0"), dev, remote, true},    // wildcard
		{a("::"), dev, remote, true},         // wildcard, IPv6
		{dev, dev, remote, true},             // the header names it
		{dev, a("192.0.2.9"), remote, false}, // another address
		{a("127.0.0.1"), dev, self, true},    // this host's own connection
		{a("::1"), dev, self, true},          // the same, IPv6 listener
		{a("127.0.0.1"), dev, remote, false}, // another host cannot reach it
		{a("127.0.77.1"), a("127.0.77.1"), peer{local: a("127.0.77.1"), remote: a("127.0.77.2")}, true}, // a device on loopback
		{a("127.0.77.1"), a("127.0.77.3"), peer{local: a("127.0.77.1"), remote: a("127.0.77.2")}, false},
	} {
		hdr := make(mad.CMAHdr, mad.CMAHdrLen)
		src := c.from.remote
		if src.Is4() != c.dst.Is4() {
			t.Fatalf("bad case %+v", c)
		}
		if err := hdr.SetAddrs(src, c.dst); err != nil {
			t.Fatal(err)
		}
		if got := takes(c.bound, hdr, c.from); got != c.want {
			t.Errorf("listener on %v, header to %v, from %v: takes %v, want %v", c.bound, c.dst, c.from.remote, got, c.want)
		}
	}
}
