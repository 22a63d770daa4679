package netdev

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// NextHops maps destination addresses to the MAC of their next hop on one
// interface, from the kernel's routing and neighbour tables. Send looks up
// a copy-on-write map without locking or allocating; a miss posts the
// destination to a resolver goroutine and the frame is dropped and
// counted (TxNoNeighbour): Send may keep no frame, and RC retransmission
// or the engine's own pacing recovers. The first miss for a destination
// waits for the resolver's pass over the kernel's neighbour table, since
// the kernel usually knows the MAC already (see miss). The resolver asks the kernel to
// resolve (RTM_NEWNEIGH with NTF_USE, as "ip neigh replace ADDR dev IF
// use" does; an empty UDP datagram to the discard port where that is
// refused) and re-reads the neighbour table once a second so a changed MAC
// is followed.
type NextHops struct {
	h       *netlink.Handle
	ifindex int
	ifname  string
	m       atomic.Pointer[map[netip.Addr][6]byte]
	req     chan nhRequest
	done    chan struct{}
	trig    [2]int // UDP sockets (IPv4, IPv6) for the fallback trigger

	missMu sync.Mutex
	tried  map[netip.Addr]time.Time // when a miss last waited for the resolver

	closeOnce sync.Once
}

// nhRequest asks the resolver about dst; done, if set, is closed once the
// resolver has looked and published what it found.
type nhRequest struct {
	dst  netip.Addr
	done chan struct{}
}

// NewNextHops starts a resolver for the interface ifname, index ifindex,
// in the caller's network namespace.
func NewNextHops(ifname string, ifindex int) (*NextHops, error) {
	h, err := netlink.NewHandle()
	if err != nil {
		return nil, err
	}
	n := &NextHops{h: h, ifindex: ifindex, ifname: ifname, req: make(chan nhRequest, 256), done: make(chan struct{}), trig: [2]int{-1, -1},
		tried: map[netip.Addr]time.Time{}}
	m := map[netip.Addr][6]byte{}
	n.m.Store(&m)
	// Trigger sockets are made now, in the caller's namespace.
	n.trig[0], _ = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	n.trig[1], _ = unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	go n.run()
	return n, nil
}

// Lookup returns the next hop's MAC for dst, or posts it for resolution.
func (n *NextHops) Lookup(dst netip.Addr) ([6]byte, bool) {
	if mac, ok := (*n.m.Load())[dst]; ok {
		return mac, true
	}
	return n.miss(dst)
}

// missWait bounds how long Send waits for the resolver on a first miss: a
// pass over the neighbour table takes well under a millisecond, and the
// resolver answers at once whether it found the MAC or not, so the bound
// only matters when its goroutine is not scheduled in time: on a loaded
// machine 20 ms could pass before it runs, and the first frame to a
// neighbour the kernel knew would be lost all the same.
const missWait = 250 * time.Millisecond

// miss handles a destination the map lacks. The first miss (in a second)
// waits for the resolver to read the kernel's neighbour table: the kernel
// usually knows the MAC already (the out-of-band TCP connection that
// exchanged the QP numbers resolved it), and a UD application's first
// message should not be lost for want of looking; rxe would not lose it
// either, the kernel queues packets while it resolves. Other misses only
// post the destination, so Send never waits on ARP or on a destination
// that cannot be resolved.
func (n *NextHops) miss(dst netip.Addr) ([6]byte, bool) {
	now := time.Now()
	n.missMu.Lock()
	last, seen := n.tried[dst]
	wait := !seen || now.Sub(last) > time.Second
	if wait {
		if len(n.tried) > 1024 {
			clear(n.tried)
		}
		n.tried[dst] = now
	}
	n.missMu.Unlock()
	r := nhRequest{dst: dst}
	if wait {
		r.done = make(chan struct{})
	}
	select {
	case n.req <- r:
	default: // the resolver is busy; a later frame asks again
		return [6]byte{}, false
	}
	if wait {
		t := time.NewTimer(missWait)
		select {
		case <-r.done:
		case <-t.C:
		case <-n.done:
		}
		t.Stop()
	}
	mac, ok := (*n.m.Load())[dst]
	return mac, ok
}

// Resolved reports whether the next hop's MAC for dst is known, without
// asking the resolver.
func (n *NextHops) Resolved(dst netip.Addr) bool {
	_, ok := (*n.m.Load())[dst]
	return ok
}

// Close stops the resolver; lookups of the MACs it found still succeed.
func (n *NextHops) Close() {
	n.closeOnce.Do(func() {
		close(n.done)
		for _, fd := range n.trig {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	})
}

// run resolves posted destinations and refreshes known ones.
func (n *NextHops) run() {
	defer n.h.Close()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	pending := map[netip.Addr]int{} // destination: probes sent
	retry := time.NewTimer(time.Hour)
	for {
		select {
		case <-n.done:
			return
		case r := <-n.req:
			if _, busy := pending[r.dst]; !busy || r.done != nil {
				if !busy {
					pending[r.dst] = 0
				}
				n.resolve(pending)
				retry.Reset(time.Millisecond)
			}
			if r.done != nil {
				close(r.done)
			}
		case <-retry.C:
			n.resolve(pending)
			if len(pending) > 0 {
				retry.Reset(5 * time.Millisecond)
			}
		case <-tick.C:
			for dst := range *n.m.Load() {
				pending[dst] = 0 // re-read; probes again only if it vanished
			}
			n.resolve(pending)
		}
	}
}

// resolve looks every pending destination up once, publishes what it
// found, and triggers resolution for the rest (giving up after a second).
func (n *NextHops) resolve(pending map[netip.Addr]int) {
	if len(pending) == 0 {
		return
	}
	neighs, err := n.h.NeighList(n.ifindex, netlink.FAMILY_ALL)
	if err != nil {
		return
	}
	old := *n.m.Load()
	m := make(map[netip.Addr][6]byte, len(old)+len(pending))
	for k, v := range old {
		m[k] = v
	}
	for dst, tries := range pending {
		gw, ok := n.gateway(dst)
		if !ok {
			delete(pending, dst) // not out of this interface: never deliverable here
			delete(m, dst)
			continue
		}
		if mac, ok := findNeigh(neighs, gw); ok {
			m[dst] = mac
			delete(pending, dst)
			continue
		}
		delete(m, dst)
		if tries == 0 || tries%50 == 0 {
			n.trigger(gw)
		}
		pending[dst] = tries + 1
		if tries > 200 {
			delete(pending, dst)
		}
	}
	n.m.Store(&m)
}

// gateway returns the next hop for dst if its route leaves through our
// interface: the gateway, or dst itself when it is on the link.
func (n *NextHops) gateway(dst netip.Addr) (netip.Addr, bool) {
	if dst.IsLinkLocalUnicast() {
		return dst.WithZone(""), true
	}
	routes, err := n.h.RouteGet(dst.AsSlice())
	if err != nil || len(routes) == 0 || routes[0].LinkIndex != n.ifindex {
		return netip.Addr{}, false
	}
	if gw, ok := netip.AddrFromSlice(routes[0].Gw); ok && routes[0].Gw != nil {
		return gw.Unmap(), true
	}
	return dst, true
}

func findNeigh(neighs []netlink.Neigh, ip netip.Addr) ([6]byte, bool) {
	const usable = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP
	for _, nb := range neighs {
		a, ok := netip.AddrFromSlice(nb.IP)
		if ok && a.Unmap() == ip && nb.State&usable != 0 && len(nb.HardwareAddr) == 6 {
			return [6]byte(nb.HardwareAddr), true
		}
	}
	return [6]byte{}, false
}

// trigger makes the kernel resolve ip's MAC.
func (n *NextHops) trigger(ip netip.Addr) {
	fam := netlink.FAMILY_V4
	if ip.Is6() {
		fam = netlink.FAMILY_V6
	}
	err := n.h.NeighSet(&netlink.Neigh{LinkIndex: n.ifindex, Family: fam, IP: net.IP(ip.AsSlice()), State: netlink.NUD_NONE, Flags: netlink.NTF_USE})
	if err == nil {
		return
	}
	// Without CAP_NET_ADMIN: a datagram through the stack resolves too.
	if ip.Is4() && n.trig[0] >= 0 {
		_ = unix.Sendto(n.trig[0], nil, 0, &unix.SockaddrInet4{Port: 9, Addr: ip.As4()})
	} else if ip.Is6() && n.trig[1] >= 0 {
		_ = unix.Sendto(n.trig[1], nil, 0, &unix.SockaddrInet6{Port: 9, Addr: ip.As16(), ZoneId: uint32(n.ifindex)})
	}
}

// EthPath is what the links that write their own Ethernet headers share:
// the next-hop resolver and the sockets guarding UDP port 4791.
type EthPath struct {
	Hops   *NextHops      // the next-hop resolver
	Guards []*net.UDPConn // from GuardPort
}

// Close closes the guard sockets and stops the resolver.
func (e *EthPath) Close() {
	for _, g := range e.Guards {
		g.Close()
	}
	if e.Hops != nil {
		e.Hops.Close()
	}
}

// StopResolver stops the next-hop resolver; lookups of the MACs it found
// still succeed.
func (e *EthPath) StopResolver() {
	if e.Hops != nil {
		e.Hops.Close()
	}
}
