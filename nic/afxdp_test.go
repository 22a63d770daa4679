package nic

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/nic/netdev"
)

func openXDP(t *testing.T, e *netns.End, cfg AFXDPConfig) *AFXDP {
	t.Helper()
	if cfg.Interface == "" {
		cfg.Interface = e.Link
	}
	return openIn(t, e, func() (*AFXDP, error) { return OpenAFXDP(cfg) })
}

// TestAFXDPVeth: AF_XDP links on both ends of a veth pair, in generic and
// native mode, IPv4 and IPv6, 1024-byte payloads at MTU 1500 and 4096 at
// MTU 4200 (multi-buffer: a 4168-byte frame does not fit a 4 KiB chunk).
func TestAFXDPVeth(t *testing.T) {
	for _, native := range []bool{false, true} {
		for _, mtu := range []int{1500, 4200} {
			name := "generic"
			if native {
				name = "native"
			}
			t.Run(name+"/mtu"+strconv.Itoa(mtu), func(t *testing.T) {
				p := vethPair(t, mtu)
				payload := 1024
				if mtu > 4000 {
					payload = 4096
				}
				a := openXDP(t, p.A, AFXDPConfig{Native: native})
				b := openXDP(t, p.B, AFXDPConfig{Native: native})
				if !a.frags {
					t.Fatal("kernel refused a frags-aware XDP program (6.0+ has them)")
				}
				for _, fam := range []string{"ipv4", "ipv6"} {
					aa, ba := p.A.IPv4, p.B.IPv4
					if fam == "ipv6" {
						aa, ba = p.A.IPv6, p.B.IPv6
					}
					a.Send(warmup(outer(a, ba, 1)))
					b.Send(warmup(outer(b, aa, 1)))
					waitNH(t, a.eth.Hops, ba)
					waitNH(t, b.eth.Hops, aa)
					exchange(t, a, b, outer(a, ba, 5), 2000, payload, 64)
					exchange(t, b, a, outer(b, aa, 6), 2000, payload, 64)
					exchange(t, a, b, outer(a, ba, 5), 100, 0, 32)
				}
				t.Logf("rx %+v", b.Stats())
			})
		}
	}
}

// waitNH waits until a resolver knows dst's next hop.
func waitNH(t *testing.T, nh *netdev.NextHops, dst netip.Addr) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if nh.Resolved(dst) {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("next hop for %v not resolved in 3 s", dst)
}

// TestAFXDPWithUDP: an AF_XDP link and the kernel's UDP stack on the peer
// interoperate both ways, and the host behind the AF_XDP link sends no
// ICMP port unreachable.
func TestAFXDPWithUDP(t *testing.T) {
	p := vethPair(t, 1500)
	if out, err := p.B.Run("ethtool", "-K", p.B.Link, "tx-udp-segmentation", "off"); err != nil {
		t.Fatalf("ethtool: %v: %s", err, out)
	}
	a := openXDP(t, p.A, AFXDPConfig{})
	for _, fam := range []string{"ipv4", "ipv6"} {
		aa, ba := p.A.IPv4, p.B.IPv4
		if fam == "ipv6" {
			aa, ba = p.A.IPv6, p.B.IPv6
		}
		b := openIn(t, p.B, func() (*UDP, error) { return OpenUDP(UDPConfig{Addr: ba}) })
		icmp := startCapture(t, p.B)
		a.Send(warmup(outer(a, ba, 1)))
		waitNH(t, a.eth.Hops, ba)
		exchange(t, a, b, outer(a, ba, 3), 500, 1024, 64)
		exchange(t, b, a, outer(b, aa, 4), 500, 1024, 64)
		if n := icmp.count(t, isPortUnreachable, 300*time.Millisecond); n != 0 {
			t.Fatalf("%s: %d ICMP port unreachable from the AF_XDP host", fam, n)
		}
		b.Close()
	}
}

// TestAFXDPErrors: a queue that does not exist and zero-copy on veth fail
// with messages that say why.
func TestAFXDPErrors(t *testing.T) {
	p := vethPair(t, 1500)
	for _, c := range []struct {
		cfg  AFXDPConfig
		want string
	}{
		{AFXDPConfig{Interface: p.A.Link, Queue: 7}, "queue 7 does not exist"},
		{AFXDPConfig{Interface: p.A.Link, ZeroCopy: true, Frames: 64}, "zero-copy needs driver support"},
		{AFXDPConfig{Interface: "nosuch0"}, "nosuch0"},
	} {
		err := p.A.Do(func() error {
			l, err := OpenAFXDP(c.cfg)
			if err == nil {
				l.Close()
			}
			return err
		})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one containing %q", c.cfg, err, c.want)
		}
	}
}

func TestAFXDPAllocs(t *testing.T) {
	p := vethPair(t, 4200)
	a := openXDP(t, p.A, AFXDPConfig{Native: true})
	b := openXDP(t, p.B, AFXDPConfig{Native: true})
	a.Send(warmup(outer(a, p.B.IPv4, 1)))
	waitNH(t, a.eth.Hops, p.B.IPv4)
	// 4096-byte payloads: the multi-buffer path on both sides.
	frames := testFrames(outer(a, p.B.IPv4, 1), 32, 4096)
	assertNoAllocs(t, a, b, frames)
}
