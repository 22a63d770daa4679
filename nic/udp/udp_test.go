package udp

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/internal/linkio"
	"github.com/goroce/goroce/nic/internal/linktest"
	"golang.org/x/sys/unix"
)

func openUDP(t *testing.T, cfg Config) *Link {
	t.Helper()
	return linktest.Open(t, func() (*Link, error) { return Open(cfg) })
}

// TestUDPLoopbackTwoInstances runs two links on one host, on 127.0.0.1 and
// 127.0.0.2, both on port 4791, and sends both ways: no privilege needed.
func TestUDPLoopbackTwoInstances(t *testing.T) {
	for _, mode := range []struct {
		name         string
		noGSO, noGRO bool
	}{{"gso+gro", false, false}, {"plain", true, true}, {"gso-only", false, true}, {"gro-only", true, false}} {
		t.Run(mode.name, func(t *testing.T) {
			a := openUDP(t, Config{Addr: netip.MustParseAddr("127.0.0.1"), NoGSO: mode.noGSO, NoGRO: mode.noGRO})
			b := openUDP(t, Config{Addr: netip.MustParseAddr("127.0.0.2"), NoGSO: mode.noGSO, NoGRO: mode.noGRO})
			if a.GSO() == mode.noGSO || a.GRO() == mode.noGRO {
				t.Fatalf("GSO %v GRO %v; the kernel (4.18+/5.0+) has both", a.GSO(), a.GRO())
			}
			for _, size := range []int{0, 64, 1024, 4096} {
				linktest.Exchange(t, a, b, linktest.Outer(a, netip.MustParseAddr("127.0.0.2"), 7), 500, size, 64)
				linktest.Exchange(t, b, a, linktest.Outer(b, netip.MustParseAddr("127.0.0.1"), 9), 500, size, 17)
			}
			if s := b.Stats(); s.RxIDUnsolved != 0 || s.RxDropped != 0 {
				t.Fatalf("receiver stats %+v", s)
			}
			s := a.Stats()
			if !mode.noGSO && s.TxGSOSegments == 0 {
				t.Fatalf("no GSO segments sent: %+v", s)
			}
			// On loopback a GSO send reaches a GRO socket whole.
			if !mode.noGSO && !mode.noGRO && b.Stats().RxGROSegments == 0 {
				t.Fatalf("GSO to a GRO socket arrived uncoalesced: %+v", b.Stats())
			}
			t.Logf("tx %+v", s)
			if mode.noGSO && s.TxGSOSegments != 0 {
				t.Fatalf("GSO used although turned off: %+v", s)
			}
		})
	}
}

// TestUDPNoNetpoll exchanges frames both ways between two links whose
// sockets are out of the network poller (their waits are ppoll calls),
// without an allocation per packet.
func TestUDPNoNetpoll(t *testing.T) {
	a := openUDP(t, Config{Addr: netip.MustParseAddr("127.0.20.3"), NoNetpoll: true})
	b := openUDP(t, Config{Addr: netip.MustParseAddr("127.0.20.4"), NoNetpoll: true})
	for _, size := range []int{0, 1024, 4096} {
		linktest.Exchange(t, a, b, linktest.Outer(a, netip.MustParseAddr("127.0.20.4"), 7), 500, size, 64)
		linktest.Exchange(t, b, a, linktest.Outer(b, netip.MustParseAddr("127.0.20.3"), 9), 500, size, 17)
	}
	linktest.AssertNoAllocs(t, a, b, linktest.Frames(linktest.Outer(a, netip.MustParseAddr("127.0.20.4"), 1), 32, 1024))
}

// TestUDPLeaveNetpoll opens two links in the network poller, takes them
// out (what a device in poll mode asks when it opens), and exchanges
// frames both ways on the same sockets, still without an allocation.
func TestUDPLeaveNetpoll(t *testing.T) {
	a := openUDP(t, Config{Addr: netip.MustParseAddr("127.0.20.5")})
	b := openUDP(t, Config{Addr: netip.MustParseAddr("127.0.20.6")})
	for _, l := range []*Link{a, b, a} { // the second call on a does nothing
		if err := l.LeaveNetpoll(); err != nil {
			t.Fatal(err)
		}
		for _, c := range []io.Closer{l.rxq[0].conn, l.tx[0].conn, l.tx[len(l.tx)-1].conn} {
			if _, ok := c.(*linkio.FD); !ok {
				t.Fatalf("after LeaveNetpoll a socket is a %T, not a linkio.FD", c)
			}
		}
	}
	for _, size := range []int{0, 1024, 4096} {
		linktest.Exchange(t, a, b, linktest.Outer(a, netip.MustParseAddr("127.0.20.6"), 7), 500, size, 64)
		linktest.Exchange(t, b, a, linktest.Outer(b, netip.MustParseAddr("127.0.20.5"), 9), 500, size, 17)
	}
	linktest.AssertNoAllocs(t, a, b, linktest.Frames(linktest.Outer(a, netip.MustParseAddr("127.0.20.6"), 1), 32, 1024))
}

// TestUDPLeaveNetpollAllOrNothing runs LeaveNetpoll out of descriptors:
// the receive socket's duplicate fits, the first send socket's does not.
// The call fails and says why, and the link keeps every socket it had, in
// the network poller, still carrying frames; with descriptors back, the
// same call takes them all out.
func TestUDPLeaveNetpollAllOrNothing(t *testing.T) {
	a := openUDP(t, Config{Addr: netip.MustParseAddr("127.0.20.7"), SrcPorts: 2})
	b := openUDP(t, Config{Addr: netip.MustParseAddr("127.0.20.8"), SrcPorts: 2})
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	// Fill every free descriptor number below the highest in use, so that
	// the next ones are handed out in order from n.
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	high := 0
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > high {
			high = n
		}
	}
	var fill []int
	n := -1
	for n <= high {
		if n, err = unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
			t.Fatal(err)
		}
		fill = append(fill, n)
	}
	unix.Close(n)
	defer func() {
		for _, f := range fill[:len(fill)-1] {
			unix.Close(f)
		}
	}()
	// n, n+1: the receive socket's duplicate and its eventfd; n+2: the
	// first send socket's duplicate; its eventfd finds no number left.
	low := lim
	low.Cur = uint64(n + 3)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	err = a.LeaveNetpoll()
	if rerr := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); rerr != nil {
		t.Fatal(rerr)
	}
	if err == nil || !strings.Contains(err.Error(), "network poller") {
		t.Fatalf("LeaveNetpoll out of descriptors: %v, want an error that says what failed", err)
	}
	t.Log(err)
	// sockets checks a's sockets are all of one kind; exchange sends both
	// ways.
	sockets := func(netpoll bool) {
		t.Helper()
		for _, c := range []io.Closer{a.rxq[0].conn, a.tx[0].conn, a.tx[1].conn} {
			if _, ok := c.(*net.UDPConn); ok != netpoll {
				t.Fatalf("a socket is a %T; in the network poller: want %v", c, netpoll)
			}
		}
	}
	exchange := func() {
		t.Helper()
		linktest.Exchange(t, a, b, linktest.Outer(a, netip.MustParseAddr("127.0.20.8"), 7), 200, 1024, 16)
		linktest.Exchange(t, b, a, linktest.Outer(b, netip.MustParseAddr("127.0.20.7"), 9), 200, 1024, 16)
	}
	sockets(true) // the failed call left every net.UDPConn as it was
	exchange()
	if err := a.LeaveNetpoll(); err != nil {
		t.Fatal(err)
	}
	sockets(false)
	exchange()
}

func TestUDPLoopbackIPv6(t *testing.T) {
	a := openUDP(t, Config{Addr: netip.MustParseAddr("::1")})
	// One IPv6 loopback address: the link talks to itself.
	linktest.Exchange(t, a, a, linktest.Outer(a, netip.MustParseAddr("::1"), 3), 300, 1024, 32)
}

// TestUDPSrcPorts checks that queue pairs spread over the bound ports and
// that a frame from a port the link does not hold is dropped and counted.
func TestUDPSrcPorts(t *testing.T) {
	a := openUDP(t, Config{Addr: netip.MustParseAddr("127.0.0.1"), SrcPorts: 4})
	ports := map[uint16]bool{}
	for q := uint32(0); q < 256; q++ {
		p := a.SrcPort(q)
		if p < 0xc000 {
			t.Fatalf("port %#x outside 0xC000..0xFFFF", p)
		}
		ports[p] = true
	}
	if len(ports) != 4 {
		t.Fatalf("%d ports used, want 4", len(ports))
	}
	o := linktest.Outer(a, netip.MustParseAddr("127.0.0.2"), 1)
	o.SrcPort = 0xbfff
	if n, err := a.Send(linktest.Frames(o, 3, 8)); n != 3 || err != nil || a.Stats().TxDropped != 3 {
		t.Fatalf("send from a foreign port: %d %v %+v", n, err, a.Stats())
	}
	// A second link on the same address cannot have 4791.
	if _, err := Open(Config{Addr: netip.MustParseAddr("127.0.0.1")}); err == nil {
		t.Fatal("second link on one address opened")
	}
}

// TestUDPHandsUpVerified: the UDP link verifies each IPv4 frame's ICRC as
// it recovers the IPv4 ID, and says so (Frame.Verified), so that the
// device does not compute it again; a frame whose ICRC is wrong, and an
// IPv6 frame (no ID, no ICRC computed), go up unverified.
func TestUDPHandsUpVerified(t *testing.T) {
	for _, tc := range []struct {
		name         string
		a, b         string
		corrupt      bool
		wantVerified bool
	}{
		{"ipv4", "127.0.0.1", "127.0.0.2", false, true},
		{"ipv4 bad ICRC", "127.0.0.1", "127.0.0.2", true, false},
		{"ipv6", "::1", "::1", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := openUDP(t, Config{Addr: netip.MustParseAddr(tc.a)})
			b := a
			if tc.b != tc.a {
				b = openUDP(t, Config{Addr: netip.MustParseAddr(tc.b)})
			}
			o := linktest.Outer(a, netip.MustParseAddr(tc.b), 5)
			fr := linktest.Frames(o, 3, 100)
			if tc.corrupt {
				for _, f := range fr {
					f.B[len(f.B)-1] ^= 0x40 // the ICRC's last byte
				}
			}
			if n, err := a.Send(fr); n != 3 || err != nil {
				t.Fatalf("sent %d: %v", n, err)
			}
			buf := make([]nic.Frame, 8)
			for got := 0; got < 3; {
				n, err := b.Recv(buf)
				if err != nil {
					t.Fatal(err)
				}
				for _, f := range buf[:n] {
					got++
					dec, err := bth.DecodeIP(f.Datagram())
					if err != nil {
						t.Fatal(err)
					}
					if f.Verified != tc.wantVerified {
						t.Errorf("verified %v, want %v (ICRC verifies: %v)", f.Verified, tc.wantVerified, dec.VerifyICRC())
					}
					if f.Verified && (!dec.VerifyICRC() || &f.Decoded.RoCE()[0] != &dec.RoCE()[0]) {
						t.Error("handed up verified, but Decoded is not the datagram or its ICRC fails")
					}
				}
			}
			want := uint64(0)
			if tc.corrupt {
				want = 3
			}
			if s := b.Stats(); s.RxIDUnsolved != want {
				t.Errorf("RxIDUnsolved %d, want %d", s.RxIDUnsolved, want)
			}
		})
	}
}

// TestUDPRejectsForeignHeaders: a frame whose source address is not the
// link's, or with a fragment offset, is dropped rather than sent with
// headers its ICRC does not match.
func TestUDPRejectsForeignHeaders(t *testing.T) {
	a := openUDP(t, Config{Addr: netip.MustParseAddr("127.0.0.1")})
	o := linktest.Outer(a, netip.MustParseAddr("127.0.0.2"), 1)
	o.Src = netip.MustParseAddr("127.0.0.3")
	fr := linktest.Frames(o, 1, 8)
	fr = append(fr, nic.Frame{B: make([]byte, 10), Off: 0}, nic.Frame{B: nil, Off: 5})
	if n, err := a.Send(fr); n != 3 || err != nil || a.Stats().TxDropped != 3 || a.Stats().TxPackets != 0 {
		t.Fatalf("%d %v %+v", n, err, a.Stats())
	}
}

func TestUDPAllocs(t *testing.T) {
	a := openUDP(t, Config{Addr: netip.MustParseAddr("127.0.0.1")})
	b := openUDP(t, Config{Addr: netip.MustParseAddr("127.0.0.2")})
	o := linktest.Outer(a, netip.MustParseAddr("127.0.0.2"), 1)
	linktest.AssertNoAllocs(t, a, b, linktest.Frames(o, 32, 1024))
}

// TestUDPLoopbackMTU: every 127/8 address is on lo, so a link on 127.0.0.2
// (not assigned, but local) has lo's MTU like one on 127.0.0.1.
func TestUDPLoopbackMTU(t *testing.T) {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skip("no lo:", err)
	}
	for _, a := range []string{"127.0.0.1", "127.0.0.2"} {
		l := openUDP(t, Config{Addr: netip.MustParseAddr(a)})
		if l.Info().MTU != lo.MTU {
			t.Errorf("link on %s: MTU %d, want lo's %d", a, l.Info().MTU, lo.MTU)
		}
		l.Close()
	}
}

// TestUDPSteering checks the receive queues' steering: packets to 60 QPs,
// interleaved, each arrive on queue nic.QueueOf(QPN), in the order sent, and on
// no other. The sender sends without GSO so that every packet is steered
// on its own (a GSO super-packet is steered by its first segment).
func TestUDPSteering(t *testing.T) {
	const queues, qps = 3, 60
	a := openUDP(t, Config{Addr: netip.MustParseAddr("127.0.0.1"), NoGSO: true})
	b := openUDP(t, Config{Addr: netip.MustParseAddr("127.0.0.2"), RxQueues: queues})
	if b.RxQueues() != queues {
		t.Fatalf("RxQueues %d", b.RxQueues())
	}
	o := linktest.Outer(a, netip.MustParseAddr("127.0.0.2"), 7)
	frames := linktest.Frames(o, qps, 16)
	for i, f := range frames {
		dg := f.Datagram()
		fr, err := bth.DecodeIP(dg)
		if err != nil {
			t.Fatal(err)
		}
		bth.BTH(fr.RoCE()).SetDestQP(uint32(0x11 + i))
		fr.PutICRC()
	}
	for i := range frames {
		if n, err := a.Send(frames[i : i+1]); n != 1 || err != nil {
			t.Fatalf("send %d: %d %v", i, n, err)
		}
	}
	// A packet steered to the wrong queue would leave its own queue's
	// read waiting: a bound on that wait closes the link.
	stop := time.AfterFunc(30*time.Second, func() { b.Close() })
	defer stop.Stop()
	got := make([]nic.Frame, 64)
	for q := range queues {
		var want []uint32
		for i := range qps {
			if nic.QueueOf(uint32(0x11+i), queues) == q {
				want = append(want, uint32(0x11+i))
			}
		}
		for len(want) > 0 {
			n, err := b.RecvQueue(q, got[:len(want)])
			if err != nil {
				t.Fatalf("queue %d, waiting for QPN %#x: %v", q, want[0], err)
			}
			for _, f := range got[:n] {
				fr, err := bth.DecodeIP(f.Datagram())
				if err != nil || !fr.VerifyICRC() {
					t.Fatalf("queue %d: bad frame (%v)", q, err)
				}
				if qpn := bth.BTH(fr.RoCE()).DestQP(); qpn != want[0] {
					t.Fatalf("queue %d: QPN %#x arrived, want %#x next (QueueOf says %d)", q, qpn, want[0], nic.QueueOf(qpn, queues))
				}
				want = want[1:]
			}
		}
	}
	if _, err := b.RecvQueue(queues, got); err == nil {
		t.Fatal("RecvQueue past the last queue succeeded")
	}
	// A second link on the address without SO_REUSEPORT still fails to
	// bind, as one without queues does.
	if l, err := Open(Config{Addr: netip.MustParseAddr("127.0.0.2")}); err == nil {
		l.Close()
		t.Fatal("a second link bound 127.0.0.2:4791 beside a queued one")
	}
	if _, err := Open(Config{Addr: netip.MustParseAddr("127.0.0.3"), RxQueues: nic.MaxRxQueues + 1}); err == nil {
		t.Fatal("too many queues accepted")
	}
}

// TestUDPPoller checks the link's nic.Poller: the receiver and a poller
// share a queue, one holder at a time, with and without GRO, with busy
// polling (whose receiver asks the socket again and again without
// waiting), and with the sockets out of the network poller (NoNetpoll).
func TestUDPPoller(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
	}{{"gro", Config{}}, {"plain", Config{NoGRO: true}}, {"busy", Config{BusyPoll: 50 * time.Microsecond}},
		{"nonetpoll", Config{NoNetpoll: true}}, {"nonetpoll-busy", Config{NoNetpoll: true, BusyPoll: 50 * time.Microsecond}}} {
		t.Run(c.name, func(t *testing.T) {
			a := openUDP(t, Config{Addr: netip.MustParseAddr("127.0.20.1")})
			cfg := c.cfg
			cfg.Addr = netip.MustParseAddr("127.0.20.2")
			b := openUDP(t, cfg)
			linktest.PollHold(t, a, b, linktest.Outer(a, cfg.Addr, 5), 3000)
		})
	}
}

// TestUDPShortLastSegmentJoins: a frame no longer than the one before it
// to the same destination joins that frame's GSO message as its last
// segment (what lets the engine's acknowledgement, moved behind a
// request, cross the kernel with it), and a longer one after a shorter
// does not; either way both arrive whole.
func TestUDPShortLastSegmentJoins(t *testing.T) {
	a := openUDP(t, Config{Addr: netip.MustParseAddr("127.0.23.1")})
	b := openUDP(t, Config{Addr: netip.MustParseAddr("127.0.23.2")})
	if !a.GSO() {
		t.Fatal("no GSO on loopback; the kernel (4.18+) has it")
	}
	o := linktest.Outer(a, netip.MustParseAddr("127.0.23.2"), 5)
	got := make([]nic.Frame, 4)
	for _, c := range []struct {
		name  string
		sizes [2]int
		gso   uint64 // GSO segments the pair adds
	}{{"long then short", [2]int{64, 4}, 2}, {"short then long", [2]int{4, 64}, 0}} {
		frames := []nic.Frame{linktest.Frames(o, 1, c.sizes[0])[0], linktest.Frames(o, 1, c.sizes[1])[0]}
		before := a.Stats().TxGSOSegments
		if n, err := a.Send(frames); n != 2 || err != nil {
			t.Fatalf("%s: sent %d, %v", c.name, n, err)
		}
		if d := a.Stats().TxGSOSegments - before; d != c.gso {
			t.Fatalf("%s: %d GSO segments, want %d", c.name, d, c.gso)
		}
		for i := 0; i < 2; {
			n, err := b.Recv(got)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range got[:n] {
				if i == 2 {
					t.Fatalf("%s: more than the two frames sent arrived", c.name)
				}
				if _, err := linktest.CheckFrame(f, o, c.sizes[i]); err != nil {
					t.Fatalf("%s: frame %d: %v", c.name, i, err)
				}
				i++
			}
		}
	}
}

// TestUDPDropsOversize: datagrams longer than any RoCE frame, a plain
// one and two GRO segments of one GSO send, are dropped and counted
// (never copied into a buffer of one frame's size, nor handed up); the
// frame sent after them arrives intact.
func TestUDPDropsOversize(t *testing.T) {
	a := openUDP(t, Config{Addr: netip.MustParseAddr("127.0.24.1")})
	b := openUDP(t, Config{Addr: netip.MustParseAddr("127.0.24.2")})
	if !b.GRO() {
		t.Fatal("no GRO on loopback; the kernel (5.0+) has it")
	}
	c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.24.2:4791")))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(make([]byte, 9000)); err != nil {
		t.Fatal(err)
	}
	// One send of two 5000-byte segments, which the GRO socket receives
	// as one message of two.
	seg := make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&seg[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(seg[unix.CmsgLen(0):], 5000)
	if _, _, err := c.WriteMsgUDP(make([]byte, 10000), seg, nil); err != nil {
		t.Fatal(err)
	}
	o := linktest.Outer(a, netip.MustParseAddr("127.0.24.2"), 5)
	if n, err := a.Send(linktest.Frames(o, 1, 64)); n != 1 || err != nil {
		t.Fatalf("sent %d, %v", n, err)
	}
	got := make([]nic.Frame, 8)
	n, err := b.Recv(got)
	for err == nil && n == 0 {
		n, err = b.Recv(got)
	}
	if err != nil || n != 1 {
		t.Fatalf("received %d frames, %v; want the one frame", n, err)
	}
	if _, err := linktest.CheckFrame(got[0], o, 64); err != nil {
		t.Fatal(err)
	}
	if s := b.Stats(); s.RxDropped != 3 {
		t.Fatalf("%d dropped, want 3: %+v", s.RxDropped, s)
	}
}
