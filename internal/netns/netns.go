// Package netns builds throwaway network topologies for tests: two network
// namespaces joined by a veth pair, with addresses from ranges reserved for
// testing (198.18.0.0/15, RFC 2544; fd00::/8, unique local), an MTU of the
// test's choosing and optional netem loss, duplication and reordering.
// With Config.Middle a third namespace sits between the two, A <-veth-> M
// <-veth-> B, for a forwarder that impairs the path (nic/impair) where the
// kernel has no netem.
//
// The namespaces are unnamed: they exist only while this process holds a
// handle to them (or a socket or thread inside them), so nothing outlives
// the test binary even if it crashes; Cleanup closes the handles at once.
//
// It needs CAP_SYS_ADMIN and CAP_NET_ADMIN (root). Without them New fails
// the test with a message saying so; -short skips it, since namespace tests
// are the slow, privileged part of the suite.
package netns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	vns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Config chooses the topology.
type Config struct {
	// MTU of both veth ends; 0 means 1500. RoCEv2 with a 1024-byte payload
	// needs about 1100, with 4096 about 4200.
	MTU int
	// Netem, if set, is installed as the root qdisc of both veth ends.
	Netem *netlink.NetemQdiscAttrs
	// Middle puts a third namespace between A and B. Its two interfaces
	// have no addresses and nothing joins them: A and B reach each other
	// only while a forwarder runs in it (see Middle).
	Middle bool
	// Subnet picks the third octet of the IPv4 addresses and a byte of the
	// IPv6 prefix, so that tests running pairs side by side (within one
	// process the namespaces are separate anyway) can tell them apart in
	// logs; 0 is fine.
	Subnet uint8
}

// End is one side of the pair.
type End struct {
	NS    vns.NsHandle     // the namespace
	Link  string           // the veth's name inside the namespace
	Index int              // the veth's interface index
	MAC   net.HardwareAddr // the veth's MAC
	IPv4  netip.Addr       // its IPv4 address
	IPv6  netip.Addr       // global (unique local), usable at once: no DAD
	LL    netip.Addr       // fe80:: link-local address of the veth
	h     *netlink.Handle
}

// Pair is two namespaces joined by a veth pair, or by two veth pairs
// through a middle namespace.
type Pair struct {
	A, B *End    // the two ends
	M    *Middle // nil unless Config.Middle
	MTU  int     // the veths' MTU
}

// Middle is the namespace between A and B: ToA is the peer of A's veth,
// ToB the peer of B's. IPv6 is off on both so the middle sends nothing of
// its own; every frame on them is A's or B's.
type Middle struct {
	NS       vns.NsHandle // the middle namespace
	ToA, ToB string       // its veths' names
	h        *netlink.Handle
}

// Do runs fn on a thread inside the middle namespace.
func (m *Middle) Do(fn func() error) error { return Do(m.NS, fn) }

// Run runs a command inside the middle namespace.
func (m *Middle) Run(name string, args ...string) ([]byte, error) { return run(m.NS, name, args...) }

// Privileged fails t unless the process may create namespaces, and skips
// it in -short mode.
func Privileged(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("network namespace test: skipped in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Fatalf("network namespace test needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN); euid is %d. Run as root, or with -short to skip", os.Geteuid())
	}
}

// NetemMissing returns why netem cannot be used here (an error naming the
// kernel option if the kernel lacks it), or nil if it can. It needs the
// same privilege as New and fails t the same way without it.
func NetemMissing(t testing.TB) error {
	t.Helper()
	Privileged(t)
	p, err := build(Config{Netem: &netlink.NetemQdiscAttrs{}})
	if p != nil {
		p.Close()
	}
	return err
}

// New builds the pair and registers its removal with t.Cleanup.
func New(t testing.TB, cfg Config) *Pair {
	t.Helper()
	Privileged(t)
	p, err := build(cfg)
	if p != nil {
		t.Cleanup(p.Close)
	}
	if err != nil {
		t.Fatalf("netns: %v", err)
	}
	return p
}

func build(cfg Config) (*Pair, error) {
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if cfg.MTU < 1280 {
		// The kernel removes IPv6 (and its sysctls) from such a link.
		return nil, fmt.Errorf("MTU %d: IPv6 needs at least 1280", cfg.MTU)
	}
	p := &Pair{MTU: cfg.MTU, A: &End{NS: -1}, B: &End{NS: -1}}
	var err error
	if p.A.NS, err = newNS(); err != nil {
		return p, err
	}
	if p.B.NS, err = newNS(); err != nil {
		return p, err
	}
	for _, e := range []*End{p.A, p.B} {
		if e.h, err = netlink.NewHandleAt(e.NS); err != nil {
			return p, fmt.Errorf("netlink handle in namespace: %w", err)
		}
	}
	p.A.Link, p.B.Link = "veth0", "veth1"
	if cfg.Middle {
		if err := p.middle(cfg); err != nil {
			return p, err
		}
	} else if err := vethPair(p.A, p.A.Link, p.B.NS, p.B.Link, cfg.MTU); err != nil {
		return p, err
	}
	for i, e := range []*End{p.A, p.B} {
		n := byte(i + 1)
		e.IPv4 = netip.AddrFrom4([4]byte{198, 18, cfg.Subnet, n})
		e.IPv6 = netip.AddrFrom16([16]byte{0: 0xfd, 1: 0x00, 2: 0x67, 3: 0x72, 4: 0x6f, 5: cfg.Subnet, 15: n})
		if err := e.setup(cfg); err != nil {
			return p, err
		}
	}
	for _, e := range []*End{p.A, p.B} {
		if err := e.linkLocal(); err != nil {
			return p, err
		}
	}
	return p, nil
}

// vethPair creates a veth pair in e's namespace, named name there, whose
// peer peerName lives in peerNS.
func vethPair(e *End, name string, peerNS vns.NsHandle, peerName string, mtu int) error {
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: name, MTU: mtu},
		PeerName:      peerName,
		PeerNamespace: netlink.NsFd(peerNS),
	}
	if err := e.h.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth pair %s-%s: %w", name, peerName, err)
	}
	return nil
}

// middle creates the middle namespace and its veth pairs to A and B, and
// brings its ends up without addresses.
func (p *Pair) middle(cfg Config) error {
	m := &Middle{NS: -1, ToA: "ma", ToB: "mb"}
	p.M = m
	var err error
	if m.NS, err = newNS(); err != nil {
		return err
	}
	if m.h, err = netlink.NewHandleAt(m.NS); err != nil {
		return fmt.Errorf("netlink handle in namespace: %w", err)
	}
	if err := vethPair(p.A, p.A.Link, m.NS, m.ToA, cfg.MTU); err != nil {
		return err
	}
	if err := vethPair(p.B, p.B.Link, m.NS, m.ToB, cfg.MTU); err != nil {
		return err
	}
	for _, name := range []string{m.ToA, m.ToB} {
		if err := m.Do(func() error {
			return os.WriteFile("/proc/sys/net/ipv6/conf/"+name+"/disable_ipv6", []byte("1"), 0)
		}); err != nil {
			return fmt.Errorf("sysctl disable_ipv6 on %s: %w", name, err)
		}
		l, err := m.h.LinkByName(name)
		if err == nil {
			err = m.h.LinkSetUp(l)
		}
		if err != nil {
			return fmt.Errorf("middle %s: %w", name, err)
		}
	}
	return nil
}

// newNS creates an unnamed namespace and returns a handle to it, leaving
// the calling thread where it was.
func newNS() (vns.NsHandle, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := vns.Get()
	if err != nil {
		return -1, err
	}
	defer orig.Close()
	ns, err := vns.New()
	if err != nil {
		if errors.Is(err, unix.EPERM) {
			return -1, fmt.Errorf("creating a network namespace needs CAP_SYS_ADMIN: %w", err)
		}
		return -1, err
	}
	if err := vns.Set(orig); err != nil {
		// This thread is stuck in the new namespace; leave it locked so
		// the runtime discards it instead of reusing it.
		runtime.LockOSThread()
		ns.Close()
		return -1, err
	}
	return ns, nil
}

func (e *End) setup(cfg Config) error {
	l, err := e.h.LinkByName(e.Link)
	if err != nil {
		return err
	}
	e.Index = l.Attrs().Index
	e.MAC = l.Attrs().HardwareAddr
	// Without DAD the addresses are usable the moment the link is up.
	if err := e.Do(func() error {
		for _, s := range []string{"all", "default", e.Link} {
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+s+"/accept_dad", []byte("0"), 0); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("sysctl accept_dad: %w", err)
	}
	for _, a := range []struct {
		ip   netip.Addr
		bits int
	}{{e.IPv4, 24}, {e.IPv6, 64}} {
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: a.ip.AsSlice(), Mask: net.CIDRMask(a.bits, a.ip.BitLen())}}
		if a.ip.Is6() {
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := e.h.AddrAdd(l, addr); err != nil {
			return fmt.Errorf("address %v: %w", a.ip, err)
		}
	}
	lo, err := e.h.LinkByName("lo")
	if err == nil {
		err = e.h.LinkSetUp(lo)
	}
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	if err := e.h.LinkSetUp(l); err != nil {
		return err
	}
	if cfg.Netem != nil {
		q := netlink.NewNetem(netlink.QdiscAttrs{LinkIndex: e.Index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT}, *cfg.Netem)
		if err := e.h.QdiscAdd(q); err != nil {
			if errors.Is(err, unix.ENOENT) {
				// What the kernel answers for an unknown qdisc kind.
				return fmt.Errorf("netem: this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM): %w", err)
			}
			return fmt.Errorf("netem: %w", err)
		}
	}
	return nil
}

// linkLocal waits for the kernel to give the veth its fe80:: address, which
// it does once both ends are up (the carrier comes up then).
func (e *End) linkLocal() error {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		l, err := e.h.LinkByIndex(e.Index)
		if err != nil {
			return err
		}
		addrs, err := e.h.AddrList(l, netlink.FAMILY_V6)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.IsLinkLocalUnicast() {
				e.LL = ip
				return nil
			}
		}
	}
	return fmt.Errorf("%s got no link-local address", e.Link)
}

// Do runs fn on a thread inside the namespace. Sockets fn opens belong to
// the namespace for their whole life, wherever they are used afterwards.
func (e *End) Do(fn func() error) error { return Do(e.NS, fn) }

// Do runs fn on a thread inside ns (any network namespace handle, a named
// one from netns.GetFromName as well as this package's).
func Do(ns vns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	orig, err := vns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	if err := vns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := fn()
	if err := vns.Set(orig); err != nil {
		// Leave the thread locked: the runtime ends it when this
		// goroutine returns, rather than reuse a thread in the wrong
		// namespace.
		return errors.Join(ferr, err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// Run runs a command inside the namespace (a child forked from a thread in
// it inherits it) and returns its combined output.
func (e *End) Run(name string, args ...string) ([]byte, error) { return run(e.NS, name, args...) }

func run(ns vns.NsHandle, name string, args ...string) ([]byte, error) {
	var out []byte
	err := Do(ns, func() error {
		var err error
		out, err = exec.Command(name, args...).CombinedOutput()
		return err
	})
	return out, err
}

// Handle returns a netlink handle bound to the namespace.
func (e *End) Handle() *netlink.Handle { return e.h }

// Close removes the namespaces and so the veth pairs. Sockets still open in
// them keep them alive until they are closed.
func (p *Pair) Close() {
	if m := p.M; m != nil {
		if m.h != nil {
			m.h.Close()
			m.h = nil
		}
		if m.NS >= 0 {
			m.NS.Close()
			m.NS = -1
		}
	}
	for _, e := range []*End{p.A, p.B} {
		if e.h != nil {
			e.h.Close()
			e.h = nil
		}
		if e.NS >= 0 {
			e.NS.Close()
			e.NS = -1
		}
	}
}
