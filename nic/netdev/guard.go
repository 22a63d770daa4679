package netdev

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/goroce/goroce/nic/internal/linkio"
	"golang.org/x/sys/unix"
)

// GuardPort binds UDP port 4791 on every local address with a drop-all
// filter, so the stack neither queues our peers' packets anywhere nor
// answers them with ICMP port unreachable. An address the interface does
// not hold (the MAC-derived default GID when the kernel chose another
// link-local address) needs none: the stack drops what is not for it.
func GuardPort(addrs []netip.Addr, ifname string) ([]*net.UDPConn, error) {
	var guards []*net.UDPConn
	for _, a := range addrs {
		network := "udp4"
		if a.Is6() && !a.Is4In6() {
			network = "udp6"
			if a.IsLinkLocalUnicast() {
				a = a.WithZone(ifname)
			}
		}
		lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
			var ferr error
			if err := c.Control(func(fd uintptr) { ferr = linkio.AttachDropAll(int(fd)) }); err != nil {
				return err
			}
			return ferr
		}}
		pc, err := lc.ListenPacket(nil, network, netip.AddrPortFrom(a.Unmap(), 4791).String())
		if err != nil {
			if errors.Is(err, unix.EADDRNOTAVAIL) {
				continue
			}
			for _, g := range guards {
				g.Close()
			}
			return nil, fmt.Errorf("nic: holding UDP port 4791 on %v (another socket there would take our peers' packets): %w", a, err)
		}
		guards = append(guards, pc.(*net.UDPConn))
	}
	return guards, nil
}
