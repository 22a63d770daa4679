// Package linktest is the harness the link packages' tests share: RoCEv2
// frames built as the engine builds them and checked as they arrive, an
// exchange between two links, a veth pair in network namespaces with links
// opened inside them, and a packet capture on a veth end.
package linktest

import (
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic"
)

// Helpers shared by every link's tests: build RoCEv2 frames the way the
// engine does (bth.Outer.Put, a BTH, payload, PutICRC) and check what
// arrives.

// Frames builds count SEND-only frames from o with payload bytes each;
// the PSN is the frame's index and the payload a pattern derived from it.
func Frames(o bth.Outer, count, payload int) []nic.Frame {
	frames := make([]nic.Frame, count)
	roceLen := bth.BTHLen + payload + bth.ICRCLen
	for i := range frames {
		b := make([]byte, nic.Headroom+o.Len()+roceLen)
		dg := b[nic.Headroom:]
		h := o.Put(dg, roceLen)
		bth.BTH(dg[h:]).Encode(&bth.BTHFields{OpCode: 0x04, PKey: bth.DefaultPKey, DestQP: 0x11, PSN: bth.PSN(i)})
		fillPattern(dg[h+bth.BTHLen:len(dg)-bth.ICRCLen], i)
		f, err := bth.DecodeIP(dg)
		if err != nil {
			panic(err)
		}
		f.PutICRC()
		frames[i] = nic.Frame{B: b, Off: nic.Headroom}
	}
	return frames
}

func fillPattern(p []byte, i int) {
	for j := range p {
		p[j] = byte(i*7 + j)
	}
}

// CheckFrame verifies a received frame: decodes, ICRC verifies, addresses
// and payload are what Frames sent. It returns the PSN.
func CheckFrame(f nic.Frame, o bth.Outer, payload int) (int, error) {
	fr, err := bth.DecodeIP(f.Datagram())
	if err != nil {
		return 0, err
	}
	if !fr.VerifyICRC() {
		return 0, fmt.Errorf("ICRC %#x, computed %#x", fr.StoredICRC(), fr.ComputeICRC())
	}
	// A frame handed up verified must be what decoding it gives.
	if f.Verified && (&f.Decoded.IP()[0] != &fr.IP()[0] || &f.Decoded.RoCE()[0] != &fr.RoCE()[0] ||
		len(f.Decoded.RoCE()) != len(fr.RoCE()) || !f.Decoded.VerifyICRC()) {
		return 0, errors.New("the link's decoded frame is not the datagram's")
	}
	src, dst := fr.SrcAddr(), fr.DstAddr()
	if src != o.Src.WithZone("") || dst != o.Dst.WithZone("") {
		return 0, fmt.Errorf("addresses %v -> %v, want %v -> %v", src, dst, o.Src, o.Dst)
	}
	r := fr.RoCE()
	if len(r) != bth.BTHLen+payload+bth.ICRCLen {
		return 0, fmt.Errorf("transport length %d, want %d", len(r), bth.BTHLen+payload+bth.ICRCLen)
	}
	psn := int(bth.BTH(r).PSN())
	want := make([]byte, payload)
	fillPattern(want, psn)
	if string(want) != string(r[bth.BTHLen:len(r)-bth.ICRCLen]) {
		return 0, errors.New("payload differs")
	}
	if fr.UDP().SrcPort() != o.SrcPort {
		return 0, fmt.Errorf("source port %#x, want %#x", fr.UDP().SrcPort(), o.SrcPort)
	}
	return psn, nil
}

// Exchange sends count frames of payload bytes from a to b in batches of
// batch and checks that every one arrives intact, each PSN once. Like an RC
// send queue, the sender stays at most window frames ahead of the receiver:
// nothing in the path has flow control (a veth drops what overflows the
// receiving CPU's backlog of 1000 packets).
func Exchange(t *testing.T, a, b nic.Link, o bth.Outer, count, payload, batch int) {
	t.Helper()
	frames := Frames(o, count, payload)
	type result struct {
		seen int
		err  error
	}
	dropped0 := a.Stats().TxDropped
	done := make(chan result, 1)
	var received atomic.Int64
	const window = 512
	go func() {
		seen := make([]bool, count)
		buf := make([]nic.Frame, 64)
		got := 0
		for got < count {
			n, err := b.Recv(buf)
			if err != nil {
				done <- result{got, fmt.Errorf("recv after %d: %w", got, err)}
				return
			}
			for _, f := range buf[:n] {
				if IsWarmup(f) {
					continue
				}
				psn, err := CheckFrame(f, o, payload)
				if err != nil {
					done <- result{got, err}
					return
				}
				if psn >= count || seen[psn] {
					done <- result{got, fmt.Errorf("PSN %d unexpected or repeated", psn)}
					return
				}
				seen[psn] = true
				got++
				received.Add(1)
			}
		}
		done <- result{got, nil}
	}()
	for i := 0; i < count; i += batch {
		for wait := time.Now(); int64(i)-received.Load() > window && time.Since(wait) < 10*time.Second; {
			time.Sleep(50 * time.Microsecond)
		}
		n, err := a.Send(frames[i:min(i+batch, count)])
		if err != nil || n != min(batch, count-i) {
			t.Fatalf("send: %d, %v", n, err)
		}
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("%s -> %s, %d x %d B: %v (stats tx %+v rx %+v)", a.Info().Name, b.Info().Name, count, payload, r.err, a.Stats(), b.Stats())
		}
	case <-time.After(10 * time.Second):
		b.Close()
		r := <-done
		t.Fatalf("%s -> %s: %d of %d frames arrived in 10 s (tx %+v rx %+v)", a.Info().Name, b.Info().Name, r.seen, count, a.Stats(), b.Stats())
	}
	if s := a.Stats(); s.TxDropped != dropped0 {
		t.Fatalf("sender dropped %d", s.TxDropped-dropped0)
	}
}

// Outer describes the path from l to dst: the source is l's first address
// of dst's kind (IPv4, link-local IPv6, other IPv6), as a GID index would
// choose it.
func Outer(l nic.Link, dst netip.Addr, qpn uint32) bth.Outer {
	src := l.Info().Addrs[0]
	for _, a := range l.Info().Addrs {
		if a.Unmap().Is4() == dst.Unmap().Is4() && a.IsLinkLocalUnicast() == dst.IsLinkLocalUnicast() {
			src = a
			break
		}
	}
	return bth.Outer{Src: src, Dst: dst, SrcPort: l.SrcPort(qpn)}
}

// warmupQP marks frames sent only to make a link resolve its next hop;
// Exchange ignores them when they arrive.
const warmupQP = 0x99

// Warmup returns one frame from o addressed to warmupQP.
func Warmup(o bth.Outer) []nic.Frame {
	fr := Frames(o, 1, 8)
	dg := fr[0].Datagram()
	f, _ := bth.DecodeIP(dg)
	bth.BTH(f.RoCE()).SetDestQP(warmupQP)
	f.PutICRC()
	return fr
}

// IsWarmup reports whether f is a Warmup frame.
func IsWarmup(f nic.Frame) bool {
	fr, err := bth.DecodeIP(f.Datagram())
	return err == nil && bth.BTH(fr.RoCE()).DestQP() == warmupQP
}

// Resolve sends a Warmup frame from a to o's destination, on b, so that a
// resolves the next hop (resolved waits for it), and takes the frame off
// b if it went out: when the kernel knew the MAC already, it did, and a
// test that counts every frame b receives (PollHold) would meet it. The
// link's own count says which happened (Stats.TxNoNeighbour), so nothing
// waits for a frame that never comes.
func Resolve(t *testing.T, a, b nic.Link, o bth.Outer, resolved func()) {
	t.Helper()
	before := a.Stats().TxNoNeighbour
	a.Send(Warmup(o))
	sent := a.Stats().TxNoNeighbour == before
	resolved()
	if !sent {
		return
	}
	buf := make([]nic.Frame, 4)
	for {
		n, err := b.Recv(buf)
		if err != nil {
			t.Fatalf("waiting for the warm-up frame: %v", err)
		}
		if n > 1 || n == 1 && !IsWarmup(buf[0]) {
			t.Fatalf("%d frames came before the warm-up frame", n)
		}
		if n == 1 {
			break
		}
	}
	b.(nic.Poller).EndRecv(0)
}

// AssertNoAllocs checks that sending 32 frames from a and receiving them
// on b allocates nothing once warm. AllocsPerRun counts the whole process,
// and a next-hop resolver's refresh of the neighbour table, once a second,
// allocates: on a loaded machine the 50 runs take longer than that. A link
// with a resolver stops it first (once the MACs are known).
func AssertNoAllocs(t *testing.T, a, b nic.Link, frames []nic.Frame) {
	t.Helper()
	// A lost frame must fail the test, not hang it: close b after a while,
	// which makes its Recv return an error.
	guard := time.AfterFunc(30*time.Second, func() { b.Close() })
	defer guard.Stop()
	buf := make([]nic.Frame, 64)
	recv := func() {
		for got := 0; got < len(frames); {
			n, err := b.Recv(buf)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range buf[:n] {
				if !IsWarmup(f) {
					got++
				}
			}
		}
	}
	a.Send(frames)
	recv()
	allocs := testing.AllocsPerRun(50, func() {
		a.Send(frames)
		recv()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per %d-frame send and receive", allocs, len(frames))
	}
}
