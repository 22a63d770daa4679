package rawpeer

import (
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic/mem"
)

// pair is two raw peers on one in-memory network, addressed to each other.
func pair(t *testing.T) (a, b *Peer) {
	t.Helper()
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
	t.Cleanup(func() { la.Close(); lb.Close() })
	return New(la, aa, ba, 0xc0de, 16, nil), New(lb, ba, aa, 0xc0df, 16, nil)
}

func recv(t *testing.T, p *Peer) []byte {
	t.Helper()
	select {
	case f, ok := <-p.Rx:
		if !ok {
			t.Fatal("link closed")
		}
		return f.Datagram
	case <-time.After(10 * time.Second): // a backstop: the send is already done
		t.Fatal("nothing arrived")
	}
	return nil
}

// A packet built field by field arrives with every field as set, and
// Decode accepts it.
func TestBuildSendDecode(t *testing.T) {
	a, b := pair(t)
	err := a.Send(Packet{Op: bth.RCWriteFirst, DestQP: 0x123456, PSN: 0x1ffffff, AckReq: true,
		Payload: make([]byte, 256), Headers: []Hdr{RETH(0x1000, 0xbeef, 1024)}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Decode(recv(t, b))
	if err != nil {
		t.Fatal(err)
	}
	h, r := p.BTH(), p.RETH()
	if p.OpCode() != bth.RCWriteFirst || h.DestQP() != 0x123456 || uint32(h.PSN()) != 0xffffff || !h.AckReq() ||
		r == nil || r.VA() != 0x1000 || r.RKey() != 0xbeef || r.DMALen() != 1024 || p.PayloadLen() != 256 {
		t.Fatalf("got %s", p.Summary())
	}
}

// A packet spoiled after sealing keeps its old ICRC: Decode refuses it.
func TestAfterSpoilsICRC(t *testing.T) {
	a, b := pair(t)
	err := a.Send(Packet{Op: bth.RCSendOnly, PSN: 1, Payload: []byte("abcd"),
		After: func(roce []byte) []byte { roce[bth.BTHLen] ^= 1; return roce }})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := Decode(recv(t, b)); err == nil {
		t.Fatalf("Decode accepted a spoiled packet: %s", p.Summary())
	}
}

// A marker comes out of Rx after everything the link had received when it
// was sent, in order, over the udp link (which delivers to its own
// address): what a peer sent before it ended is read before the marker.
// An earlier marker is told apart from the one awaited.
func TestMarkAfterReceived(t *testing.T) {
	aa, ba := netip.MustParseAddr("127.0.31.1"), netip.MustParseAddr("127.0.31.2")
	la, lb := UDPLinks(t, aa, ba)
	a, b := New(la, aa, ba, la.SrcPort(1), 64, nil), New(lb, ba, aa, lb.SrcPort(1), 64, nil)
	old, err := a.Mark()
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := range n {
		if err := b.Send(Packet{Op: bth.RCSendOnly, DestQP: 0x42, PSN: uint32(i), Payload: make([]byte, 32)}); err != nil {
			t.Fatal(err)
		}
	}
	m, err := a.Mark()
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for {
		dg := recv(t, a)
		if k, isMarker := MarkOf(dg); isMarker {
			if k == m {
				break
			}
			if k != old {
				t.Fatalf("marker %d, neither the first (%d) nor the second (%d)", k, old, m)
			}
			continue
		}
		p, err := Decode(dg)
		if err != nil {
			t.Fatal(err)
		}
		if uint32(p.BTH().PSN()) != uint32(got) {
			t.Fatalf("packet %d has PSN %d", got, p.BTH().PSN())
		}
		got++
	}
	if got != n {
		t.Fatalf("%d packets before the marker, want the %d sent before it", got, n)
	}
}
