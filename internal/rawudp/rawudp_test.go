package rawudp

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/netns"
)

// TestMeasure: every datagram arrives and is counted once, in every mode
// (a GRO read counts each coalesced segment, a recvmmsg each datagram),
// IPv4 and IPv6.
func TestMeasure(t *testing.T) {
	p := netns.New(t, netns.Config{MTU: 1500})
	for _, mode := range []Mode{Sendto, MMsg, GSO, GSOICRC} {
		for _, v6 := range []bool{false, true} {
			src, dst := p.A.IPv4, p.B.IPv4
			if v6 {
				src, dst = p.A.IPv6, p.B.IPv6
			}
			r, err := Measure(p.A, p.B, src, dst, 1040, 5000, mode, nil)
			if err != nil {
				t.Fatal(err)
			}
			if r.Datagrams != 5000 || r.PPS() <= 0 || r.Gbps(1024) <= 0 {
				t.Fatalf("%v %v: %+v", mode, dst, r)
			}
		}
	}
}

// TestPingPong: every round trip is timed once, and each is positive.
func TestPingPong(t *testing.T) {
	s, err := PingPong(netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.1"), 80, 50, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 50 || s.Quantile(0) <= 0 {
		t.Fatalf("%d round trips, shortest %v", len(s), s.Quantile(0))
	}
}

// TestPingPongAcked: each round trip moves the payload and the ACK-sized
// datagram both ways, and checks both came back.
func TestPingPongAcked(t *testing.T) {
	s, err := PingPongAcked(netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.1"), 80, 20, 50, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 50 || s.Quantile(0) <= 0 {
		t.Fatalf("%d round trips, shortest %v", len(s), s.Quantile(0))
	}
}
