package udp

import (
	"strconv"
	"testing"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/internal/linktest"
)

// TestUDPVeth sends both ways across a veth pair between two namespaces,
// IPv4, IPv6 and IPv6 link-local, with 1024- and 4096-byte payloads on
// paths whose MTU just carries them, with and without GSO/GRO.
func TestUDPVeth(t *testing.T) {
	for _, mtu := range []int{1500, 4200} {
		p := linktest.VethPair(t, mtu)
		payload := 1024
		if mtu > 4000 {
			payload = 4096
		}
		for _, fam := range []string{"ipv4", "ipv6", "link-local"} {
			for _, off := range []bool{false, true} {
				name := fam
				if off {
					name += "/plain"
				}
				t.Run(name+"/mtu"+strconv.Itoa(mtu), func(t *testing.T) {
					aa, ba := p.A.IPv4, p.B.IPv4
					switch fam {
					case "ipv6":
						aa, ba = p.A.IPv6, p.B.IPv6
					case "link-local":
						aa, ba = p.A.LL.WithZone(p.A.Link), p.B.LL.WithZone(p.B.Link)
					}
					a := linktest.OpenIn(t, p.A, func() (*Link, error) { return Open(Config{Addr: aa, NoGSO: off, NoGRO: off}) })
					b := linktest.OpenIn(t, p.B, func() (*Link, error) { return Open(Config{Addr: ba, NoGSO: off, NoGRO: off}) })
					if a.Info().MTU != mtu {
						t.Fatalf("link MTU %d, want the veth's %d", a.Info().MTU, mtu)
					}
					linktest.Exchange(t, a, b, linktest.Outer(a, ba, 5), 2000, payload, 64)
					linktest.Exchange(t, b, a, linktest.Outer(b, aa, 6), 2000, payload, 64)
					linktest.Exchange(t, a, b, linktest.Outer(a, ba, 5), 200, 8, 64)
					// Too big for the path: dropped and counted, not fragmented.
					before := a.Stats().TxDropped
					a.Send(linktest.Frames(linktest.Outer(a, ba, 5), 1, mtu))
					if a.Stats().TxDropped != before+1 {
						t.Fatalf("oversized frame not dropped: %+v", a.Stats())
					}
					t.Logf("tx %+v", a.Stats())
					t.Logf("rx %+v", b.Stats())
				})
			}
		}
	}
}

// TestUDPWireIPv4ID captures what the UDP link puts on the wire and checks
// the identification the kernel chose (0 without GSO, 0..n-1 for the n
// segments of a GSO send) and that every ICRC verifies on the wire bytes.
// The sending veth's tx-udp-segmentation is turned off so the kernel cuts
// GSO sends in software before the capture tap, as a NIC without USO would.
func TestUDPWireIPv4ID(t *testing.T) {
	p := linktest.VethPair(t, 4200)
	if out, err := p.A.Run("ethtool", "-K", p.A.Link, "tx-udp-segmentation", "off"); err != nil {
		t.Fatalf("ethtool: %v: %s", err, out)
	}
	for _, gso := range []bool{false, true} {
		name := "plain"
		if gso {
			name = "gso"
		}
		t.Run(name, func(t *testing.T) {
			a := linktest.OpenIn(t, p.A, func() (*Link, error) { return Open(Config{Addr: p.A.IPv4, NoGSO: !gso}) })
			b := linktest.OpenIn(t, p.B, func() (*Link, error) { return Open(Config{Addr: p.B.IPv4, NoGRO: true}) })
			c := linktest.StartCapture(t, p.B)
			const n = 40
			o := linktest.Outer(a, p.B.IPv4, 1)
			for _, size := range []int{1024, 4096} {
				if _, err := a.Send(linktest.Frames(o, n, size)); err != nil {
					t.Fatal(err)
				}
				got := c.RoCE(t, n, 5*time.Second)
				if len(got) != n {
					t.Fatalf("captured %d of %d", len(got), n)
				}
				segs := map[uint16]int{}
				for i, f := range got {
					id, df := linktest.IPv4ID(f)
					if !df || !f.VerifyICRC() {
						t.Fatalf("frame %d on the wire: DF %v, ICRC verifies %v", i, df, f.VerifyICRC())
					}
					if !gso && id != 0 {
						t.Fatalf("frame %d: identification %d without GSO, want 0", i, id)
					}
					segs[id]++
				}
				if gso {
					// Each GSO send numbers its segments from 0.
					if segs[1] == 0 || len(segs) < 2 {
						t.Fatalf("identifications on the wire: %v", segs)
					}
					t.Logf("%d B: identifications on the wire (id: count) %v", size, segs)
				}
				buf := make([]nic.Frame, 64)
				for got := 0; got < n; {
					k, err := b.Recv(buf)
					if err != nil {
						t.Fatal(err)
					}
					got += k
				}
			}
			if gso && a.Stats().TxGSOSegments == 0 {
				t.Fatal("GSO not used")
			}
		})
	}
}

// TestVethGSOGRO sends RC WRITEs of 64 KiB (16 packets at MTU 4096) across
// a veth between two namespaces, the veths' offloads on as a host's are:
// each message leaves as its FIRST alone and one GSO send of the rest, and
// arrives through GRO split in place. Every packet is checked byte for
// byte; the only packets moved are the FIRSTs, 16 bytes (a RETH) longer
// than the stride the MIDDLEs fill.
func TestVethGSOGRO(t *testing.T) {
	p := linktest.VethPair(t, 4200)
	a := linktest.OpenIn(t, p.A, func() (*Link, error) { return Open(Config{Addr: p.A.IPv4}) })
	b := linktest.OpenIn(t, p.B, func() (*Link, error) { return Open(Config{Addr: p.B.IPv4}) })
	if !a.GSO() || !b.GRO() {
		t.Fatalf("GSO %v, GRO %v", a.GSO(), b.GRO())
	}
	o := linktest.Outer(a, p.B.IPv4, 1)
	const n, msgs = 16, 8 // 64 KiB each
	for i := range msgs {
		sent := message(o, true, i*n, n, 4096)
		if k, err := a.Send(sent); k != n || err != nil {
			t.Fatalf("Send: %d, %v", k, err)
		}
		receive(t, b, sent)
	}
	s, r := a.Stats(), b.Stats()
	if s.TxGSOSegments != msgs*(n-1) || s.TxPackets != msgs*n {
		t.Fatalf("sent %d packets, %d as GSO segments; want %d and %d", s.TxPackets, s.TxGSOSegments, msgs*n, msgs*(n-1))
	}
	if r.RxGROSegments != msgs*(n-1) || r.RxGROCopies != msgs || r.RxDropped != 0 {
		t.Fatalf("received %d coalesced, %d copied or moved, %d dropped; want %d, %d (the FIRSTs), 0",
			r.RxGROSegments, r.RxGROCopies, r.RxDropped, msgs*(n-1), msgs)
	}
	t.Logf("link_tx_gso_segments %d, link_rx_gro_segments %d, link_rx_gro_copies %d, rx batches %d",
		s.TxGSOSegments, r.RxGROSegments, r.RxGROCopies, r.RxBatches)
}
