package nic_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/internal/linktest"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/nic/udp"
)

// datagram is a bare IP datagram from src to dst carrying payload: only
// the version and addresses matter to the links under test.
func datagram(src, dst netip.Addr, payload string) nic.Frame {
	var h []byte
	if src.Is4() {
		h = make([]byte, 20)
		h[0] = 0x45
		s, d := src.As4(), dst.As4()
		copy(h[12:], s[:])
		copy(h[16:], d[:])
	} else {
		h = make([]byte, 40)
		h[0] = 0x60
		s, d := src.As16(), dst.As16()
		copy(h[8:], s[:])
		copy(h[24:], d[:])
	}
	b := append(make([]byte, nic.Headroom), append(h, payload...)...)
	return nic.Frame{B: b, Off: nic.Headroom}
}

// TestMulti: a multi link over an IPv4 and an IPv6 link sends each frame
// through the link holding its source (one with no such link is dropped
// and counted), receives what either got, keeps a batch's frames valid
// until the next Recv, and refuses an address on two links.
func TestMulti(t *testing.T) {
	n := mem.NewNet(1)
	a4, a6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	b4, b6 := netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("2001:db8::2")
	attach := func(a netip.Addr) *mem.Link {
		l, err := n.Attach(a, mem.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	h4, h6, p4, p6 := attach(a4), attach(a6), attach(b4), attach(b6)
	defer p4.Close()
	defer p6.Close()
	m, err := nic.NewMulti(h4, h6)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Info().Addrs; len(got) != 2 || got[0] != a4 || got[1] != a6 {
		t.Errorf("addresses %v, want [%v %v]", got, a4, a6)
	}
	// What every link declares, the multi link declares: the in-memory
	// links' sends are calls and their polls read memory.
	if inf := m.Info(); !inf.DirectSend || !inf.PollNoSyscall || !h4.Info().PollNoSyscall {
		t.Errorf("DirectSend %v, PollNoSyscall %v (mem's %v), want true", inf.DirectSend, inf.PollNoSyscall, h4.Info().PollNoSyscall)
	}
	frames := []nic.Frame{datagram(a4, b4, "v4-1"), datagram(a6, b6, "v6-1"), datagram(b4, a4, "nobody's"), datagram(a4, b4, "v4-2")}
	if sent, err := m.Send(frames); err != nil || sent != len(frames) {
		t.Fatalf("Send: %d, %v", sent, err)
	}
	if d := m.Stats().TxDropped; d != 1 {
		t.Errorf("TxDropped %d, want 1 (the frame of no link's source)", d)
	}
	recv := func(l nic.Link, want ...string) {
		t.Helper()
		var got []string
		buf := make([]nic.Frame, 8)
		for len(got) < len(want) {
			k, err := l.Recv(buf)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range buf[:k] {
				d := f.Datagram()
				hl := 20
				if d[0]>>4 == 6 {
					hl = 40
				}
				got = append(got, string(d[hl:]))
			}
		}
		if len(got) != len(want) {
			t.Fatalf("received %q, want %q", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("received %q, want %q", got, want)
			}
		}
	}
	recv(p4, "v4-1", "v4-2")
	recv(p6, "v6-1")

	// Both ways in: the batches come one link at a time, each frame valid
	// until the next Recv.
	if _, err := p4.Send([]nic.Frame{datagram(b4, a4, "to-v4")}); err != nil {
		t.Fatal(err)
	}
	if _, err := p6.Send([]nic.Frame{datagram(b6, a6, "to-v6")}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	buf := make([]nic.Frame, 1)
	for len(seen) < 2 {
		k, err := m.Recv(buf)
		if err != nil || k != 1 {
			t.Fatalf("Recv: %d, %v", k, err)
		}
		d := buf[0].Datagram()
		switch {
		case bytes.HasSuffix(d, []byte("to-v4")):
			seen["v4"] = true
		case bytes.HasSuffix(d, []byte("to-v6")):
			seen["v6"] = true
		default:
			t.Fatalf("unexpected datagram %q", d)
		}
	}
	if s := m.Stats(); s.RxPackets != 2 || s.TxPackets != 3 {
		t.Errorf("rx %d tx %d packets, want 2 and 3", s.RxPackets, s.TxPackets)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Recv(buf); !errors.Is(err, nic.ErrClosed) {
		t.Errorf("Recv after Close: %v, want ErrClosed", err)
	}

	x, y := attach(netip.MustParseAddr("192.0.2.9")), attach(netip.MustParseAddr("192.0.2.10"))
	defer x.Close()
	defer y.Close()
	if _, err := nic.NewMulti(x, x); err == nil {
		t.Error("NewMulti of one link twice: no error")
	}
	if _, err := nic.NewMulti(); err == nil {
		t.Error("NewMulti of no link: no error")
	}
}

// TestMultiQueues: a multi link over UDP links with three receive queues
// each has three queues, and a QP's packets arrive on the queue QueueOf
// gives it, whichever address they came to; over links with 3 and 2
// queues it has one, which returns them all. Every queue of every link is
// read: packets to QPs of every queue, sent to both addresses, all arrive.
func TestMultiQueues(t *testing.T) {
	for _, tc := range []struct {
		q1, q2, want int
		base         byte
	}{{3, 3, 3, 81}, {3, 2, 1, 82}} {
		t.Run(fmt.Sprintf("%d+%d", tc.q1, tc.q2), func(t *testing.T) {
			const qps = 12
			a1 := netip.AddrFrom4([4]byte{127, 0, tc.base, 1})
			a2 := netip.AddrFrom4([4]byte{127, 0, tc.base, 2})
			src := linktest.Open(t, func() (*udp.Link, error) {
				return udp.Open(udp.Config{Addr: netip.AddrFrom4([4]byte{127, 0, tc.base, 3}), NoGSO: true})
			})
			l1 := linktest.Open(t, func() (*udp.Link, error) { return udp.Open(udp.Config{Addr: a1, RxQueues: tc.q1}) })
			l2 := linktest.Open(t, func() (*udp.Link, error) { return udp.Open(udp.Config{Addr: a2, RxQueues: tc.q2}) })
			m, err := nic.NewMulti(l1, l2)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if m.RxQueues() != tc.want {
				t.Fatalf("%d receive queues, want %d", m.RxQueues(), tc.want)
			}
			want := map[[2]uint32]bool{} // (address index, QPN)
			for ai, dst := range []netip.Addr{a1, a2} {
				frames := linktest.Frames(linktest.Outer(src, dst, 7), qps, 16)
				for i, f := range frames {
					fr, err := bth.DecodeIP(f.Datagram())
					if err != nil {
						t.Fatal(err)
					}
					bth.BTH(fr.RoCE()).SetDestQP(uint32(0x11 + i))
					fr.PutICRC()
					want[[2]uint32{uint32(ai), uint32(0x11 + i)}] = true
				}
				for i := range frames {
					if n, err := src.Send(frames[i : i+1]); n != 1 || err != nil {
						t.Fatalf("send %d: %d %v", i, n, err)
					}
				}
			}
			type arrival struct {
				queue  int
				ai     uint32
				qpn    uint32
				broken error
			}
			arrivals := make(chan arrival, 64)
			for q := range m.RxQueues() {
				go func() {
					got := make([]nic.Frame, 8)
					for {
						n, err := m.RecvQueue(q, got)
						if err != nil {
							return
						}
						for _, f := range got[:n] {
							fr, err := bth.DecodeIP(f.Datagram())
							ai := uint32(0)
							if err == nil && fr.DstAddr().Unmap() == a2 {
								ai = 1
							}
							a := arrival{queue: q, ai: ai, broken: err}
							if err == nil {
								a.qpn = bth.BTH(fr.RoCE()).DestQP()
							}
							arrivals <- a
						}
					}
				}()
			}
			// A packet left in an unread queue would leave this loop
			// waiting: a bound on that wait closes the link.
			stop := time.AfterFunc(30*time.Second, func() { m.Close() })
			defer stop.Stop()
			for len(want) > 0 {
				select {
				case a := <-arrivals:
					if a.broken != nil {
						t.Fatal(a.broken)
					}
					if q := nic.QueueOf(a.qpn, m.RxQueues()); a.queue != q {
						t.Errorf("QP %#x to address %d on queue %d, want %d", a.qpn, a.ai, a.queue, q)
					}
					delete(want, [2]uint32{a.ai, a.qpn})
				case <-time.After(35 * time.Second):
					t.Fatalf("%d packets never arrived", len(want))
				}
			}
		})
	}
}

// hidePoller is a link without its Poller methods: a Multi over it gets
// its frames only through its receive goroutines.
type hidePoller struct{ nic.Link }

// TestMultiPoller checks nic.Poller's contract on a Multi (linktest's
// PollHold: one holder at a time, each frame once and in order, the
// receiver's hold and its standing aside): over in-memory links, which
// a Multi's poll polls itself, and over the same links with their
// Poller hidden, whose frames reach a poll through the Multi's receive
// goroutines. The sender's frames go to the second link of each Multi.
func TestMultiPoller(t *testing.T) {
	for _, hide := range []bool{false, true} {
		t.Run(fmt.Sprintf("hidden=%v", hide), func(t *testing.T) {
			n := mem.NewNet(1)
			attach := func(a string) *mem.Link {
				l, err := n.Attach(netip.MustParseAddr(a), mem.Options{RxQueue: 4096})
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			a, b1, b2 := attach("192.0.2.1"), attach("192.0.2.2"), attach("192.0.2.3")
			defer a.Close()
			links := []nic.Link{b1, b2}
			if hide {
				links = []nic.Link{hidePoller{b1}, hidePoller{b2}}
			}
			m, err := nic.NewMulti(links...)
			if err != nil {
				t.Fatal(err)
			}
			linktest.PollHold(t, a, m, linktest.Outer(a, netip.MustParseAddr("192.0.2.3"), 5), 3000)
		})
	}
}

// TestMultiFDPoller: a multi link over two UDP links gives both links'
// receive sockets (PollFDs), and a batch its receiver hands over is
// reported (OnHeld) only once a poll can take it: a C poller that sees no
// descriptor readable, the socket drained by the receiver, still learns
// that a poll would find the frame.
func TestMultiFDPoller(t *testing.T) {
	a1, a2 := netip.MustParseAddr("127.0.83.1"), netip.MustParseAddr("127.0.83.2")
	src := linktest.Open(t, func() (*udp.Link, error) {
		return udp.Open(udp.Config{Addr: netip.MustParseAddr("127.0.83.3"), NoGSO: true})
	})
	l1 := linktest.Open(t, func() (*udp.Link, error) { return udp.Open(udp.Config{Addr: a1}) })
	l2 := linktest.Open(t, func() (*udp.Link, error) { return udp.Open(udp.Config{Addr: a2}) })
	m, err := nic.NewMulti(l1, l2)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var fp nic.FDPoller = m
	if got, want := len(fp.PollFDs()), len(l1.PollFDs())+len(l2.PollFDs()); got != want || want < 2 {
		t.Fatalf("%d descriptors, want both links' %d", got, want)
	}
	held := make(chan int, 4)
	got := make([]nic.Frame, 8)
	fp.OnHeld(func() { held <- m.PollQueue(0, got) })
	if n := m.PollQueue(0, got); n != 0 { // starts the receivers
		t.Fatalf("a poll of an idle link took %d frames", n)
	}
	frames := linktest.Frames(linktest.Outer(src, a2, 7), 1, 16)
	if n, err := src.Send(frames); n != 1 || err != nil {
		t.Fatalf("send: %d %v", n, err)
	}
	// The receiver takes the datagram (nothing else receives) and
	// reports its batch: the poll inside OnHeld must find it.
	if n := <-held; n != 1 {
		t.Fatalf("the poll OnHeld made took %d frames, want the 1 handed over", n)
	}
	m.EndPoll(0)
}
