// Package netdev reads what goroce needs to know about a Linux network
// interface through netlink: its GID table, indexed as rxe indexes it,
// the interface holding an address, and the MAC of the next hop towards
// a destination, for the links that write their own Ethernet headers.
package netdev

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/goroce/goroce/nic/internal/linkio"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The GID table, indexed as Linux indexes an rxe device's (and, for the
// RoCE v2 entries, an HCA's) so that "-g N" names the same address on
// goroce as on rxe. What decides the order (drivers/infiniband/core/
// roce_gid_mgmt.c, cache.c):
//
//   - index 0 is the default GID: fe80::/64 with the EUI-64 interface
//     identifier made from the MAC (make_default_gid). rxe offers only
//     RoCE v2, so it is one entry; an HCA offering v1 too lists it twice
//     (v1 then v2) and every later address twice as well, so HCA indexes
//     differ from these. The kernel reserves the slot whether or not the
//     MAC makes a usable GID (cache.c, gid_table_reserve_default), so the
//     IPv4 addresses start at index 1 on every device. Where the MAC
//     makes none (loopback's all-zero one, a multicast one, none at all)
//     the slot is left empty here rather than filled with a link-local
//     address nobody holds and no socket can bind.
//   - then the netdev's IPv4 addresses (enum_netdev_ipv4_ips), in the
//     order of its address list, as IPv4-mapped GIDs;
//   - then its IPv6 addresses (enum_netdev_ipv6_ips), in list order. An
//     address equal to a GID already present (the EUI-64 link-local one is
//     the default GID) is not added again (cache.c finds it).
//
// Netlink dumps both address lists in the kernel's list order, so reading
// them gives the order a freshly created rxe would see. Addresses added
// and removed later fill free slots in rxe; this table always reflects the
// current list, as if the device had just been created.

// GID is one entry of a GID table.
type GID struct {
	Index  int        // the entry's index, what -g / SGIDIndex name
	GID    [16]byte   // the GID: an IPv6 or IPv4-mapped address; zero in an empty slot
	Addr   netip.Addr // the IP address the GID stands for; invalid: an empty slot
	Netdev string     // the interface the address is on
}

// Empty reports whether the entry is a reserved slot with no GID (the
// default GID of an interface whose MAC makes none).
func (g GID) Empty() bool { return !g.Addr.IsValid() }

// String formats the GID as ibv_devinfo does (inet_ntop).
func (g GID) String() string { return netip.AddrFrom16(g.GID).String() }

// DefaultGID returns the link-local GID made from a 6-byte MAC: fe80::/64
// and the modified EUI-64 identifier (universal/local bit flipped, ff:fe
// in the middle). A MAC that names no single station (all zeros, as
// loopback's; a group address) makes no GID.
func DefaultGID(mac net.HardwareAddr) ([16]byte, bool) {
	var g [16]byte
	if len(mac) != 6 || mac[0]&0x01 != 0 || [6]byte(mac) == [6]byte{} {
		return g, false
	}
	g[0], g[1] = 0xfe, 0x80
	g[8], g[9], g[10] = mac[0]^0x02, mac[1], mac[2]
	g[11], g[12] = 0xff, 0xfe
	g[13], g[14], g[15] = mac[3], mac[4], mac[5]
	return g, true
}

// GIDTableFrom builds the table for a netdev with the given MAC and
// address lists (each in the kernel's order). Index 0 is always the
// default GID's slot, empty when the MAC makes none.
func GIDTableFrom(netdev string, mac net.HardwareAddr, v4, v6 []netip.Addr) []GID {
	t := []GID{{Index: 0, Netdev: netdev}}
	if g, ok := DefaultGID(mac); ok {
		t[0].GID, t[0].Addr = g, netip.AddrFrom16(g)
	}
	add := func(g [16]byte) {
		for _, e := range t {
			if !e.Empty() && e.GID == g {
				return
			}
		}
		t = append(t, GID{Index: len(t), GID: g, Addr: netip.AddrFrom16(g).Unmap(), Netdev: netdev})
	}
	for _, a := range v4 {
		if a.Unmap().Is4() {
			add(a.Unmap().As16())
		}
	}
	for _, a := range v6 {
		if a.Is6() && !a.Is4In6() {
			add(a.WithZone("").As16())
		}
	}
	return t
}

// GIDTable reads an interface's addresses through netlink and builds its
// table. Tentative IPv6 addresses (DAD not finished) are left out: the
// kernel announces an IPv6 address to the GID code only once it is usable.
func GIDTable(netdev string) ([]GID, error) {
	l, err := netlink.LinkByName(netdev)
	if err != nil {
		return nil, fmt.Errorf("gid: %s: %w", netdev, err)
	}
	var v4, v6 []netip.Addr
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		addrs, err := netlink.AddrList(l, fam)
		if err != nil {
			return nil, fmt.Errorf("gid: %s addresses: %w", netdev, err)
		}
		for _, a := range addrs {
			ip, ok := netip.AddrFromSlice(a.IP)
			if !ok || a.Flags&unix.IFA_F_TENTATIVE != 0 {
				continue
			}
			if fam == netlink.FAMILY_V4 {
				v4 = append(v4, ip.Unmap())
			} else {
				v6 = append(v6, ip)
			}
		}
	}
	return GIDTableFrom(netdev, l.Attrs().HardwareAddr, v4, v6), nil
}

// Of returns the name of the interface holding address a.
func Of(a netip.Addr) (string, error) {
	ifc := linkio.InterfaceOf(a)
	if ifc == nil {
		return "", fmt.Errorf("gid: no interface has address %v", a)
	}
	return ifc.Name, nil
}

// DefaultGIDIndex picks the GID a program uses when it names none: the
// first IPv4 GID (what -g 1 selects on an rxe device over an IPv4
// interface, and what most RoCEv2 peers expect), else the first IPv6 GID
// that is not link-local (routable beyond the link), else the first one
// there is. False if the table holds only empty slots.
func DefaultGIDIndex(t []GID) (int, bool) {
	for _, ok := range []func(g GID) bool{
		func(g GID) bool { return g.Addr.Unmap().Is4() },
		func(g GID) bool { return g.Addr.Is6() && !g.Addr.IsLinkLocalUnicast() },
		func(g GID) bool { return true },
	} {
		for i, g := range t {
			if !g.Empty() && ok(g) {
				return i, true
			}
		}
	}
	return 0, false
}
