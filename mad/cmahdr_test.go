package mad

import (
	"errors"
	"net/netip"
	"testing"
)

// TestCMAHdrIPv6: an IPv6 header keeps whole 16-byte addresses; IPv4-mapped
// addresses are written as IPv4 (pad[3] + address), as cma.c writes them.
func TestCMAHdrIPv6(t *testing.T) {
	p := make([]byte, REQPrivateDataLen)
	h := CMAHdr(p[:CMAHdrLen])
	src, dst := netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("fe80::2")
	if err := h.SetAddrs(src, dst); err != nil {
		t.Fatal(err)
	}
	h.SetPort(0xbeef)
	g, err := ParseCMAHdr(p)
	if err != nil {
		t.Fatal(err)
	}
	if g.IPVersion() != 6 || g.SrcAddr() != src || g.DstAddr() != dst || g.Port() != 0xbeef || p[1] != 0x60 {
		t.Errorf("read back %d %v %v %#x", g.IPVersion(), g.SrcAddr(), g.DstAddr(), g.Port())
	}
	// Going back to IPv4 clears the pad the IPv6 addresses left.
	if err := h.SetAddrs(netip.MustParseAddr("::ffff:192.0.2.1"), netip.MustParseAddr("192.0.2.2")); err != nil {
		t.Fatal(err)
	}
	want := [16]byte{12: 192, 13: 0, 14: 2, 15: 1}
	if [16]byte(p[4:20]) != want || p[1] != 0x40 || h.SrcAddr() != netip.MustParseAddr("192.0.2.1") {
		t.Errorf("IPv4 source field % x", p[4:20])
	}
	// Beside a true IPv6 address an IPv4-mapped one stays IPv6: a header
	// of IP version 6 may carry one, and it is read and written back
	// unchanged (found by FuzzParse: "::" and ::ffff:255.255.255.255).
	mapped := netip.MustParseAddr("::ffff:255.255.255.255")
	if err := h.SetAddrs(netip.IPv6Unspecified(), mapped); err != nil {
		t.Fatal(err)
	}
	if p[1] != 0x60 || h.SrcAddr() != netip.IPv6Unspecified() || h.DstAddr() != mapped {
		t.Errorf("IP version %d, %v and %v", h.IPVersion(), h.SrcAddr(), h.DstAddr())
	}
}

func TestCMAHdrErrors(t *testing.T) {
	if _, err := ParseCMAHdr(make([]byte, 35)); !errors.Is(err, ErrCMAHdr) {
		t.Errorf("35 bytes: %v", err)
	}
	p := make([]byte, 36)
	p[1] = 0x50
	if _, err := ParseCMAHdr(p); !errors.Is(err, ErrCMAHdr) {
		t.Errorf("IP version 5: %v", err)
	}
	h := CMAHdr(p)
	if err := h.SetAddrs(netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")); !errors.Is(err, ErrCMAHdr) {
		t.Errorf("mixed families: %v", err)
	}
	if err := h.SetAddrs(netip.Addr{}, netip.MustParseAddr("192.0.2.1")); !errors.Is(err, ErrCMAHdr) {
		t.Errorf("invalid address: %v", err)
	}
}

// TestServiceID: (port space << 16) | port, as cma.c's cma_get_service_id;
// the captures' 0x1061c06 is rping's port 7174 in the TCP port space.
func TestServiceID(t *testing.T) {
	for _, c := range []struct {
		ps   PortSpace
		port uint16
		id   uint64
	}{
		{PortSpaceTCP, 7174, 0x0000000001061c06},
		{PortSpaceUDP, 18515, 0x0000000001114853},
		{PortSpaceIB, 1, 0x00000000013f0001},
		{PortSpaceIPoIB, 0xffff, 0x000000000002ffff},
	} {
		if got := ServiceID(c.ps, c.port); got != c.id {
			t.Errorf("ServiceID(%#x, %d) = %#x, want %#x", uint16(c.ps), c.port, got, c.id)
		}
		if ps, port, ok := SplitServiceID(c.id); !ok || ps != c.ps || port != c.port {
			t.Errorf("SplitServiceID(%#x) = %#x %d %v", c.id, uint16(ps), port, ok)
		}
	}
	for _, id := range []uint64{0x0000000001071c06, 0x1000000001061c06, 0} {
		if _, _, ok := SplitServiceID(id); ok {
			t.Errorf("%#x split as an rdma_cm service ID", id)
		}
	}
}

// TestPortSpaceString: each port space by its rdma_cma.h name, any other
// value in hex.
func TestPortSpaceString(t *testing.T) {
	for ps, want := range map[PortSpace]string{PortSpaceTCP: "TCP", PortSpaceUDP: "UDP", PortSpaceIPoIB: "IPOIB", PortSpaceIB: "IB", 0x0107: "0x0107"} {
		if got := ps.String(); got != want {
			t.Errorf("PortSpace(%#04x).String() = %q, want %q", uint16(ps), got, want)
		}
	}
}
