package transport_test

// The fault link (nic/fault) through the engine: its rules act on what a
// device sends, and the engine recovers. These live beside the engine,
// not the link, so that no link's test depends on the engine
// (TestLinksDoNotImportEngine).

import (
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/goroce/goroce/internal/testharness"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/fault"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/nic/tap"
	"github.com/goroce/goroce/nic/udp"
	"github.com/goroce/goroce/transport"
)

func counter(p *testharness.Peer, name string) uint64 {
	for _, c := range p.Dev.Stats() {
		if c.Name == name {
			return c.Value
		}
	}
	return 0
}

// TestDropNthWriteMiddle: two devices on a mem.Net, the requester's link
// losing its first RDMA WRITE Middle. The responder sees the PSN gap and
// NAKs it (C9-114: a PSN sequence error), the requester goes back and
// resends, the WRITE completes with every byte right, and the rule says
// it fired once.
func TestDropNthWriteMiddle(t *testing.T) {
	n := mem.NewNet(1)
	aa, ba := netip.MustParseAddr("10.9.0.1"), netip.MustParseAddr("10.9.0.2")
	la, err := n.Attach(aa, mem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lb, err := n.Attach(ba, mem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := fault.ParseRule("tx opcode=RDMA_WRITE_MIDDLE nth=1 drop")
	if err != nil {
		t.Fatal(err)
	}
	fl := fault.Wrap(la, fault.Config{Rules: []fault.Rule{r}})
	a := testharness.NewPeer(t, fl, aa, testharness.Options{MTU: transport.MTU1024})
	b := testharness.NewPeer(t, lb, ba, testharness.Options{MTU: transport.MTU1024})
	testharness.Connect(t, a, b)
	testharness.Op(t, a, b, transport.WRRDMAWrite, 8*1024, 1, 42)
	s := fl.Faults()
	if s.Rules[0] != 1 || s.Tx.Lost != 1 {
		t.Fatalf("rule fired %d times, %d lost; want 1 and 1 (%v)", s.Rules[0], s.Tx.Lost, s)
	}
	if got := counter(b, "out_of_seq_request"); got == 0 {
		t.Fatal("the responder never saw the gap")
	}
	if got := counter(a, "rcvd_seq_err"); got == 0 {
		t.Fatal("the requester never had a sequence NAK: it did not recover by the NAK")
	}
}

// TestWrapsQueues: a faulty link over a UDP link with two receive queues
// reads both (a pump per queue), and a tap over one hands the device both
// queues and records them: SENDs on four QP pairs, whose QPNs fall on
// both queues, each arrive whole, one each way per pair.
func TestWrapsQueues(t *testing.T) {
	// Loopback addresses of its own: no other test binds them.
	aa, ba := netip.MustParseAddr("127.0.88.1"), netip.MustParseAddr("127.0.88.2")
	open := func(a netip.Addr) *udp.Link {
		l, err := udp.Open(udp.Config{Addr: a, RxQueues: 2})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	tapped, err := tap.Open(open(ba), filepath.Join(t.TempDir(), "b.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	if tapped.RxQueues() != 2 {
		t.Fatalf("the tap shows %d queues", tapped.RxQueues())
	}
	a := testharness.NewPeer(t, fault.Wrap(open(aa), fault.Config{}), aa, testharness.Options{MTU: transport.MTU1024})
	b := testharness.NewPeer(t, tapped, ba, testharness.Options{MTU: transport.MTU1024})
	pairs := [][2]*testharness.Peer{{a, b}}
	for len(pairs) < 4 {
		x, y := a.NewQP(t), b.NewQP(t)
		pairs = append(pairs, [2]*testharness.Peer{x, y})
	}
	for i, p := range pairs {
		testharness.Connect(t, p[0], p[1])
		testharness.Op(t, p[0], p[1], transport.WRSend, 3000, 1, uint32(i))
		testharness.Op(t, p[1], p[0], transport.WRSend, 3000, 1, uint32(i+10))
	}
	ul := func(l nic.Link) *udp.Link {
		if f, ok := l.(*fault.Link); ok {
			return f.Link.(*udp.Link)
		}
		return l.(*tap.Tap).Link.(*udp.Link)
	}
	for _, p := range []*testharness.Peer{a, b} {
		u := ul(p.Link)
		if u.RxQueuePackets(0) == 0 || u.RxQueuePackets(1) == 0 {
			t.Errorf("%s: queues carried %d and %d packets", u.Info().Name, u.RxQueuePackets(0), u.RxQueuePackets(1))
		}
	}
}
