package transport_test

import (
	"fmt"
	"testing"

	"github.com/goroce/goroce/internal/testharness"
	"github.com/goroce/goroce/nic/udp"
	"github.com/goroce/goroce/transport"
)

// TestVeth runs the engine across a veth pair between two namespaces, over
// every link kind, at active MTU 1024 and 4096, over IPv4 and IPv6: every
// RC operation at every size both ways (plus atomics and a burst of mixed
// operations in flight), every UC operation, and UD with its GRH. Every
// byte and every completion is checked, and no goroutine outlives it.
func TestVeth(t *testing.T) {
	testharness.NoLeaks(t)
	for _, mtu := range []transport.MTU{transport.MTU1024, transport.MTU4096} {
		n := testharness.NewNet(t, testharness.Config{MTU: testharness.VethMTU(mtu)})
		for _, k := range testharness.Kinds {
			for _, f := range []testharness.Family{testharness.IPv4, testharness.IPv6} {
				t.Run(fmt.Sprintf("%v/mtu%d/%v", k, mtu.Bytes(), f), func(t *testing.T) {
					t.Run("rc", func(t *testing.T) {
						a, b := testharness.Pair(t, n, k, f, testharness.Options{})
						if got := a.Dev.ActiveMTU(); got != mtu {
							t.Fatalf("active MTU %v over a %d-byte veth, want %v", got, n.MTU, mtu)
						}
						testharness.CheckRC(t, a, b)
						testharness.CheckRC(t, b, a)
					})
					t.Run("uc", func(t *testing.T) {
						a, b := testharness.Pair(t, n, k, f, testharness.Options{Type: transport.UC})
						testharness.CheckUC(t, a, b)
					})
					t.Run("ud", func(t *testing.T) {
						a, b := testharness.Pair(t, n, k, f, testharness.Options{Type: transport.UD})
						testharness.CheckUD(t, a, b)
					})
				})
			}
		}
	}
}

// TestVethMixed: a UDP link and an AF_PACKET link talk across a veth whose
// offloads are on, so the UDP side's GSO sends reach the AF_PACKET side as
// super-frames, which it cuts (PACKET_VNET_HDR): RC both ways and UD, over
// IPv4 and IPv6, at both MTUs.
func TestVethMixed(t *testing.T) {
	testharness.NoLeaks(t)
	for _, mtu := range []transport.MTU{transport.MTU1024, transport.MTU4096} {
		n := testharness.NewNet(t, testharness.Config{MTU: testharness.VethMTU(mtu), Offloads: true})
		for _, f := range []testharness.Family{testharness.IPv4, testharness.IPv6} {
			t.Run(fmt.Sprintf("mtu%d/%v", mtu.Bytes(), f), func(t *testing.T) {
				t.Run("rc", func(t *testing.T) {
					a, b := testharness.PairOf(t, n, testharness.UDP, testharness.AFPacket, f, testharness.Options{})
					testharness.CheckRC(t, a, b)
					testharness.CheckRC(t, b, a)
					if cut := b.Link.Stats().RxGROSegments; cut == 0 {
						t.Fatal("no GSO super-frame reached the AF_PACKET link: the test shows nothing")
					}
				})
				t.Run("ud", func(t *testing.T) {
					a, b := testharness.PairOf(t, n, testharness.UDP, testharness.AFPacket, f, testharness.Options{Type: transport.UD})
					testharness.CheckUD(t, a, b)
					testharness.CheckUD(t, b, a)
				})
			})
		}
	}
}

// TestVethMultiQueue runs devices whose UDP links have two receive queues
// (nic.MultiQueue): each device receives, and runs its QPs' deferred work,
// on two goroutines, a QP always on its own queue's. Eight QP pairs stream
// WRITEs, SENDs and READs at once in both directions; every byte and every
// completion is checked, both queues of both links carry traffic, and no
// goroutine outlives the devices.
func TestVethMultiQueue(t *testing.T) {
	testharness.NoLeaks(t)
	n := testharness.NewNet(t, testharness.Config{MTU: testharness.VethMTU(transport.MTU1024)})
	a, b := testharness.Pair(t, n, testharness.UDPQueues, testharness.IPv4, testharness.Options{})
	testharness.CheckRC(t, a, b)
	pairs := [][2]*testharness.Peer{{a, b}}
	for len(pairs) < 8 {
		x, y := a.NewQP(t), b.NewQP(t)
		testharness.Connect(t, x, y)
		pairs = append(pairs, [2]*testharness.Peer{x, y})
	}
	ops := []transport.WROpcode{transport.WRRDMAWrite, transport.WRSend, transport.WRRDMARead}
	t.Run("streams", func(t *testing.T) {
		for i, p := range pairs {
			from, to := p[0], p[1]
			if i%2 == 1 {
				from, to = to, from
			}
			op := ops[i%len(ops)]
			t.Run(fmt.Sprintf("qp%#x-%v", from.QP.QPN(), op), func(t *testing.T) {
				t.Parallel()
				testharness.Stream(t, from, to, op, 4<<20, 8192, 16, uint64(i))
			})
		}
	})
	for _, p := range []*testharness.Peer{a, b} {
		l := p.Link.(*udp.Link)
		for q := range 2 {
			if l.RxQueuePackets(q) == 0 {
				t.Errorf("%s: receive queue %d carried nothing (queue 0 %d, queue 1 %d packets)",
					l.Info().Name, q, l.RxQueuePackets(0), l.RxQueuePackets(1))
			}
		}
	}
}
