package netns

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// TestPairCarriesUDP sends one datagram each way over IPv4 and IPv6 and
// checks the MTU.
func TestPairCarriesUDP(t *testing.T) {
	p := New(t, Config{MTU: 4200})
	for _, fam := range []struct{ a, b netip.Addr }{{p.A.IPv4, p.B.IPv4}, {p.A.IPv6, p.B.IPv6}} {
		var ca, cb *net.UDPConn
		if err := p.A.Do(func() (err error) {
			ca, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(fam.a, 0)))
			return
		}); err != nil {
			t.Fatal(err)
		}
		defer ca.Close()
		if err := p.B.Do(func() (err error) {
			cb, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(fam.b, 0)))
			return
		}); err != nil {
			t.Fatal(err)
		}
		defer cb.Close()
		msg := make([]byte, 4000)
		if _, err := ca.WriteTo(msg, cb.LocalAddr()); err != nil {
			t.Fatal(err)
		}
		cb.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 5000)
		n, from, err := cb.ReadFromUDPAddrPort(buf)
		if err != nil || n != len(msg) || from.Addr() != fam.a {
			t.Fatalf("%v -> %v: n=%d from=%v err=%v", fam.a, fam.b, n, from, err)
		}
	}
	l, err := p.B.Handle().LinkByName(p.B.Link)
	if err != nil || l.Attrs().MTU != 4200 {
		t.Fatalf("MTU: %v %v", l, err)
	}
}

// TestPairNetem installs netem where the kernel has it and otherwise checks
// that the failure names the missing kernel option. (This machine's kernel
// is built without CONFIG_NET_SCH_NETEM; loss and reordering tests of the
// engine use the in-memory link's fault injection instead.)
func TestPairNetem(t *testing.T) {
	Privileged(t)
	cfg := Config{Netem: &netlink.NetemQdiscAttrs{Loss: 100}}
	p, err := build(cfg)
	defer p.Close()
	if err != nil {
		if !strings.Contains(err.Error(), "CONFIG_NET_SCH_NETEM") {
			t.Fatalf("netem failed without naming the kernel option: %v", err)
		}
		t.Logf("kernel has no netem: %v", err)
		return
	}
	qs, err := p.A.Handle().QdiscList(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Type() == "netem" && q.Attrs().LinkIndex == p.A.Index {
			return
		}
	}
	t.Fatalf("no netem qdisc on %s: %v", p.A.Link, qs)
}

// TestPairClose checks that Close releases the namespaces: running in one
// afterwards fails, and a second Close is harmless.
func TestPairClose(t *testing.T) {
	Privileged(t)
	p, err := build(Config{})
	p.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.A.Do(func() error { return nil }); err == nil {
		t.Fatal("Do in a closed namespace succeeded")
	}
	p.Close()
}

// TestMiddle builds A <-> M <-> B: the middle's interfaces exist, are up
// with the pair's MTU and no IPv6, and nothing crosses until something in
// M forwards (nic/impair's tests forward through it).
func TestMiddle(t *testing.T) {
	p := New(t, Config{MTU: 1500, Middle: true})
	if p.M == nil {
		t.Fatal("no middle namespace")
	}
	for _, name := range []string{p.M.ToA, p.M.ToB} {
		l, err := p.M.h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if l.Attrs().MTU != 1500 || l.Attrs().Flags&net.FlagUp == 0 {
			t.Fatalf("%s: MTU %d flags %v", name, l.Attrs().MTU, l.Attrs().Flags)
		}
		out, err := p.M.Run("cat", "/proc/sys/net/ipv6/conf/"+name+"/disable_ipv6")
		if err != nil || strings.TrimSpace(string(out)) != "1" {
			t.Fatalf("%s disable_ipv6: %q %v", name, out, err)
		}
	}
	var ca, cb *net.UDPConn
	if err := p.A.Do(func() (err error) {
		ca, err = net.ListenUDP("udp4", &net.UDPAddr{IP: p.A.IPv4.AsSlice()})
		return
	}); err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	if err := p.B.Do(func() (err error) {
		cb, err = net.ListenUDP("udp4", &net.UDPAddr{IP: p.B.IPv4.AsSlice()})
		return
	}); err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	ca.WriteTo([]byte("x"), cb.LocalAddr())
	cb.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, _, err := cb.ReadFrom(make([]byte, 10)); err == nil {
		t.Fatalf("%d bytes crossed the middle with nothing forwarding", n)
	}
}
