package rawudp

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/netns"
)

// TestMeasure: every datagram arrives and is counted once, with and
// without GSO (a GRO read counts each coalesced segment), IPv4 and IPv6.
func TestMeasure(t *testing.T) {
	p := netns.New(t, netns.Config{MTU: 1500})
	for _, gso := range []bool{false, true} {
		for _, v6 := range []bool{false, true} {
			src, dst := p.A.IPv4, p.B.IPv4
			if v6 {
				src, dst = p.A.IPv6, p.B.IPv6
			}
			r, err := Measure(p.A, p.B, src, dst, 1040, 5000, gso, nil)
			if err != nil {
				t.Fatal(err)
			}
			if r.Datagrams != 5000 || r.PPS() <= 0 || r.Gbps(1024) <= 0 {
				t.Fatalf("gso %v %v: %+v", gso, dst, r)
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
