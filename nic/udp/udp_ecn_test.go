package udp

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/inet"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/internal/linktest"
)

// TestUDPCarriesECN: the ECN bits the engine writes in a packet's IP
// header leave with it (the link hands the kernel the TOS or traffic
// class per packet) and the receiving link puts the ones the kernel
// reports (IP_RECVTOS, IPV6_RECVTCLASS) back in the header it rebuilds:
// ECT(0) as goroce marks its packets, CE as a congested queue leaves
// them. The ICRC does not cover these bits, so each frame still verifies.
func TestUDPCarriesECN(t *testing.T) {
	for _, fam := range []struct{ a, b string }{{"127.0.0.1", "127.0.0.2"}, {"::1", "::1"}} {
		a := openUDP(t, Config{Addr: netip.MustParseAddr(fam.a)})
		b := a
		if fam.b != fam.a {
			b = openUDP(t, Config{Addr: netip.MustParseAddr(fam.b)})
		}
		for _, ecn := range []uint8{inet.ECT0, inet.CE, inet.NotECT} {
			o := linktest.Outer(a, netip.MustParseAddr(fam.b), 5)
			o.TClass = 26<<2 | ecn
			if n, err := a.Send(linktest.Frames(o, 2, 64)); n != 2 || err != nil {
				t.Fatalf("sent %d: %v", n, err)
			}
			buf := make([]nic.Frame, 8)
			for got := 0; got < 2; {
				n, err := b.Recv(buf)
				if err != nil {
					t.Fatal(err)
				}
				for _, f := range buf[:n] {
					got++
					dg := f.Datagram()
					if e := inet.ECN(dg); e != ecn {
						t.Errorf("%s: sent ECN %02b, received %02b", fam.a, ecn, e)
					}
					tc := dg[1] // IPv4 TOS
					if dg[0]>>4 == 6 {
						tc = inet.IPv6(dg).TrafficClass()
					}
					if tc>>2 != 26 {
						t.Errorf("%s: DSCP %d, want 26", fam.a, tc>>2)
					}
				}
			}
		}
	}
}
