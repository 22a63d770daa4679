package netdev

import (
	"net"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/netns"
)

// TestGIDTableLab reproduces the rxe lab's table: rxe0 on eth0 with MAC
// 52:54:00:52:78:65 and 192.0.2.2 lists fe80::5054:ff:fe52:7865 at 0 and
// ::ffff:192.0.2.2 at 1; a global IPv6 address comes next (index 2), and
// the EUI-64 link-local address is not listed twice.
func TestGIDTableLab(t *testing.T) {
	mac, _ := net.ParseMAC("52:54:00:52:78:65")
	v4 := []netip.Addr{netip.MustParseAddr("192.0.2.2")}
	v6 := []netip.Addr{netip.MustParseAddr("2001:db8::2"), netip.MustParseAddr("fe80::5054:ff:fe52:7865")}
	tab := GIDTableFrom("eth0", mac, v4, v6)
	want := []string{"fe80::5054:ff:fe52:7865", "::ffff:192.0.2.2", "2001:db8::2"}
	if len(tab) != len(want) {
		t.Fatalf("table %v", tab)
	}
	for i, w := range want {
		if tab[i].String() != w || tab[i].Index != i || tab[i].Netdev != "eth0" {
			t.Fatalf("GID[%d] = %v, want %s", i, tab[i], w)
		}
	}
	if tab[1].Addr != netip.MustParseAddr("192.0.2.2") {
		t.Fatalf("IPv4 GID stands for %v", tab[1].Addr)
	}
	// A link-local address not made from the MAC (stable privacy) is a GID
	// of its own.
	tab = GIDTableFrom("eth0", mac, nil, []netip.Addr{netip.MustParseAddr("fe80::1234")})
	if len(tab) != 2 || tab[1].String() != "fe80::1234" {
		t.Fatalf("table %v", tab)
	}
	// No MAC, loopback's all-zero one, a group address: no default GID,
	// but its slot stays reserved (the kernel's gid_table_reserve_default),
	// so the IPv4 address is still index 1.
	for _, m := range []string{"", "00:00:00:00:00:00", "01:00:5e:00:00:01"} {
		mac, _ := net.ParseMAC(m)
		tab := GIDTableFrom("x", mac, v4, nil)
		if len(tab) != 2 || !tab[0].Empty() || tab[0].GID != ([16]byte{}) || tab[1].Empty() || tab[1].String() != "::ffff:192.0.2.2" || tab[1].Index != 1 {
			t.Fatalf("MAC %q: table %v", m, tab)
		}
	}
	if _, ok := DefaultGID(net.HardwareAddr{0, 0, 0, 0, 0, 0}); ok {
		t.Fatal("a GID from the all-zero MAC")
	}
}

// TestGIDTableVeth reads a real interface inside a namespace: the default
// GID matches the kernel's own EUI-64 link-local address.
func TestGIDTableVeth(t *testing.T) {
	p := netns.New(t, netns.Config{MTU: 1500})
	var tab []GID
	if err := p.A.Do(func() (err error) { tab, err = GIDTable(p.A.Link); return }); err != nil {
		t.Fatal(err)
	}
	if len(tab) != 3 || netip.AddrFrom16(tab[0].GID) != p.A.LL || tab[1].Addr != p.A.IPv4 || tab[2].Addr != p.A.IPv6 {
		t.Fatalf("table %v; want %v %v %v", tab, p.A.LL, p.A.IPv4, p.A.IPv6)
	}
}
