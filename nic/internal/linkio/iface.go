package linkio

import (
	"net"
	"net/netip"
)

// InterfaceOf finds the interface holding a (or named by its zone).
func InterfaceOf(a netip.Addr) *net.Interface {
	if z := a.Zone(); z != "" {
		if ifc, err := net.InterfaceByName(z); err == nil {
			return ifc
		}
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var lo *net.Interface
	for i := range ifs {
		addrs, err := ifs[i].Addrs()
		if err != nil {
			continue
		}
		for _, ad := range addrs {
			if n, ok := ad.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a.WithZone("") {
					return &ifs[i]
				}
				if a.IsLoopback() && n.Contains(a.AsSlice()) {
					lo = &ifs[i]
				}
			}
		}
	}
	// Linux answers the whole of 127.0.0.0/8 on lo although only 127.0.0.1
	// is assigned: 127.0.0.2 is on lo too, with lo's MTU.
	return lo
}
