package afpacket

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/nic/internal/linktest"
	"github.com/goroce/goroce/nic/udp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func openAFP(t *testing.T, e *netns.End, cfg Config) *Link {
	t.Helper()
	if cfg.Interface == "" {
		cfg.Interface = e.Link
	}
	return linktest.OpenIn(t, e, func() (*Link, error) { return Open(cfg) })
}

// waitNeighbour waits until the link knows the next hop's MAC for dst.
func waitNeighbour(t *testing.T, l *Link, dst netip.Addr) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		if _, ok := l.eth.Hops.Lookup(dst); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: next hop for %v not resolved in 3 s", l.Info().Name, dst)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestAFPacketVeth: two AF_PACKET links across a veth pair, both ways,
// IPv4 and IPv6, 1024-byte payloads at MTU 1500 and 4096 at MTU 4200.
func TestAFPacketVeth(t *testing.T) {
	for _, mtu := range []int{1500, 4200} {
		p := linktest.VethPair(t, mtu)
		payload := 1024
		if mtu > 4000 {
			payload = 4096
		}
		a := openAFP(t, p.A, Config{})
		b := openAFP(t, p.B, Config{})
		if a.Info().MTU != mtu || len(a.Info().Addrs) != 3 {
			t.Fatalf("info %+v", a.Info())
		}
		for _, fam := range []string{"ipv4", "ipv6"} {
			t.Run(fam+"/mtu"+strconv.Itoa(mtu), func(t *testing.T) {
				aa, ba := p.A.IPv4, p.B.IPv4
				if fam == "ipv6" {
					aa, ba = p.A.IPv6, p.B.IPv6
				}
				// The first frame finds no neighbour entry: dropped, counted.
				before := a.Stats().TxNoNeighbour
				a.Send(linktest.Warmup(linktest.Outer(a, ba, 1)))
				if a.Stats().TxNoNeighbour != before+1 {
					t.Fatalf("unresolved next hop not counted: %+v", a.Stats())
				}
				waitNeighbour(t, a, ba)
				b.Send(linktest.Warmup(linktest.Outer(b, aa, 1)))
				waitNeighbour(t, b, aa)
				linktest.Exchange(t, a, b, linktest.Outer(a, ba, 5), 2000, payload, 64)
				linktest.Exchange(t, b, a, linktest.Outer(b, aa, 6), 2000, payload, 64)
				linktest.Exchange(t, a, b, linktest.Outer(a, ba, 5), 100, 0, 64)
			})
		}
	}
}

// TestAFPacketWithUDP checks interoperation with the kernel stack: frames
// an AF_PACKET link builds are accepted by a UDP socket on the peer (IPv4
// and IPv6 with a zero UDP checksum), and the UDP link's packets reach the
// AF_PACKET link with ICRCs that verify. On the AF_PACKET side the host
// must not answer with ICMP port unreachable, and does without the guard.
//
// A veth hands a UDP GSO send to the peer unsegmented, and AF_PACKET then
// sees one super-packet; a NIC segments before the wire. The UDP side's
// veth therefore has tx-udp-segmentation off, so the kernel segments in
// software as it would for a NIC without USO (see the report on GSO
// super-packets reaching AF_PACKET).
func TestAFPacketWithUDP(t *testing.T) {
	p := linktest.VethPair(t, 1500)
	if out, err := p.B.Run("ethtool", "-K", p.B.Link, "tx-udp-segmentation", "off"); err != nil {
		t.Fatalf("ethtool: %v: %s", err, out)
	}
	for _, guard := range []bool{true, false} {
		t.Run("guard="+strconv.FormatBool(guard), func(t *testing.T) {
			a := openAFP(t, p.A, Config{NoGuard: !guard})
			for _, fam := range []string{"ipv4", "ipv6"} {
				aa, ba := p.A.IPv4, p.B.IPv4
				if fam == "ipv6" {
					aa, ba = p.A.IPv6, p.B.IPv6
				}
				b := linktest.OpenIn(t, p.B, func() (*udp.Link, error) { return udp.Open(udp.Config{Addr: ba}) })
				icmp := linktest.StartCapture(t, p.B)
				a.Send(linktest.Warmup(linktest.Outer(a, ba, 1)))
				waitNeighbour(t, a, ba)
				linktest.Exchange(t, a, b, linktest.Outer(a, ba, 3), 500, 1024, 64)
				linktest.Exchange(t, b, a, linktest.Outer(b, aa, 4), 500, 1024, 64)
				n := icmp.Count(t, linktest.IsPortUnreachable, 300*time.Millisecond)
				if guard && n != 0 {
					t.Fatalf("%s: host sent %d ICMP port unreachable despite the guard", fam, n)
				}
				if !guard && n == 0 {
					t.Fatalf("%s: no ICMP without the guard: the test cannot see what it checks", fam)
				}
				b.Close()
			}
		})
	}
}

// TestAFPacketVLAN sends tagged frames with a priority: the peer's
// AF_PACKET link accepts them (the kernel strips the tag into metadata or
// leaves it in the data; the filter takes both).
func TestAFPacketVLAN(t *testing.T) {
	p := linktest.VethPair(t, 1500)
	a := openAFP(t, p.A, Config{VLAN: 5, Priority: 3})
	b := openAFP(t, p.B, Config{})
	// A VLAN-tagged frame is not resolved through the tag: seed the
	// neighbour through the untagged interface.
	a.Send(linktest.Warmup(linktest.Outer(a, p.B.IPv4, 1)))
	waitNeighbour(t, a, p.B.IPv4)
	c := linktest.StartCapture(t, p.B)
	frames := linktest.Warmup(linktest.Outer(a, p.B.IPv4, 2))
	a.Send(frames)
	h := frames[0].B[frames[0].Off-18 : frames[0].Off]
	if h[12] != 0x81 || h[13] != 0 || h[14] != 3<<5 || h[15] != 5 {
		t.Fatalf("tag % x", h[12:16])
	}
	// The wire carries the tag: B's end receives the frame with VLAN 5,
	// priority 3 (the kernel moves a received tag into metadata, so it
	// comes as PACKET_AUXDATA) and the rest byte for byte. The capture was
	// opened on A and never read, so only the built bytes were checked;
	// A's sends skip the qdisc and with it A's taps.
	sent := frames[0].B[frames[0].Off-18 : frames[0].Off+len(frames[0].Datagram())]
	untagged := append(append([]byte(nil), sent[:12]...), sent[16:]...)
	if err := unix.SetsockoptInt(c.FD, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
		t.Fatal(err)
	}
	tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
	unix.SetsockoptTimeval(c.FD, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	buf, oob := make([]byte, 70000), make([]byte, 256)
	for deadline := time.Now().Add(5 * time.Second); ; { // an upper bound on waiting for the frame
		n, oobn, _, _, err := unix.Recvmsg(c.FD, buf, oob, 0)
		if err == nil && (bytes.Equal(buf[:n], sent) || bytes.Equal(buf[:n], untagged)) {
			tci, ok := uint16(0), false
			if bytes.Equal(buf[:n], sent) {
				tci, ok = uint16(buf[14])<<8|uint16(buf[15]), true
			}
			msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
			for _, m := range msgs {
				if m.Header.Level == unix.SOL_PACKET && m.Header.Type == unix.PACKET_AUXDATA &&
					len(m.Data) >= int(unsafe.Sizeof(unix.TpacketAuxdata{})) {
					aux := (*unix.TpacketAuxdata)(unsafe.Pointer(&m.Data[0]))
					if aux.Status&unix.TP_STATUS_VLAN_VALID != 0 {
						tci, ok = aux.Vlan_tci, true
					}
				}
			}
			if !ok || tci != 3<<13|5 {
				t.Fatalf("received frame: tag present %v, TCI %#04x, want %#04x", ok, tci, 3<<13|5)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the tagged frame never reached B")
		}
	}
	linktest.Exchange(t, a, b, linktest.Outer(a, p.B.IPv4, 2), 300, 1024, 64)
}

func TestAFPacketAllocs(t *testing.T) {
	p := linktest.VethPair(t, 1500)
	a := openAFP(t, p.A, Config{})
	b := openAFP(t, p.B, Config{})
	a.Send(linktest.Warmup(linktest.Outer(a, p.B.IPv4, 1)))
	waitNeighbour(t, a, p.B.IPv4)
	frames := linktest.Frames(linktest.Outer(a, p.B.IPv4, 1), 32, 1024)
	// The MACs are known by now: the resolvers can stop, their refresh
	// allocates (see linktest.AssertNoAllocs).
	a.eth.StopResolver()
	b.eth.StopResolver()
	linktest.AssertNoAllocs(t, a, b, frames)
}

// waitKernelNeighbour waits until the kernel's neighbour table in e's
// namespace holds a MAC for dst.
func waitKernelNeighbour(t *testing.T, e *netns.End, dst netip.Addr) {
	t.Helper()
	fam := netlink.FAMILY_V4
	if dst.Is6() && !dst.Is4In6() {
		fam = netlink.FAMILY_V6
	}
	err := e.Do(func() error {
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			ns, err := netlink.NeighList(e.Index, fam)
			if err != nil {
				return err
			}
			for _, n := range ns {
				if n.IP.Equal(dst.AsSlice()) && len(n.HardwareAddr) == 6 &&
					n.State&(netlink.NUD_REACHABLE|netlink.NUD_STALE|netlink.NUD_DELAY|netlink.NUD_PROBE|netlink.NUD_PERMANENT) != 0 {
					return nil
				}
			}
		}
		return fmt.Errorf("the kernel did not resolve %v in 5 s", dst)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAFPacketKnownNeighbour: when the kernel already knows the peer's
// MAC (here from a datagram the stack sent, as the out-of-band TCP
// exchange before a UD pingpong leaves it), the very first frame to it
// goes out instead of being dropped while the resolver looks.
func TestAFPacketKnownNeighbour(t *testing.T) {
	p := linktest.VethPair(t, 1500)
	for _, fam := range []string{"ipv4", "ipv6"} {
		aa, ba := p.A.IPv4, p.B.IPv4
		if fam == "ipv6" {
			aa, ba = p.A.IPv6, p.B.IPv6
		}
		if err := p.A.Do(func() error {
			c, err := net.Dial("udp", netip.AddrPortFrom(ba, 9).String())
			if err == nil {
				_, err = c.Write([]byte{0}) // the stack resolves ba's MAC to send it
				c.Close()
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		waitKernelNeighbour(t, p.A, ba) // ARP or ND answered
		a := openAFP(t, p.A, Config{Addrs: []netip.Addr{aa}})
		b := openAFP(t, p.B, Config{Addrs: []netip.Addr{ba}})
		linktest.Exchange(t, a, b, linktest.Outer(a, ba, 1), 1, 100, 1)
		if s := a.Stats(); s.TxNoNeighbour != 0 {
			t.Fatalf("%s: first frame dropped for want of a neighbour the kernel knew: %+v", fam, s)
		}
		a.Close()
		b.Close()
	}
}

// TestAFPacketCutsGSO: with the veth's offloads on, the UDP link's GSO
// sends reach the AF_PACKET link as super-frames; it cuts them into the
// datagrams a wire would have carried, every ICRC verifying (the IPv4
// identification of segment k is k, which the UDP link's ICRC assumed).
func TestAFPacketCutsGSO(t *testing.T) {
	p := linktest.VethPair(t, 4200)
	a := openAFP(t, p.A, Config{})
	for _, fam := range []string{"ipv4", "ipv6"} {
		aa, ba := p.A.IPv4, p.B.IPv4
		if fam == "ipv6" {
			aa, ba = p.A.IPv6, p.B.IPv6
		}
		b := linktest.OpenIn(t, p.B, func() (*udp.Link, error) { return udp.Open(udp.Config{Addr: ba}) })
		a.Send(linktest.Warmup(linktest.Outer(a, ba, 1)))
		waitNeighbour(t, a, ba)
		before := a.Stats()
		for _, size := range []int{1024, 4096} {
			linktest.Exchange(t, b, a, linktest.Outer(b, aa, 4), 2000, size, 64)
			linktest.Exchange(t, a, b, linktest.Outer(a, ba, 3), 500, size, 64)
		}
		after, tx := a.Stats(), b.Stats()
		if tx.TxGSOSegments == 0 || after.RxGROSegments == before.RxGROSegments || after.RxDropped != before.RxDropped {
			t.Fatalf("%s: sent %d as GSO segments; AF_PACKET cut %d from super-frames, dropped %d",
				fam, tx.TxGSOSegments, after.RxGROSegments-before.RxGROSegments, after.RxDropped-before.RxDropped)
		}
		t.Logf("%s: %d datagrams cut from super-frames", fam, after.RxGROSegments-before.RxGROSegments)
		b.Close()
	}
}

// TestAFPacketPoller: the link is a nic.Poller (a non-blocking recvmmsg
// per poll); the contract's checks (linktest.PollHold).
func TestAFPacketPoller(t *testing.T) {
	p := linktest.VethPair(t, 1500)
	a := openAFP(t, p.A, Config{})
	b := openAFP(t, p.B, Config{})
	linktest.Resolve(t, a, b, linktest.Outer(a, p.B.IPv4, 1), func() { waitNeighbour(t, a, p.B.IPv4) })
	linktest.PollHold(t, a, b, linktest.Outer(a, p.B.IPv4, 7), 4000)
}
