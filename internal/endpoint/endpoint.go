// Package endpoint turns the options every roced command shares (-d, -g
// or -x, --link, --pcap, the fault flags) into an open RDMA device: which interface and
// local address to use, the GID table and GID index (so that -g N means
// what it means on Linux rxe), the link (kernel UDP, AF_PACKET or AF_XDP),
// and the goroce engine over it.
package endpoint

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/afpacket"
	"github.com/goroce/goroce/nic/afxdp"
	"github.com/goroce/goroce/nic/fault"
	"github.com/goroce/goroce/nic/netdev"
	"github.com/goroce/goroce/nic/tap"
	"github.com/goroce/goroce/nic/udp"
	"github.com/goroce/goroce/share"
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
	// interface that routes to Peer, or for a server DefaultNetdev.
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
	// LeaveNetpoll is transport.Options.LeaveNetpoll, for a program whose
	// CQs C threads poll (libgoroce.so).
	LeaveNetpoll bool
	// PollByDefault puts the device in poll mode unless GOROCE_POLL_MODE
	// says 0 (libgoroce.so: its programs spin on their CQs in C, as on an
	// HCA, and their polls receiving themselves save two thread hand-offs
	// a packet).
	PollByDefault bool
	// AllGIDs makes the device answer on every address of its GID table,
	// as an rxe device does (the IPv6 ones beside the IPv4 one): the UDP
	// link then binds each address (nic.Multi). The GID the options chose
	// must bind; another that cannot (a link-local address on an
	// interface whose IPv6 is off) is left unbound. The other links
	// receive on the interface already.
	AllGIDs bool
	// Faults, if active, make the device misbehave on purpose (--loss,
	// --fault-rule...). They wrap the pcap tap, so the capture shows the
	// wire: tx packets after the faults, rx packets before them.
	Faults fault.Config
	// FaultLog, if set, is told of each rule that fires.
	FaultLog io.Writer
}

// Tuning the engine, as rdma-core's providers are tuned, through the
// environment rather than each tool's flags (the tools keep the real
// programs' flags): GOROCE_RX_QUEUES=N gives the udp link N receive queues
// steered by QPN, each received on its own goroutine (udp.Config.RxQueues);
// GOROCE_BUSY_POLL=N makes its receives busy-poll for up to N microseconds
// before sleeping (udp.Config.BusyPoll), as the net.core.busy_poll
// sysctl counts, 0 never (unset: adaptively, udp.AdaptiveBusyPoll);
// GOROCE_POLL_MODE=1 puts the device in poll mode, where a
// goroutine polling an empty CQ handles what has arrived itself
// (transport.Options.PollProgress), and 0 keeps it out (libgoroce.so's
// devices are in it by default: Config.PollByDefault). GOROCE_EXPLAIN=1 writes to standard
// error why each QP that fails enters ERR (a NAK, retries run out, a local
// error: transport.Death, with its last packets); GOROCE_EXPLAIN=all also the
// QPs the program moves there itself or leaves at close. GOROCE_CC sets
// up congestion control (transport.ParseCongestion): unset, DCQCN is on with
// mlx5's parameters; "off", "paper" or mlx5 parameters name=value, comma
// separated.
const (
	EnvRxQueues = "GOROCE_RX_QUEUES"
	EnvBusyPoll = "GOROCE_BUSY_POLL"
	EnvPollMode = "GOROCE_POLL_MODE"
	EnvExplain  = "GOROCE_EXPLAIN"
	EnvCC       = "GOROCE_CC"
)

type tuning struct {
	rxQueues int
	busyPoll time.Duration
	pollMode bool
	pollSet  bool // GOROCE_POLL_MODE was given
	explain  int  // 0: quiet; 1: failures; 2: every death
	cc       transport.CongestionOptions
}

// tuningFromEnv reads the tuning variables; a bad value is a usage error.
func tuningFromEnv(getenv func(string) string) (tuning, error) {
	var t tuning
	if v := getenv(EnvRxQueues); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > nic.MaxRxQueues {
			return t, tagf(ErrUsage, "%s=%q: want a number of receive queues from 1 to %d", EnvRxQueues, v, nic.MaxRxQueues)
		}
		t.rxQueues = n
	}
	if v := getenv(EnvBusyPoll); v != "" {
		us, err := strconv.Atoi(v)
		if err != nil || us < 0 || us > 1000000 {
			return t, tagf(ErrUsage, "%s=%q: want microseconds of busy polling, 0 to 1000000", EnvBusyPoll, v)
		}
		t.busyPoll = time.Duration(us) * time.Microsecond
		if us == 0 {
			t.busyPoll = udp.NoBusyPoll // 0 turns the adaptive default off
		}
	}
	switch v := getenv(EnvPollMode); v {
	case "":
	case "0":
		t.pollSet = true
	case "1":
		t.pollSet = true
		t.pollMode = true
	default:
		return t, tagf(ErrUsage, "%s=%q: want 1 (poll mode) or 0", EnvPollMode, v)
	}
	switch v := getenv(EnvExplain); v {
	case "", "0":
	case "1":
		t.explain = 1
	case "all":
		t.explain = 2
	default:
		return t, tagf(ErrUsage, "%s=%q: want 1 (why failing QPs enter ERR), all (every QP that does) or 0", EnvExplain, v)
	}
	if v := getenv(EnvCC); v != "" { // unset: the zero options, DCQCN on with mlx5's parameters
		cc, err := transport.ParseCongestion(v)
		if err != nil {
			return t, tagf(ErrUsage, "%s: %v", EnvCC, err)
		}
		t.cc = cc
	}
	return t, nil
}

// explainer returns the device's Died for the explain level: a QP's death
// written to w as transport.Death.Explain puts it, or nil to write none.
func explainer(level int, w io.Writer) func(*transport.Death) {
	if level == 0 {
		return nil
	}
	return func(d *transport.Death) {
		if level == 1 && (d.Cause == transport.CauseModified || d.Cause == transport.CauseDeviceClosed) {
			return // the program's own doing: no failure to explain
		}
		fmt.Fprintf(w, "goroce: %s", d.Explain())
	}
}

// Endpoint is an open device and what was chosen to open it.
type Endpoint struct {
	Device   *transport.Device // the engine, owning Link
	Link     nic.Link          // the data path (behind a pcap tap with --pcap)
	Netdev   string            // the interface the device is on
	GIDs     []bth.GID         // the device's GID table
	GIDIndex uint8             // the index -g/-x chose (or the default)
	GID      bth.GID           // the GID at GIDIndex
	Addr     netip.Addr        // the local address the GID stands for
	// StatsSocket is the unix socket serving this process's counters
	// (roced stats); empty if it could not be opened (StatsErr says why).
	StatsSocket string
	StatsErr    error // see StatsSocket
	// Faults is the fault injector when Config.Faults is active, else nil.
	Faults *fault.Link
	tap    *tap.Tap
	cm     *cm.Manager // its listeners are the stats socket's cm_ids (ServeCM); under statsServer.mu
}

// Open resolves cfg and opens the device.
func Open(cfg Config) (*Endpoint, error) {
	d, err := resolve(cfg)
	if err != nil {
		return nil, err
	}
	idx, err := pickGID(d, cfg.GID)
	if err != nil {
		return nil, err
	}
	g := d.GIDs[idx]
	local := g.Addr
	if local.Is6() && local.IsLinkLocalUnicast() {
		local = local.WithZone(d.Netdev)
	}
	tune, err := tuningFromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	var link nic.Link
	var member *share.Member
	var sharer transport.Sharer
	switch cfg.Link {
	case "", LinkUDP:
		// A running share server (roced serve) hands this process its
		// packets on the GID it opened; otherwise it binds port 4791
		// (openUDP).
		busy := tune.busyPoll
		if busy == 0 && cfg.LeaveNetpoll {
			// The program's C threads spin on its CQs (ibv_poll_cq in a
			// loop, as perftest does on an HCA) and take the cores a
			// receive would busy-poll on: the library's ib_send_lat went
			// from 45 to 60 µs with the adaptive default.
			busy = udp.NoBusyPoll
		}
		ucfg := udp.Config{Addr: local, RxQueues: tune.rxQueues, BusyPoll: busy}
		var owned []*udp.Link
		link, member, owned, err = openUDP(local, ucfg)
		if member != nil {
			sharer = member
		}
		if err == nil && owned != nil {
			if cfg.AllGIDs {
				oc := ucfg
				oc.Owner = true
				link, owned, err = joinUDP(link, d, idx, oc)
			}
			sharer = &ownerShare{links: owned}
		} else if err == nil && member == nil && cfg.AllGIDs {
			link, _, err = joinUDP(link, d, idx, ucfg)
		}
		if errors.Is(err, syscall.EADDRINUSE) && os.Getenv(EnvShare) == "0" {
			err = fmt.Errorf("%w: another process holds port 4791 there (%s=0: no share server)", err, EnvShare)
		}
	case LinkAFPacket:
		link, err = afpacket.Open(afpacket.Config{Interface: d.Netdev, Addrs: []netip.Addr{g.Addr}})
	case LinkAFXDP:
		link, err = afxdp.Open(afxdp.Config{Interface: d.Netdev, Addrs: []netip.Addr{g.Addr},
			Native: cfg.XDPNative, Queue: cfg.XDPQueue})
	default:
		return nil, tagf(ErrUsage, "--link %q: want udp, afpacket or afxdp", cfg.Link)
	}
	if err != nil {
		// Name the GID the link was for: the table may hold an address
		// that exists on paper only (a link-local GID on an interface
		// with IPv6 off).
		why := ""
		if errors.Is(err, syscall.EADDRNOTAVAIL) {
			why = fmt.Sprintf(" (%s does not hold %v)", d.Netdev, g.Addr)
		}
		return nil, fmt.Errorf("GID index %d (%v) on %s: %w%s", idx, g, d.Netdev, err, why)
	}
	table := make([]bth.GID, len(d.GIDs))
	for i, x := range d.GIDs {
		table[i] = bth.GID(x.GID)
	}
	e := &Endpoint{Link: link, Netdev: d.Netdev, GIDs: table, GIDIndex: uint8(idx), GID: table[idx], Addr: g.Addr}
	if cfg.Pcap != "" {
		t, err := tap.Open(link, cfg.Pcap)
		if err != nil {
			link.Close()
			return nil, err
		}
		e.tap, e.Link = t, t
	}
	if cfg.Faults.Active() {
		fc := cfg.Faults
		if w := cfg.FaultLog; w != nil && fc.Log == nil {
			fc.Log = func(line string) { fmt.Fprintln(w, line) }
		}
		e.Faults = fault.Wrap(e.Link, fc)
		e.Link = e.Faults
	}
	if cfg.PollByDefault && !tune.pollSet {
		// Where the link can be polled: a share member's packets come
		// through its server's relay, which the receive goroutine reads.
		_, tune.pollMode = e.Link.(nic.Poller)
	}
	e.Device, err = transport.Open(e.Link, transport.Options{GIDs: table, Window: cfg.Window, PollProgress: tune.pollMode,
		LeaveNetpoll: cfg.LeaveNetpoll, Died: explainer(tune.explain, os.Stderr), Share: sharer,
		Congestion: tune.cc, QPNs: hostQPNs()})
	if err != nil {
		e.Link.Close()
		return nil, err
	}
	e.StatsErr = e.serveStats()
	return e, nil
}

// joinUDP adds to first (the UDP link on GID idx) a UDP link on each
// other address of d's GID table that binds, tuned as first (ucfg),
// joined into one link. An owner's (ucfg.Owner) binds only where no other
// process holds the port (a group is joined by any bind of the user's),
// and returns its links with first's.
func joinUDP(first nic.Link, d Dev, idx int, ucfg udp.Config) (nic.Link, []*udp.Link, error) {
	links := []nic.Link{first}
	var owned []*udp.Link
	if l, ok := first.(*udp.Link); ok && ucfg.Owner {
		owned = append(owned, l)
	}
	for i, g := range d.GIDs {
		if i == idx || g.Empty() {
			continue
		}
		a := g.Addr
		if a.Is6() && a.IsLinkLocalUnicast() {
			a = a.WithZone(d.Netdev)
		}
		ucfg.Addr = a
		if ucfg.Owner {
			if free, err := portFree(a); err != nil || !free {
				continue
			}
		}
		if l, err := udp.Open(ucfg); err == nil {
			links = append(links, l)
			if ucfg.Owner {
				owned = append(owned, l)
			}
		}
	}
	if len(links) == 1 {
		return first, owned, nil
	}
	m, err := nic.NewMulti(links...)
	if err != nil {
		for _, l := range links {
			l.Close()
		}
		return nil, nil, err
	}
	return m, owned, nil
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

// FaultSummary returns the line a tool prints at the end when faults were
// set ("faults: tx_lost=3 rule1=1"), or "" when none were.
func (e *Endpoint) FaultSummary() string {
	if e == nil || e.Faults == nil {
		return ""
	}
	return e.Faults.Faults().String()
}

// Dev is what -d names: an interface, or one address on it, with the
// GID table a device over it has. roced gids prints this same table.
type Dev struct {
	// Name is how -d named it (an address or an interface).
	Name   string
	Netdev string // the interface
	// Addr is the address -d named, or for a client with no -d the source
	// address of the route to the peer; invalid otherwise.
	Addr netip.Addr
	GIDs []netdev.GID // the GID table, in rxe's order
}

// LookupDev resolves -d. An interface name gives the interface's own table
// in rxe's order. A local address gives a device over that one address,
// as rxe over an interface holding only it: index 0 the interface's
// default GID (empty on loopback, which has no MAC), index 1 the address,
// so -g 1 means the address. Loopback answers all of 127.0.0.0/8, so
// -d 127.0.0.2 works without configuring it.
func LookupDev(dev string) (Dev, error) {
	if a, err := netip.ParseAddr(dev); err == nil {
		a = a.Unmap()
		ifname, err := netdev.Of(a)
		if err != nil {
			return Dev{}, tagf(ErrNoDevice, "-d %s: no local interface has this address", dev)
		}
		l, err := netlink.LinkByName(ifname)
		if err != nil {
			return Dev{}, fmt.Errorf("-d %s: %s: %w", dev, ifname, err)
		}
		var v4, v6 []netip.Addr
		if a.Is4() {
			v4 = append(v4, a)
		} else {
			v6 = append(v6, a)
		}
		return Dev{Name: dev, Netdev: ifname, Addr: a, GIDs: netdev.GIDTableFrom(ifname, l.Attrs().HardwareAddr, v4, v6)}, nil
	}
	t, err := netdev.GIDTable(dev)
	if err != nil {
		return Dev{}, tagf(ErrNoDevice, "-d %s: neither a local address nor an interface", dev)
	}
	return Dev{Name: dev, Netdev: dev, GIDs: t}, nil
}

// resolve finds the device: the one -d names; for a client, the
// interface that routes to the peer; for a server, the interface an rxe
// user would have put rxe on (DefaultNetdev).
func resolve(cfg Config) (Dev, error) {
	if cfg.Dev != "" {
		return LookupDev(cfg.Dev)
	}
	if cfg.Peer == "" {
		netdev, err := DefaultNetdev()
		if err != nil {
			return Dev{}, err
		}
		return LookupDev(netdev)
	}
	peer, err := lookup(cfg.Peer)
	if err != nil {
		return Dev{}, err
	}
	netdev, src, err := route(peer)
	if err != nil {
		return Dev{}, err
	}
	d, err := LookupDev(netdev)
	d.Addr = src
	return d, err
}

// DefaultNetdev picks a server's interface when -d is not given: the
// interface of the default route, else the only interface besides
// loopback that is up and has an address. A server must advertise a GID
// its client can reach; a pingpong server opens its device (and prints
// its GID) before any client connects, as the real tools do, so the route
// to the client cannot decide it (a perftest server opens its device once
// the client has connected, with the client as Peer). Loopback is never
// chosen silently: a client on another host could not reach it.
func DefaultNetdev() (string, error) {
	if n, err := defaultRouteNetdev(); n != "" || err != nil {
		return n, err
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	var names, cands []string
	for _, i := range ifs {
		if i.Flags&net.FlagUp == 0 || i.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := i.Addrs()
		var list []string
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLinkLocalUnicast() {
				list = append(list, n.IP.String())
			}
		}
		if len(list) > 0 {
			names = append(names, i.Name)
			cands = append(cands, fmt.Sprintf("%s (%s)", i.Name, strings.Join(list, ", ")))
		}
	}
	switch len(cands) {
	case 1:
		return names[0], nil
	case 0:
		return "", tagf(ErrNoDevice, "no -d, no default route and no interface but loopback with an address: pass -d IFACE|ADDR (-d 127.0.0.1 for loopback)")
	}
	return "", tagf(ErrNoDevice, "no -d and no default route; several interfaces could serve: %s: pass -d IFACE|ADDR", strings.Join(cands, ", "))
}

// defaultRouteNetdev returns the interface of the default route (IPv4,
// else IPv6; the lowest metric), "" if there is none, or an error naming
// the candidates if routes of equal metric leave by different interfaces.
func defaultRouteNetdev() (string, error) {
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := netlink.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return "", fmt.Errorf("reading routes: %w", err)
		}
		best := -1
		names := map[string]bool{}
		for _, r := range rs {
			if r.Dst != nil {
				if ones, _ := r.Dst.Mask.Size(); ones != 0 {
					continue
				}
			}
			links := []int{r.LinkIndex}
			for _, h := range r.MultiPath {
				links = append(links, h.LinkIndex)
			}
			if best >= 0 && r.Priority > best {
				continue
			}
			if r.Priority < best || best < 0 {
				best, names = r.Priority, map[string]bool{}
			}
			for _, li := range links {
				if l, err := netlink.LinkByIndex(li); err == nil && li != 0 {
					names[l.Attrs().Name] = true
				}
			}
		}
		switch len(names) {
		case 0:
			continue
		case 1:
			for n := range names {
				return n, nil
			}
		}
		var list []string
		for n := range names {
			list = append(list, n)
		}
		sort.Strings(list)
		return "", tagf(ErrNoDevice, "no -d and the default routes leave by several interfaces: %s: pass -d IFACE|ADDR", strings.Join(list, ", "))
	}
	return "", nil
}

// pickGID returns the GID index to use: the one asked for, or else the
// GID of the device's address, or else the device's default
// (netdev.DefaultGIDIndex: the first IPv4 GID, else the first IPv6 GID that
// is not link-local, else the first one there is).
func pickGID(d Dev, want int) (int, error) {
	t := d.GIDs
	if want >= 0 {
		switch {
		case want >= len(t):
			return 0, tagf(ErrGIDIndex, "GID index %d: %s's GID table has %d entries (roced gids -d %s lists them)", want, d.Name, len(t), d.Name)
		case t[want].Empty():
			return 0, tagf(ErrGIDIndex, "GID index %d of %s is empty: %s has no MAC address to make the link-local GID from (roced gids -d %s lists the table)", want, d.Name, d.Netdev, d.Name)
		}
		return want, nil
	}
	if d.Addr.IsValid() {
		for i, g := range t {
			if !g.Empty() && g.Addr == d.Addr.WithZone("") {
				return i, nil
			}
		}
	}
	if i, ok := netdev.DefaultGIDIndex(t); ok {
		return i, nil
	}
	return 0, tagf(ErrNoDevice, "%s has no address to make a GID from", d.Name)
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

// tagged is an error of a class (ErrGIDIndex, ErrNoDevice, ErrUsage)
// whose message is only its own: the class is for errors.Is, not for
// the user.
type tagged struct {
	class error
	msg   string
}

func (e *tagged) Error() string { return e.msg }
func (e *tagged) Unwrap() error { return e.class }

func tagf(class error, format string, a ...any) error {
	return &tagged{class, fmt.Sprintf(format, a...)}
}

// ErrNoDevice reports that -d names nothing usable, or that no device
// could be chosen without -d (the message lists the candidates).
var ErrNoDevice = errors.New("no device")

// ErrUsage marks a configuration error the user can fix on the command line.
var ErrUsage = errors.New("usage")

// Describe returns a one-line summary for verbose output.
func (e *Endpoint) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s on %s, GID[%d] %v, active MTU %v", e.Link.Info().Name, e.Netdev, e.GIDIndex, e.GID, e.Device.ActiveMTU())
	return b.String()
}
