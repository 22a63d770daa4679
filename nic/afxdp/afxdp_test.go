package afxdp

import (
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/internal/linktest"
	"github.com/goroce/goroce/nic/netdev"
	"github.com/goroce/goroce/nic/udp"
	"golang.org/x/sys/unix"
)

func openXDP(t *testing.T, e *netns.End, cfg Config) *Link {
	t.Helper()
	if cfg.Interface == "" {
		cfg.Interface = e.Link
	}
	return linktest.OpenIn(t, e, func() (*Link, error) { return Open(cfg) })
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
				p := linktest.VethPair(t, mtu)
				payload := 1024
				if mtu > 4000 {
					payload = 4096
				}
				a := openXDP(t, p.A, Config{Native: native})
				b := openXDP(t, p.B, Config{Native: native})
				if !a.frags {
					t.Fatal("kernel refused a frags-aware XDP program (6.0+ has them)")
				}
				for _, fam := range []string{"ipv4", "ipv6"} {
					aa, ba := p.A.IPv4, p.B.IPv4
					if fam == "ipv6" {
						aa, ba = p.A.IPv6, p.B.IPv6
					}
					a.Send(linktest.Warmup(linktest.Outer(a, ba, 1)))
					b.Send(linktest.Warmup(linktest.Outer(b, aa, 1)))
					waitNH(t, a.eth.Hops, ba)
					waitNH(t, b.eth.Hops, aa)
					linktest.Exchange(t, a, b, linktest.Outer(a, ba, 5), 2000, payload, 64)
					linktest.Exchange(t, b, a, linktest.Outer(b, aa, 6), 2000, payload, 64)
					linktest.Exchange(t, a, b, linktest.Outer(a, ba, 5), 100, 0, 32)
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
	p := linktest.VethPair(t, 1500)
	if out, err := p.B.Run("ethtool", "-K", p.B.Link, "tx-udp-segmentation", "off"); err != nil {
		t.Fatalf("ethtool: %v: %s", err, out)
	}
	a := openXDP(t, p.A, Config{})
	for _, fam := range []string{"ipv4", "ipv6"} {
		aa, ba := p.A.IPv4, p.B.IPv4
		if fam == "ipv6" {
			aa, ba = p.A.IPv6, p.B.IPv6
		}
		b := linktest.OpenIn(t, p.B, func() (*udp.Link, error) { return udp.Open(udp.Config{Addr: ba}) })
		icmp := linktest.StartCapture(t, p.B)
		a.Send(linktest.Warmup(linktest.Outer(a, ba, 1)))
		waitNH(t, a.eth.Hops, ba)
		linktest.Exchange(t, a, b, linktest.Outer(a, ba, 3), 500, 1024, 64)
		linktest.Exchange(t, b, a, linktest.Outer(b, aa, 4), 500, 1024, 64)
		if n := icmp.Count(t, linktest.IsPortUnreachable, 300*time.Millisecond); n != 0 {
			t.Fatalf("%s: %d ICMP port unreachable from the AF_XDP host", fam, n)
		}
		b.Close()
	}
}

// TestAFXDPErrors: a queue that does not exist and zero-copy on veth fail
// with messages that say why.
func TestAFXDPErrors(t *testing.T) {
	p := linktest.VethPair(t, 1500)
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Interface: p.A.Link, Queue: 7}, "queue 7 does not exist"},
		{Config{Interface: p.A.Link, ZeroCopy: true, Frames: 64}, "zero-copy needs driver support"},
		{Config{Interface: "nosuch0"}, "nosuch0"},
	} {
		err := p.A.Do(func() error {
			l, err := Open(c.cfg)
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
	p := linktest.VethPair(t, 4200)
	a := openXDP(t, p.A, Config{Native: true})
	b := openXDP(t, p.B, Config{Native: true})
	a.Send(linktest.Warmup(linktest.Outer(a, p.B.IPv4, 1)))
	waitNH(t, a.eth.Hops, p.B.IPv4)
	// 4096-byte payloads: the multi-buffer path on both sides.
	frames := linktest.Frames(linktest.Outer(a, p.B.IPv4, 1), 32, 4096)
	// The MACs are known by now: the resolvers can stop, their refresh
	// allocates (see linktest.AssertNoAllocs).
	a.eth.StopResolver()
	b.eth.StopResolver()
	linktest.AssertNoAllocs(t, a, b, frames)
}

// TestAFXDPPoller: the link is a nic.Poller whose polls read the rx ring
// without a system call; the contract's checks (linktest.PollHold), in
// generic mode, where a poll and the receiver share the one ring.
func TestAFXDPPoller(t *testing.T) {
	p := linktest.VethPair(t, 1500)
	a := openXDP(t, p.A, Config{})
	b := openXDP(t, p.B, Config{})
	linktest.Resolve(t, a, b, linktest.Outer(a, p.B.IPv4, 1), func() { waitNH(t, a.eth.Hops, p.B.IPv4) })
	linktest.PollHold(t, a, b, linktest.Outer(a, p.B.IPv4, 7), 4000)
}

// TestAFXDPCloseWhileHeld: Close while a poller holds frames leaves them
// readable until it lets go, which then frees the rings.
func TestAFXDPCloseWhileHeld(t *testing.T) {
	p := linktest.VethPair(t, 1500)
	a := openXDP(t, p.A, Config{})
	b := openXDP(t, p.B, Config{})
	a.Send(linktest.Warmup(linktest.Outer(a, p.B.IPv4, 1)))
	waitNH(t, a.eth.Hops, p.B.IPv4)
	o := linktest.Outer(a, p.B.IPv4, 7)
	if n, err := a.Send(linktest.Frames(o, 4, 16)); n != 4 || err != nil {
		t.Fatal(n, err)
	}
	buf := make([]nic.Frame, 8)
	got := 0
	deadline := time.Now().Add(30 * time.Second)
	for got == 0 {
		if time.Now().After(deadline) {
			t.Fatal("nothing came to the poller in 30 s")
		}
		if got = b.PollQueue(0, buf); got == 0 {
			runtime.Gosched()
		}
	}
	b.Close()
	if b.umem == nil {
		t.Fatal("Close unmapped the UMEM while a poller held frames")
	}
	for _, f := range buf[:got] {
		if !linktest.IsWarmup(f) {
			if _, err := linktest.CheckFrame(f, o, 16); err != nil {
				t.Fatalf("a held frame after Close: %v", err)
			}
		}
	}
	b.EndPoll(0)
	if b.umem != nil {
		t.Fatal("the poller let go after Close and the UMEM is still mapped")
	}
	if n := b.PollQueue(0, buf); n != 0 {
		t.Fatalf("a poll after Close took %d frames", n)
	}
	if _, err := b.Recv(buf); err == nil {
		t.Fatal("Recv after Close: no error")
	}
}

// TestAFXDPSingleChunk: a socket without multi-buffer frames (kernels
// before 6.6, which refuse XDP_USE_SG) has the MTU one chunk holds, and
// carries the frames that fit.
func TestAFXDPSingleChunk(t *testing.T) {
	p := linktest.VethPair(t, 4200)
	a := openXDP(t, p.A, Config{noSG: true})
	b := openXDP(t, p.B, Config{noSG: true})
	if a.sg || a.Info().MTU != maxSingleChunkMTU {
		t.Fatalf("without XDP_USE_SG: sg %v, MTU %d; want MTU %d", a.sg, a.Info().MTU, maxSingleChunkMTU)
	}
	a.Send(linktest.Warmup(linktest.Outer(a, p.B.IPv4, 1)))
	waitNH(t, a.eth.Hops, p.B.IPv4)
	linktest.Exchange(t, a, b, linktest.Outer(a, p.B.IPv4, 5), 1000, 2048, 64)
}

// TestAFXDPKickAfterClose: a Send that passed its check for Close before
// Close closed the socket (it holds txMu; Close does not take it to close
// the socket) kicks nothing: by then the descriptor's number may be
// another socket's, here a connected UDP socket put there with dup2, which
// a sendto on the bare number would send an empty datagram.
func TestAFXDPKickAfterClose(t *testing.T) {
	p := linktest.VethPair(t, 1500)
	l := openXDP(t, p.A, Config{})
	fd := l.fd
	// The sockets exist before the number is freed, so neither takes it.
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	tx, err := net.DialUDP("udp4", nil, rx.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	l.txMu.Lock() // a Send, past its check for Close
	closed := make(chan struct{})
	go func() { l.Close(); close(closed) }()
	// Close closes the socket, then waits for txMu to unmap the rings.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == unix.EBADF {
			break
		}
		if time.Now().After(deadline) {
			l.txMu.Unlock()
			t.Fatal("Close did not close the socket in 30 s")
		}
		runtime.Gosched()
	}
	raw, _ := tx.SyscallConn()
	raw.Control(func(u uintptr) { err = unix.Dup2(int(u), fd) })
	if err != nil {
		l.txMu.Unlock()
		t.Fatal(err)
	}
	defer unix.Close(fd)
	prod := *l.tx.prod
	*l.tx.prod = *l.tx.cons + 1 // something to send, as the Send queued
	l.kick()
	*l.tx.prod = prod
	l.txMu.Unlock()
	<-closed
	// Loopback keeps one socket's datagrams in order: the marker comes
	// first unless the kick sent an empty one before it.
	if _, err := tx.Write([]byte("marker")); err != nil {
		t.Fatal(err)
	}
	rx.SetReadDeadline(time.Now().Add(30 * time.Second))
	b := make([]byte, 64)
	n, err := rx.Read(b)
	if err != nil || string(b[:n]) != "marker" {
		t.Fatalf("the socket that took the closed descriptor's number received %q (%v) first: the kick reached it", b[:n], err)
	}
}
