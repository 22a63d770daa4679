package mem

import (
	"net/netip"
	"testing"
	"time"

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
