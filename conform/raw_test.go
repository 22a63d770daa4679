package conform

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/rawpeer"
)

// TestNextWithinAfterStop: a packet the peer sent just before its command
// ended is still read when the end is already known (stop closed), and
// only then does nextWithin say errStopped, at the marker, without
// waiting out its bound. CI once judged a case "silent" whose NAK the
// peer had sent before it exited: stop had won the race with the reader.
// Each round gives the old nextWithin an even chance to fail.
func TestNextWithinAfterStop(t *testing.T) {
	aa, ba := netip.MustParseAddr("127.0.37.1"), netip.MustParseAddr("127.0.37.2")
	la, lb := rawpeer.UDPLinks(t, aa, ba)
	r := newRawEnd(la, aa, ba)
	r.SrcPort = la.SrcPort(1)
	peer := rawpeer.New(lb, ba, aa, lb.SrcPort(1), 64, nil)
	stop := make(chan struct{})
	close(stop) // the peer's command has ended
	const qpn = 0x77
	for i := range 20 {
		nak := rawpeer.Packet{Op: bth.RCAcknowledge, DestQP: qpn, PSN: uint32(i),
			Headers: []rawpeer.Hdr{rawpeer.AETH(bth.NAKSyndrome(bth.NAKInvalidRequest), 0)}}
		if err := peer.Send(nak); err != nil {
			t.Fatal(err)
		}
		p, err := r.nextWithin(qpn, qpn, time.Minute, stop)
		if err != nil {
			t.Fatalf("round %d: the NAK sent before the peer ended: %v, want it read", i, err)
		}
		if p.OpCode() != bth.RCAcknowledge || uint32(p.BTH().PSN()) != uint32(i) {
			t.Fatalf("round %d: got %s", i, p.Summary())
		}
		t0 := time.Now()
		if _, err := r.nextWithin(qpn, qpn, time.Minute, stop); !errors.Is(err, errStopped) {
			t.Fatalf("round %d: nothing more from an ended peer: %v, want errStopped", i, err)
		}
		if d := time.Since(t0); d >= time.Minute {
			t.Fatalf("round %d: errStopped came at the bound (%v), not at the marker", i, d)
		}
	}
	// The markers are the end's own: the report's ladder has none.
	if got := len(r.diagram().Arrows); got != 20 {
		t.Fatalf("the ladder has %d arrows, want the 20 NAKs", got)
	}
}
