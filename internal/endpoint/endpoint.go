// Package endpoint turns the options every roced command shares (-d, -g
// or -x, --link, --pcap) into an open RDMA device: which interface and
// local address to use, the GID table and GID index (so that -g N means
// what it means on Linux rxe), the link (kernel UDP, AF_PACKET or AF_XDP),
// and the goroce engine over it.
package endpoint

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/transport"
)

// Links roced can open, by the --link value.
const (
	LinkUDP      = "udp"
	LinkAFPacket = "afpacket"
	LinkAFXDP    = "afxdp"
)

// Config is what the command line says about the local endpoint.
type Config struct {
	// Link is the data path: "udp" (the default), "afpacket" or "afxdp".
	Link string
	// Dev is -d: an interface name or a local IP address. Empty: the
	// interface that routes to Peer, or 127.0.0.1 for a server.
	Dev string
	// GID is -g (pingpongs) or -x (perftest); negative: the GID of the
	// address the endpoint uses.
	GID int
	// Peer is the host a client talks to; empty for a server.
	Peer string
	// Pcap, if set, writes every frame sent and received to this pcap (or
	// .pcapng) file.
	Pcap string
	// XDPNative attaches the AF_XDP link's program in driver mode.
	XDPNative bool
	// XDPQueue is the receive queue the AF_XDP link binds.
	XDPQueue int
	// Window bounds each RC QP's unacknowledged packets (0: the default).
	Window int
}

// Endpoint is an open device and what was chosen to open it.
type Endpoint struct {
	Device   *transport.Device
	Link     nic.Link
	Netdev   string
	GIDs     []bth.GID
	GIDIndex uint8
	GID      bth.GID
	Addr     netip.Addr // the local address the GID stands for
	// StatsSocket is the unix socket serving this process's counters
	// (roced stats); empty if it could not be opened (StatsErr says why).
	StatsSocket string
	StatsErr    error
	tap         *nic.Tap
}

// Open resolves cfg and opens the device.
func Open(cfg Config) (*Endpoint, error) {
	netdev, addr, table, err := resolve(cfg)
	if err != nil {
		return nil, err
	}
	idx, err := pickGID(table, addr, cfg.GID, netdev)
	if err != nil {
		return nil, err
	}
	gid := table[idx]
	local := gid.Addr()
	if local.Is6() && local.IsLinkLocalUnicast() {
		local = local.WithZone(netdev)
	}
	var link nic.Link
	switch cfg.Link {
	case "", LinkUDP:
		link, err = nic.OpenUDP(nic.UDPConfig{Addr: local})
	case LinkAFPacket:
		link, err = nic.OpenAFPacket(nic.AFPacketConfig{Interface: netdev, Addrs: []netip.Addr{gid.Addr()}})
	case LinkAFXDP:
		link, err = nic.OpenAFXDP(nic.AFXDPConfig{Interface: netdev, Addrs: []netip.Addr{gid.Addr()},
			Native: cfg.XDPNative, Queue: cfg.XDPQueue})
	default:
		return nil, fmt.Errorf("--link %q: want udp, afpacket or afxdp", cfg.Link)
	}
	if err != nil {
		return nil, err
	}
	e := &Endpoint{Link: link, Netdev: netdev, GIDs: table, GIDIndex: uint8(idx), GID: gid, Addr: gid.Addr()}
	if cfg.Pcap != "" {
		t, err := nic.OpenTap(link, cfg.Pcap)
		if err != nil {
			link.Close()
			return nil, err
		}
		e.tap, e.Link = t, t
	}
	e.Device, err = transport.Open(e.Link, transport.Options{GIDs: table, Window: cfg.Window})
	if err != nil {
		e.Link.Close()
		return nil, err
	}
	e.StatsErr = e.serveStats()
	return e, nil
}

// Close closes the device and its link, flushing any pcap file, and stops
// reporting its counters (the process's stats socket goes with its last
// endpoint).
func (e *Endpoint) Close() error {
	e.unserveStats()
	err := e.Device.Close()
	if e.tap != nil {
		if ferr := e.tap.Err(); ferr != nil && err == nil {
			err = ferr
		}
	}
	return err
}

// resolve finds the interface and address, and builds the GID table.
//
// With -d naming an address, the table is the one rxe would have on an
// interface holding just that address: the link-local GID from the MAC,
// then the address, so -g 1 is the address as on rxe over one IPv4
// address. With -d naming an interface (or the interface chosen by the
// route to the peer), the table is the interface's own, in rxe's order.
func resolve(cfg Config) (netdev string, addr netip.Addr, table []bth.GID, err error) {
	dev := cfg.Dev
	if dev == "" && cfg.Peer == "" {
		dev = "127.0.0.1" // a server with no peer yet: loopback
	}
	if dev == "" {
		peer, err := lookup(cfg.Peer)
		if err != nil {
			return "", netip.Addr{}, nil, err
		}
		netdev, addr, err = route(peer)
		if err != nil {
			return "", netip.Addr{}, nil, err
		}
		t, err := nic.GIDTable(netdev)
		if err != nil {
			return "", netip.Addr{}, nil, err
		}
		return netdev, addr, gids(t), nil
	}
	if a, perr := netip.ParseAddr(dev); perr == nil {
		a = a.Unmap()
		netdev, _, rerr := route(a.WithZone(""))
		if rerr != nil {
			return "", netip.Addr{}, nil, fmt.Errorf("-d %s: %w", dev, rerr)
		}
		// Keep rxe's shape even on an interface without a MAC (loopback):
		// index 0 link-local, index 1 the address, so command lines written
		// for rxe (-g 1) mean the same here.
		mac := net.HardwareAddr{0, 0, 0, 0, 0, 0}
		if l, err := netlink.LinkByName(netdev); err == nil && len(l.Attrs().HardwareAddr) == 6 {
			mac = l.Attrs().HardwareAddr
		}
		var v4, v6 []netip.Addr
		if a.Is4() {
			v4 = append(v4, a)
		} else {
			v6 = append(v6, a)
		}
		return netdev, a, gids(nic.GIDTableFrom(netdev, mac, v4, v6)), nil
	}
	t, err := nic.GIDTable(dev)
	if err != nil {
		return "", netip.Addr{}, nil, fmt.Errorf("-d %s: neither a local address nor an interface: %w", dev, err)
	}
	return dev, netip.Addr{}, gids(t), nil
}

func gids(t []nic.GID) []bth.GID {
	out := make([]bth.GID, len(t))
	for i, g := range t {
		out[i] = bth.GID(g.GID)
	}
	return out
}

// pickGID returns the GID index to use: the one asked for, or else the
// GID of addr, or else the interface's first IPv4 GID, or else its first
// IPv6 GID that is not link-local.
func pickGID(t []bth.GID, addr netip.Addr, want int, netdev string) (int, error) {
	if len(t) == 0 {
		return 0, fmt.Errorf("%s has no address to make a GID from", netdev)
	}
	if want >= 0 {
		if want >= len(t) {
			return 0, fmt.Errorf("%w: GID index %d: %s's GID table has %d entries (roced gids -d %s lists them)",
				ErrGIDIndex, want, netdev, len(t), netdev)
		}
		return want, nil
	}
	if addr.IsValid() {
		for i, g := range t {
			if g.Addr() == addr.Unmap() {
				return i, nil
			}
		}
	}
	for i, g := range t {
		if g.IsIPv4() {
			return i, nil
		}
	}
	for i, g := range t {
		if !g.Addr().IsLinkLocalUnicast() {
			return i, nil
		}
	}
	return 0, nil
}

// lookup resolves a host name or address.
func lookup(host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), nil
	}
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("cannot resolve %s: %v", host, err)
	}
	for _, ip := range ips { // prefer IPv4, as the tools' getaddrinfo order usually does
		if v4 := ip.To4(); v4 != nil {
			return netip.AddrFrom4([4]byte(v4)), nil
		}
	}
	a, _ := netip.AddrFromSlice(ips[0])
	return a, nil
}

// route returns the interface a packet to dst leaves by and the source
// address the kernel would give it.
func route(dst netip.Addr) (string, netip.Addr, error) {
	rs, err := netlink.RouteGet(dst.AsSlice())
	if err != nil || len(rs) == 0 {
		return "", netip.Addr{}, fmt.Errorf("no route to %v: %v", dst, err)
	}
	l, err := netlink.LinkByIndex(rs[0].LinkIndex)
	if err != nil {
		return "", netip.Addr{}, fmt.Errorf("route to %v: %w", dst, err)
	}
	src, _ := netip.AddrFromSlice(rs[0].Src)
	return l.Attrs().Name, src.Unmap(), nil
}

// ErrGIDIndex reports a GID index (-g, -x) beyond the GID table, so that a
// command can answer with its tool's own message ("can't read sgid of
// index N").
var ErrGIDIndex = errors.New("no such GID index")

// ErrUsage marks a configuration error the user can fix on the command line.
var ErrUsage = errors.New("usage")

// Describe returns a one-line summary for verbose output.
func (e *Endpoint) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s on %s, GID[%d] %v, active MTU %v", e.Link.Info().Name, e.Netdev, e.GIDIndex, e.GID, e.Device.ActiveMTU())
	return b.String()
}
