package mem

import (
	"net/netip"
	"testing"
	"time"

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
