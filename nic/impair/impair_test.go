package impair

import (
	"encoding/binary"
	"math"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/goroce/goroce/internal/netns"
	"golang.org/x/sys/unix"
)

// path builds A <-> M <-> B with a forwarder in M.
func path(t *testing.T, mtu int, cfg Config) (*netns.Pair, *Forwarder) {
	t.Helper()
	p := netns.New(t, netns.Config{MTU: mtu, Middle: true})
	cfg.A, cfg.B = p.M.ToA, p.M.ToB
	var f *Forwarder
	if err := p.M.Do(func() (err error) { f, err = Open(cfg); return }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return p, f
}

// udpIn opens a UDP socket in a namespace.
func udpIn(t *testing.T, e *netns.End, addr netip.Addr, port int) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	if err := e.Do(func() (err error) {
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, uint16(port))))
		return
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// stream sends n numbered datagrams of size bytes from a to b's port, in
// bursts that b drains before the next (so that b's socket buffer never
// overflows), and returns how often each number arrived and the order they
// arrived in. dir reads the forwarder's counters for the direction from a
// to b. Each burst ends on the forwarder's word, not on a quiet spell: once
// it has drawn the faults for every datagram of the burst, exactly
// sent - lost - dropped + duplicated of them are due at b (held ones
// later), and the burst is over when that many arrived. A port other than
// 4791 meets no fault, so there every datagram is due.
func stream(t *testing.T, a, b *net.UDPConn, n, size int, dir func() Stats) (counts []int, order []int) {
	t.Helper()
	counts = make([]int, n)
	msg := make([]byte, size)
	buf := make([]byte, 65536)
	const burst = 50
	roce := b.LocalAddr().(*net.UDPAddr).Port == 4791
	before := dir()
	arrived := 0
	// An upper bound on the whole stream, never the signal that a burst
	// ended: a stream that misses it returns what arrived, and the
	// caller's checks fail.
	deadline := time.Now().Add(20 * time.Second)
	due := func(sent int) (int, bool) {
		if !roce {
			return sent, true
		}
		s := dir()
		decided := s.Impaired - before.Impaired
		return sent - int(s.Lost-before.Lost) - int(s.Dropped-before.Dropped) + int(s.Duplicated-before.Duplicated),
			decided >= uint64(sent)
	}
	for i := 0; i < n; i += burst {
		for j := i; j < min(i+burst, n); j++ {
			binary.BigEndian.PutUint32(msg, uint32(j))
			if _, err := a.WriteTo(msg, b.LocalAddr()); err != nil {
				t.Fatal(err)
			}
		}
		sent := min(i+burst, n)
		for {
			want, final := due(sent)
			if final && arrived == want {
				break
			}
			if arrived > want && final {
				t.Fatalf("%d datagrams arrived, the forwarder let %d through", arrived, want)
			}
			if time.Now().After(deadline) {
				t.Logf("stream: %d of %d due datagrams arrived", arrived, want)
				return counts, order
			}
			// Short reads so that the counters are read again when
			// nothing more is due (a lost last datagram).
			b.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
			k, err := b.Read(buf)
			if err != nil {
				continue
			}
			arrived++
			if k != size {
				t.Fatalf("datagram of %d bytes, sent %d", k, size)
			}
			s := int(binary.BigEndian.Uint32(buf))
			if s >= n {
				continue // a corrupted number
			}
			counts[s]++
			order = append(order, s)
		}
	}
	return counts, order
}

// aToB and bToA read the forwarder's counters for one direction.
func aToB(f *Forwarder) func() Stats { return func() Stats { s, _ := f.Stats(); return s } }
func bToA(f *Forwarder) func() Stats { return func() Stats { _, s := f.Stats(); return s } }

// resolve makes each side learn the other's MAC with a datagram to a port
// nothing impairs: packets the kernel queues while it resolves a neighbour
// can leave out of order, and the tests compare orders and fates.
func resolve(t *testing.T, p *netns.Pair, f *Forwarder, a, b netip.Addr) {
	t.Helper()
	x, y := udpIn(t, p.A, a, 4792), udpIn(t, p.B, b, 4792)
	for _, d := range []struct {
		from, to *net.UDPConn
		dir      func() Stats
	}{{x, y, aToB(f)}, {y, x, bToA(f)}} {
		if counts, _ := stream(t, d.from, d.to, 1, 8, d.dir); counts[0] != 1 {
			t.Fatalf("%v <-> %v: no connectivity", a, b)
		}
	}
}

// TestForwardClean: without faults everything crosses both ways, IPv4
// and IPv6, small and MTU-sized, and the forwarder is invisible.
func TestForwardClean(t *testing.T) {
	p, f := path(t, 1500, Config{})
	for _, fam := range []struct{ a, b netip.Addr }{{p.A.IPv4, p.B.IPv4}, {p.A.IPv6, p.B.IPv6}} {
		resolve(t, p, f, fam.a, fam.b)
		a, b := udpIn(t, p.A, fam.a, 0), udpIn(t, p.B, fam.b, 4791)
		for _, size := range []int{8, 1400} {
			counts, order := stream(t, a, b, 300, size, aToB(f))
			for i, c := range counts {
				if c != 1 {
					t.Fatalf("%v size %d: datagram %d arrived %d times", fam.b, size, i, c)
				}
			}
			for i, s := range order {
				if s != i {
					t.Fatalf("%v: datagram %d arrived in place %d", fam.b, s, i)
				}
			}
		}
		// And back.
		back := udpIn(t, p.A, fam.a, 4791)
		if counts, _ := stream(t, b, back, 100, 100, bToA(f)); counts[99] != 1 {
			t.Fatalf("B to A: %v", counts[90:])
		}
	}
	ab, ba := f.Stats()
	if ab.Forwarded == 0 || ba.Forwarded == 0 || ab.Lost+ab.Dropped+ba.Lost+ba.Dropped != 0 {
		t.Fatalf("stats A->B %+v B->A %+v", ab, ba)
	}
}

// TestForwardGSO: a UDP GSO send from A reaches the middle as one super-
// frame (the veth offloads it) and leaves as the datagrams it stands for,
// each of which B's kernel accepts (length and checksum right).
func TestForwardGSO(t *testing.T) {
	p, f := path(t, 1500, Config{})
	for _, fam := range []struct{ a, b netip.Addr }{{p.A.IPv4, p.B.IPv4}, {p.A.IPv6, p.B.IPv6}} {
		a, b := udpIn(t, p.A, fam.a, 0), udpIn(t, p.B, fam.b, 4791)
		const seg, n = 1000, 20
		msg := make([]byte, seg*n-7)
		for i := range n {
			binary.BigEndian.PutUint32(msg[i*seg:], uint32(i))
		}
		oob := make([]byte, unix.CmsgSpace(2))
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
		h.SetLen(unix.CmsgLen(2))
		binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], seg)
		before, _ := f.Stats()
		if _, _, err := a.WriteMsgUDPAddrPort(msg, oob, netip.AddrPortFrom(fam.b, 4791)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 2000)
		for i := range n {
			b.SetReadDeadline(time.Now().Add(2 * time.Second))
			k, err := b.Read(buf)
			if err != nil {
				t.Fatalf("%v: datagram %d: %v", fam.b, i, err)
			}
			want := min(seg, len(msg)-i*seg)
			if k != want || binary.BigEndian.Uint32(buf) != uint32(i) {
				t.Fatalf("%v: datagram %d: %d bytes, number %d", fam.b, i, k, binary.BigEndian.Uint32(buf))
			}
		}
		after, _ := f.Stats()
		if after.Segmented <= before.Segmented {
			t.Fatalf("%v: no super-frame was cut (stats %+v); is tx-udp-segmentation off on the veth?", fam.b, after)
		}
	}
}

// TestFaults: each fault at a rate happens about that often, the counters
// say exactly what happened, and only RoCEv2 (port 4791) is touched.
func TestFaults(t *testing.T) {
	const n = 4000
	cases := []struct {
		name   string
		faults Faults
		check  func(t *testing.T, counts, order []int, s Stats)
	}{
		{"loss", Faults{Loss: 0.1}, func(t *testing.T, counts, _ []int, s Stats) {
			lost := 0
			for _, c := range counts {
				lost += 1 - c
			}
			if uint64(lost) != s.Lost {
				t.Fatalf("%d did not arrive, forwarder lost %d", lost, s.Lost)
			}
			near(t, "loss", lost, n, 0.1)
		}},
		{"duplicate", Faults{Duplicate: 0.05}, func(t *testing.T, counts, _ []int, s Stats) {
			dup := 0
			for i, c := range counts {
				if c < 1 || c > 2 {
					t.Fatalf("datagram %d arrived %d times", i, c)
				}
				dup += c - 1
			}
			if uint64(dup) != s.Duplicated {
				t.Fatalf("%d duplicates arrived, forwarder made %d", dup, s.Duplicated)
			}
			near(t, "duplication", dup, n, 0.05)
		}},
		{"reorder", Faults{Reorder: 0.05, ReorderDelay: 2 * time.Millisecond}, func(t *testing.T, counts, order []int, s Stats) {
			late := 0
			for i := 1; i < len(order); i++ {
				if order[i] < order[i-1] {
					late++
				}
			}
			for i, c := range counts {
				if c != 1 {
					t.Fatalf("datagram %d arrived %d times", i, c)
				}
			}
			if late == 0 || uint64(late) > s.Reordered {
				t.Fatalf("%d arrived after a later one; forwarder reordered %d", late, s.Reordered)
			}
			near(t, "reordering", int(s.Reordered), n, 0.05)
		}},
		{"corrupt", Faults{Corrupt: 1}, func(t *testing.T, counts, _ []int, s Stats) {
			// Every datagram arrives (the UDP checksum was fixed up) with
			// one bit flipped: most in the payload of zeros, so the
			// sequence numbers of a few are wrong and others repeat.
			if s.Corrupted != n {
				t.Fatalf("corrupted %d of %d", s.Corrupted, n)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, f := path(t, 1500, Config{AtoB: c.faults, Seed: 1})
			resolve(t, p, f, p.A.IPv4, p.B.IPv4)
			a, b := udpIn(t, p.A, p.A.IPv4, 0), udpIn(t, p.B, p.B.IPv4, 4791)
			other := udpIn(t, p.B, p.B.IPv4, 4793)
			if counts, _ := stream(t, a, other, 200, 64, aToB(f)); counts[0]+counts[199] != 2 {
				t.Fatal("a datagram to port 4792 was impaired: only RoCEv2 should be")
			}
			before, _ := f.Stats()
			counts, order := stream(t, a, b, n, 64, aToB(f))
			after, _ := f.Stats()
			after.Lost -= before.Lost
			c.check(t, counts, order, after)
			if c.name == "corrupt" {
				if flipped := corrupted(t, a, b); flipped != 1 {
					t.Fatalf("%d bits flipped, want 1", flipped)
				}
			}
		})
	}
}

// corrupted sends a datagram of zeros and counts the set bits that arrive.
func corrupted(t *testing.T, a, b *net.UDPConn) int {
	msg := make([]byte, 200)
	a.WriteTo(msg, b.LocalAddr())
	b.SetReadDeadline(time.Now().Add(time.Second))
	k, err := b.Read(msg)
	if err != nil || k != 200 {
		t.Fatalf("corrupted datagram: %d bytes, %v", k, err)
	}
	bits := 0
	for _, x := range msg {
		for ; x != 0; x &= x - 1 {
			bits++
		}
	}
	return bits
}

// near fails unless got of n is within five standard deviations of rate.
func near(t *testing.T, what string, got, n int, rate float64) {
	t.Helper()
	sd := math.Sqrt(float64(n) * rate * (1 - rate))
	if d := math.Abs(float64(got) - float64(n)*rate); d > 5*sd {
		t.Fatalf("%s: %d of %d, expected about %.0f", what, got, n, float64(n)*rate)
	}
	t.Logf("%s: %d of %d (expected %.0f)", what, got, n, float64(n)*rate)
}

// TestSeedRepeats: the same seed loses the same packets.
func TestSeedRepeats(t *testing.T) {
	lostSet := func(seed uint64) []int {
		p, f := path(t, 1500, Config{AtoB: Faults{Loss: 0.2}, Seed: seed})
		resolve(t, p, f, p.A.IPv4, p.B.IPv4) // the same packets, in the same order
		a, b := udpIn(t, p.A, p.A.IPv4, 0), udpIn(t, p.B, p.B.IPv4, 4791)
		counts, _ := stream(t, a, b, 500, 32, aToB(f))
		var lost []int
		for i, c := range counts {
			if c == 0 {
				lost = append(lost, i)
			}
		}
		return lost
	}
	x, y, z := lostSet(7), lostSet(7), lostSet(8)
	if len(x) == 0 || !slices.Equal(x, y) {
		t.Fatalf("seed 7 lost %v, then %v", x, y)
	}
	if slices.Equal(x, z) {
		t.Fatal("seeds 7 and 8 lost the same packets")
	}
}

// TestDelay: a delay each way shows in the round trip, and SetFaults
// changes it while running.
func TestDelay(t *testing.T) {
	p, f := path(t, 1500, Config{})
	a, b := udpIn(t, p.A, p.A.IPv4, 0), udpIn(t, p.B, p.B.IPv4, 4791)
	rtt := func() time.Duration {
		buf := make([]byte, 100)
		start := time.Now()
		a.WriteTo(buf[:10], b.LocalAddr())
		b.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, from, err := b.ReadFrom(buf)
		if err != nil {
			t.Fatal(err)
		}
		// The answer goes to A's ephemeral port: not RoCEv2, so only
		// AllFrames delays it.
		b.WriteTo(buf[:10], from)
		a.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := a.Read(buf); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	// The fastest of a few round trips: a loaded machine only adds.
	fastest := func() time.Duration {
		m := time.Hour
		for range 5 {
			m = min(m, rtt())
		}
		return m
	}
	base := fastest()
	f.SetFaults(Faults{Delay: 20 * time.Millisecond}, Faults{Delay: 20 * time.Millisecond, AllFrames: true})
	// The delays alone make 40 ms, whatever the load; base+40 ms is no
	// lower bound, since load can inflate base more than the delayed
	// round trips (3.97 ms base, 40.7 ms delayed, seen under load).
	if d := fastest(); d < 40*time.Millisecond || d > base+500*time.Millisecond {
		t.Fatalf("round trip %v with 20 ms each way, %v without", d, base)
	}
	if ab, _ := f.Stats(); ab.Delayed == 0 {
		t.Fatalf("nothing delayed: %+v", ab)
	}
}

func TestOpenErrors(t *testing.T) {
	if _, err := Open(Config{A: "lo", B: "lo"}); err == nil {
		t.Fatal("one interface for both sides accepted")
	}
	if _, err := Open(Config{A: "lo", B: "nosuch0"}); err == nil {
		t.Fatal("missing interface accepted")
	}
}
