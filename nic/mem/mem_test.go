package mem

import (
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/inet"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/internal/linktest"
)

// TestPoller checks the link's nic.Poller: the receiver and a poller share
// the link's queue, one holder at a time, each frame once and in order.
func TestPoller(t *testing.T) {
	for _, busy := range []time.Duration{0, 50 * time.Microsecond} {
		n := NewNet(1)
		a, err := n.Attach(netip.MustParseAddr("10.0.0.1"), Options{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := n.Attach(netip.MustParseAddr("10.0.0.2"), Options{BusyPoll: busy, RxQueue: 4096})
		if err != nil {
			t.Fatal(err)
		}
		linktest.PollHold(t, a, b, linktest.Outer(a, netip.MustParseAddr("10.0.0.2"), 5), 3000)
		a.Close()
	}
}

// TestSendFollowsAttach: a link's sends reach whichever link is attached
// at the destination when each is sent, although the sender keeps its
// last route (Link.route): none at first (dropped), then one, then none
// once it closed, then a new link at the same address.
func TestSendFollowsAttach(t *testing.T) {
	n := NewNet(1)
	aAddr, bAddr := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	a, err := n.Attach(aAddr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	frames := linktest.Frames(linktest.Outer(a, bAddr, 5), 1, 64)
	send := func(wantDropped uint64) {
		t.Helper()
		if _, err := a.Send(frames); err != nil {
			t.Fatal(err)
		}
		if d := a.Stats().TxDropped; d != wantDropped {
			t.Fatalf("sender's dropped count %d, want %d", d, wantDropped)
		}
	}
	arrives := func(l *Link) {
		t.Helper()
		got := make([]nic.Frame, 4)
		if k, err := l.Recv(got); err != nil || k != 1 {
			t.Fatalf("receive: %d frames, %v", k, err)
		}
		if _, err := linktest.CheckFrame(got[0], linktest.Outer(a, bAddr, 5), 64); err != nil {
			t.Fatal(err)
		}
	}
	send(1) // nobody at bAddr
	b, err := n.Attach(bAddr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	send(1)
	arrives(b)
	b.Close()
	send(2)
	b2, err := n.Attach(bAddr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	send(2)
	arrives(b2)
	if s := b.Stats(); s.RxPackets != 1 {
		t.Fatalf("the closed link received %d frames, want 1", s.RxPackets)
	}
}

// TestSendAllocs: sends to destinations that alternate, each received,
// allocate nothing once each destination has been sent to (the link
// keeps a route for each); the third link has two receive queues, its
// packets steered to queue 1.
func TestSendAllocs(t *testing.T) {
	n := NewNet(1)
	var links []*Link
	for i, a := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
		l, err := n.Attach(netip.MustParseAddr(a), Options{RxQueue: 1 << 16, RxQueues: i})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		links = append(links, l)
	}
	to2 := linktest.Frames(linktest.Outer(links[0], netip.MustParseAddr("10.0.0.2"), 5), 1, 64)
	to3 := linktest.Frames(linktest.Outer(links[0], netip.MustParseAddr("10.0.0.3"), 5), 1, 64)
	got := make([]nic.Frame, 4)
	send := func() {
		for i, f := range [][]nic.Frame{to2, to3} {
			if _, err := links[0].Send(f); err != nil {
				t.Fatal(err)
			}
			// Received, so that the buffers go back to the pool.
			if k, err := links[1+i].RecvQueue(nic.QueueOf(5, links[1+i].RxQueues()), got); k != 1 || err != nil {
				t.Fatalf("receive: %d, %v", k, err)
			}
		}
	}
	send()
	if a := testing.AllocsPerRun(100, send); a != 0 {
		t.Fatalf("%v allocations per pair of sends to alternating destinations, want 0", a)
	}
}

// TestCleanPathDrawsNothing: a path without faults or filter delivers
// without drawing from its random source, so that the losses a fault set
// later causes are the same as on a path that had it from the start: a
// run stays the same function of the seed however long it ran clean.
// Also, the clean path delivers every packet.
func TestCleanPathDrawsNothing(t *testing.T) {
	aAddr, bAddr := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	// losses sends 200 packets through 50% loss, after clean packets
	// first, and returns which were lost.
	losses := func(clean int) []bool {
		n := NewNet(7)
		a, err := n.Attach(aAddr, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		b, err := n.Attach(bAddr, Options{RxQueue: 1 << 12})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		frames := linktest.Frames(linktest.Outer(a, bAddr, 5), 1, 64)
		got := make([]nic.Frame, 4)
		for range clean {
			if _, err := a.Send(frames); err != nil {
				t.Fatal(err)
			}
			if k, err := b.Recv(got); k != 1 || err != nil {
				t.Fatalf("a clean path: %d frames, %v", k, err)
			}
		}
		n.SetFaults(aAddr, bAddr, Faults{Loss: 0.5})
		var lost []bool
		for range 200 {
			before, _, _, _ := a.Injected()
			if _, err := a.Send(frames); err != nil {
				t.Fatal(err)
			}
			after, _, _, _ := a.Injected()
			lost = append(lost, after != before)
		}
		return lost
	}
	want, got := losses(0), losses(50)
	n := 0
	for i := range want {
		if want[i] {
			n++
		}
		if got[i] != want[i] {
			t.Fatalf("packet %d through the faults: lost %v after 50 clean packets, %v without them", i, got[i], want[i])
		}
	}
	if n == 0 || n == len(want) {
		t.Fatalf("%d of %d lost at 50%% loss", n, len(want))
	}
}

// TestPollEmptyTakesNoLock: a poll of an empty link and a busy-polling
// receiver's spin read the queue's published length and take no lock, so
// that neither holds up the deliveries they wait for (each takes the
// queue's lock); once a packet is queued the spin ends and the poll takes
// it.
func TestPollEmptyTakesNoLock(t *testing.T) {
	n := NewNet(1)
	bAddr := netip.MustParseAddr("10.0.0.2")
	a, err := n.Attach(netip.MustParseAddr("10.0.0.1"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := n.Attach(bAddr, Options{BusyPoll: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got := make([]nic.Frame, 4)
	b.rx[0].mu.Lock()
	done := make(chan struct{})
	var polled int
	var again bool
	go func() {
		defer close(done)
		polled = b.PollQueue(0, got)
		var since time.Time
		again = b.spin(b.rx[0], &since) // the budget runs out: false
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		b.rx[0].mu.Unlock()
		<-done
		t.Fatal("a poll or a busy wait of an empty link waited for the queue's lock")
	}
	b.rx[0].mu.Unlock()
	if polled != 0 || again {
		t.Fatalf("empty link: poll took %d, spin says look again %v; want 0, false", polled, again)
	}
	o := linktest.Outer(a, bAddr, 5)
	if _, err := a.Send(linktest.Frames(o, 1, 64)); err != nil {
		t.Fatal(err)
	}
	var since time.Time
	if !b.spin(b.rx[0], &since) {
		t.Fatal("spin ended without the queued packet")
	}
	if k := b.PollQueue(0, got); k != 1 {
		t.Fatalf("poll took %d frames, want 1", k)
	}
	if _, err := linktest.CheckFrame(got[0], o, 64); err != nil {
		t.Fatal(err)
	}
	b.EndPoll(0)
	if q := b.rx[0].queued.Load(); q != 0 {
		t.Fatalf("queued %d after the poll took the packet", q)
	}
}

// TestSealedGoesUpVerified: a frame its sender sealed (nic.Frame.Sealed)
// arrives decoded and Verified, viewing the delivered bytes; one not
// sealed, one a fault flipped a bit of, and one a filter saw arrive
// unverified, for the device to check.
func TestSealedGoesUpVerified(t *testing.T) {
	n := NewNet(1)
	aAddr, bAddr := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	a, b := attach(t, n, aAddr), attach(t, n, bAddr)
	o := linktest.Outer(a, bAddr, 5)
	for _, c := range []struct {
		name     string
		sealed   bool
		path     func()
		verified bool
	}{
		{"sealed", true, func() {}, true},
		{"not sealed", false, func() {}, false},
		{"sealed, a bit flipped", true, func() { n.SetFaults(aAddr, bAddr, Faults{Corrupt: 1}) }, false},
		{"sealed, filtered", true, func() { n.SetFilter(aAddr, bAddr, func([]byte) Verdict { return Pass }) }, false},
	} {
		n.SetFaults(aAddr, bAddr, Faults{})
		n.SetFilter(aAddr, bAddr, nil)
		c.path()
		fr := linktest.Frames(o, 1, 64)
		fr[0].Sealed = c.sealed
		if _, err := a.Send(fr); err != nil {
			t.Fatal(err)
		}
		got := make([]nic.Frame, 1)
		if k, err := b.Recv(got); err != nil || k != 1 {
			t.Fatalf("%s: receive: %d frames, %v", c.name, k, err)
		}
		if got[0].Verified != c.verified {
			t.Fatalf("%s: Verified %v, want %v", c.name, got[0].Verified, c.verified)
		}
		if c.verified {
			if _, err := linktest.CheckFrame(got[0], o, 64); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		}
		b.EndRecv(0)
	}
}

// attach attaches a link at addr to n, closed when t ends.
func attach(t *testing.T, n *Net, addr netip.Addr) *Link {
	t.Helper()
	l, err := n.Attach(addr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestSendQueuesRuns: one Send of frames to three peers (a run longer
// than sendRun to one, then runs of a few to each of two on clean paths,
// and now and then a frame to one on a filtered path, which draws and
// copies frame by frame) delivers each peer's frames whole and in the
// order sent; a peer whose queue has room for only part of a run takes
// the first frames and counts the rest as dropped.
func TestSendQueuesRuns(t *testing.T) {
	n := NewNet(1)
	aAddr, bAddr, cAddr, dAddr, eAddr := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"),
		netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("10.0.0.4"), netip.MustParseAddr("10.0.0.5")
	a, b, c, e := attach(t, n, aAddr), attach(t, n, bAddr), attach(t, n, cAddr), attach(t, n, eAddr)
	n.SetFilter(aAddr, eAddr, func([]byte) Verdict { return Pass })
	peers := []struct {
		l    *Link
		o    bth.Outer
		want int
	}{{l: b, o: linktest.Outer(a, bAddr, 5)}, {l: c, o: linktest.Outer(a, cAddr, 5)}, {l: e, o: linktest.Outer(a, eAddr, 5)}}
	const count = 3*sendRun + 5
	all := make([][]nic.Frame, len(peers))
	for i := range peers {
		all[i] = linktest.Frames(peers[i].o, count, 64)
	}
	var frames []nic.Frame
	for j := range count {
		// b up to sendRun+10, then b and c by threes, and e at every 7th.
		p := 0
		switch {
		case j <= sendRun+10:
		case j%7 == 3:
			p = 2
		case j/3%2 == 1:
			p = 1
		}
		frames = append(frames, all[p][j])
		peers[p].want++
	}
	if _, err := a.Send(frames); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.TxPackets != uint64(len(frames)) || s.TxDropped != 0 {
		t.Fatalf("sender's stats %+v for %d frames", s, len(frames))
	}
	for _, p := range peers {
		got := make([]nic.Frame, 4*sendRun)
		k, err := p.l.Recv(got)
		if err != nil || k != p.want {
			t.Fatalf("%v received %d frames (%v), want %d", p.o.Dst, k, err, p.want)
		}
		last := -1
		for _, f := range got[:k] {
			psn, err := linktest.CheckFrame(f, p.o, 64)
			if err != nil {
				t.Fatal(err)
			}
			if psn <= last {
				t.Fatalf("%v: PSN %d after %d", p.o.Dst, psn, last)
			}
			last = psn
		}
		p.l.EndRecv(0)
	}

	d, err := n.Attach(dAddr, Options{RxQueue: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	od := linktest.Outer(a, dAddr, 5)
	if _, err := a.Send(linktest.Frames(od, 12, 64)); err != nil {
		t.Fatal(err)
	}
	got := make([]nic.Frame, 12)
	k, err := d.Recv(got)
	if err != nil || k != 5 {
		t.Fatalf("a queue of 5 received %d frames (%v)", k, err)
	}
	for i, f := range got[:k] {
		if psn, err := linktest.CheckFrame(f, od, 64); err != nil || psn != i {
			t.Fatalf("frame %d: PSN %d, %v", i, psn, err)
		}
	}
	if s := d.Stats(); s.RxDropped != 7 || s.RxPackets != 5 {
		t.Fatalf("a queue of 5 sent 12: stats %+v, want 7 dropped", s)
	}
}

// TestSendCountsBeforeDelivering: a packet is counted as sent before its
// receiver can take it, so a reader that has taken n packets never finds
// fewer than n sent (the engine's tests compare the two). The receiver's
// queue lock, held here, stops Send at the moment of delivery; the count
// must already be there.
func TestSendCountsBeforeDelivering(t *testing.T) {
	n := NewNet(1)
	aAddr, bAddr := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	a, b := attach(t, n, aAddr), attach(t, n, bAddr)
	frames := linktest.Frames(linktest.Outer(a, bAddr, 5), 3, 64)
	b.rx[0].mu.Lock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := a.Send(frames); err != nil {
			t.Error(err)
		}
	}()
	// The bound is not the event: Send counts, then blocks on the lock.
	for deadline := time.Now().Add(10 * time.Second); a.Stats().TxPackets < 3 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Microsecond)
	}
	got := a.Stats().TxPackets
	b.rx[0].mu.Unlock()
	<-done
	if got != 3 {
		t.Fatalf("%d packets counted while their delivery waited, want 3", got)
	}
	if got := b.rx[0].queued.Load(); got != 3 {
		t.Fatalf("%d queued at the receiver, want 3", got)
	}
}

// TestRxQueues: a link with several receive queues puts each packet on
// the queue of its destination QPN (nic.QueueOf), in the order sent, when
// one Send carries packets for all the queues interleaved; a datagram too
// short for a BTH goes to queue 0. Delivery is synchronous, so every
// packet is queued when Send returns and no receive below waits.
func TestRxQueues(t *testing.T) {
	const queues, qps = 3, 60
	n := NewNet(1)
	a, err := n.Attach(netip.MustParseAddr("10.0.0.1"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := n.Attach(netip.MustParseAddr("10.0.0.2"), Options{RxQueues: queues})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.RxQueues() != queues || a.RxQueues() != 1 {
		t.Fatalf("RxQueues %d and %d", b.RxQueues(), a.RxQueues())
	}
	if _, err := n.Attach(netip.MustParseAddr("10.0.0.3"), Options{RxQueues: nic.MaxRxQueues + 1}); err == nil {
		t.Fatal("a link with more than nic.MaxRxQueues queues")
	}
	frames := linktest.Frames(linktest.Outer(a, netip.MustParseAddr("10.0.0.2"), 7), qps, 16)
	for i, f := range frames {
		fr, err := bth.DecodeIP(f.Datagram())
		if err != nil {
			t.Fatal(err)
		}
		bth.BTH(fr.RoCE()).SetDestQP(uint32(0x11 + i))
		fr.PutICRC()
	}
	// A UDP datagram with 4 bytes where the BTH would start.
	short := frames[0].Datagram()[:inet.IPv4HeaderLen+inet.UDPHeaderLen+4]
	frames = append(frames, nic.Frame{B: append([]byte(nil), short...)})
	if k, err := a.Send(frames); k != len(frames) || err != nil {
		t.Fatalf("send: %d, %v", k, err)
	}
	got := make([]nic.Frame, qps+1)
	for q := range queues {
		var want []uint32
		for i := range qps {
			if nic.QueueOf(uint32(0x11+i), queues) == q {
				want = append(want, uint32(0x11+i))
			}
		}
		if q == 0 {
			want = append(want, 0) // the short one, last
		}
		if k := b.rx[q].queued.Load(); int(k) != len(want) {
			t.Fatalf("queue %d holds %d packets, want %d", q, k, len(want))
		}
		k, err := b.RecvQueue(q, got)
		if err != nil || k != len(want) {
			t.Fatalf("queue %d: %d frames, %v; want %d", q, k, err, len(want))
		}
		for j, f := range got[:k] {
			d := f.Datagram()
			if want[j] == 0 {
				if len(d) != len(short) {
					t.Fatalf("queue %d frame %d: %d bytes, want the short datagram", q, j, len(d))
				}
				continue
			}
			fr, err := bth.DecodeIP(d)
			if err != nil {
				t.Fatalf("queue %d frame %d: %v", q, j, err)
			}
			if qpn := bth.BTH(fr.RoCE()).DestQP(); qpn != want[j] {
				t.Fatalf("queue %d frame %d: QPN %#x, want %#x", q, j, qpn, want[j])
			}
		}
		b.EndRecv(q)
	}
	if _, err := b.RecvQueue(queues, got); err == nil {
		t.Fatal("a receive on a queue the link does not have")
	}
}
