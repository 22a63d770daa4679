package nic

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
)

// Helpers shared by every link's tests: build RoCEv2 frames the way the
// engine does (bth.Outer.Put, a BTH, payload, PutICRC) and check what
// arrives.

// testFrames builds count SEND-only frames from o with payload bytes each;
// the PSN is the frame's index and the payload a pattern derived from it.
func testFrames(o bth.Outer, count, payload int) []Frame {
	frames := make([]Frame, count)
	roceLen := bth.BTHLen + payload + bth.ICRCLen
	for i := range frames {
		b := make([]byte, Headroom+o.Len()+roceLen)
		dg := b[Headroom:]
		h := o.Put(dg, roceLen)
		bth.BTH(dg[h:]).Encode(&bth.BTHFields{OpCode: 0x04, PKey: bth.DefaultPKey, DestQP: 0x11, PSN: bth.PSN(i)})
		fillPattern(dg[h+bth.BTHLen:len(dg)-bth.ICRCLen], i)
		f, err := bth.DecodeIP(dg)
		if err != nil {
			panic(err)
		}
		f.PutICRC()
		frames[i] = Frame{B: b, Off: Headroom}
	}
	return frames
}

func fillPattern(p []byte, i int) {
	for j := range p {
		p[j] = byte(i*7 + j)
	}
}

// checkFrame verifies a received frame: decodes, ICRC verifies, addresses
// and payload are what testFrames sent. It returns the PSN.
func checkFrame(f Frame, o bth.Outer, payload int) (int, error) {
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

// exchange sends count frames of payload bytes from a to b in batches of
// batch and checks that every one arrives intact, each PSN once. Like an RC
// send queue, the sender stays at most window frames ahead of the receiver:
// nothing in the path has flow control (a veth drops what overflows the
// receiving CPU's backlog of 1000 packets).
func exchange(t *testing.T, a, b Link, o bth.Outer, count, payload, batch int) {
	t.Helper()
	frames := testFrames(o, count, payload)
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
		buf := make([]Frame, 64)
		got := 0
		for got < count {
			n, err := b.Recv(buf)
			if err != nil {
				done <- result{got, fmt.Errorf("recv after %d: %w", got, err)}
				return
			}
			for _, f := range buf[:n] {
				if isWarmup(f) {
					continue
				}
				psn, err := checkFrame(f, o, payload)
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

// outer describes the path from l to dst: the source is l's first address
// of dst's kind (IPv4, link-local IPv6, other IPv6), as a GID index would
// choose it.
func outer(l Link, dst netip.Addr, qpn uint32) bth.Outer {
	src := l.Info().Addrs[0]
	for _, a := range l.Info().Addrs {
		if a.Unmap().Is4() == dst.Unmap().Is4() && a.IsLinkLocalUnicast() == dst.IsLinkLocalUnicast() {
			src = a
			break
		}
	}
	return bth.Outer{Src: src, Dst: dst, SrcPort: l.SrcPort(qpn)}
}

var _ = binary.BigEndian

// warmupQP marks frames sent only to make a link resolve its next hop;
// exchange ignores them when they arrive.
const warmupQP = 0x99

// warmup returns one frame from o addressed to warmupQP.
func warmup(o bth.Outer) []Frame {
	fr := testFrames(o, 1, 8)
	dg := fr[0].Datagram()
	f, _ := bth.DecodeIP(dg)
	bth.BTH(f.RoCE()).SetDestQP(warmupQP)
	f.PutICRC()
	return fr
}

func isWarmup(f Frame) bool {
	fr, err := bth.DecodeIP(f.Datagram())
	return err == nil && bth.BTH(fr.RoCE()).DestQP() == warmupQP
}

// stopResolver stops the link's next-hop resolver; lookups of the MACs it
// found still succeed.
func (l *AFPacket) stopResolver() { l.eth.StopResolver() }

func (l *AFXDP) stopResolver() { l.eth.StopResolver() }

// assertNoAllocs checks that sending 32 frames from a and receiving them
// on b allocates nothing once warm.
func assertNoAllocs(t *testing.T, a, b Link, frames []Frame) {
	t.Helper()
	// A lost frame must fail the test, not hang it: close b after a while,
	// which makes its Recv return an error.
	guard := time.AfterFunc(30*time.Second, func() { b.Close() })
	defer guard.Stop()
	// AllocsPerRun counts the whole process, and a resolver's refresh of
	// the neighbour table, once a second, allocates: on a loaded machine
	// the 50 runs take longer than that. The MACs are known by now (the
	// callers wait for them), so the resolvers can stop.
	for _, l := range []Link{a, b} {
		if e, ok := l.(interface{ stopResolver() }); ok {
			e.stopResolver()
		}
	}
	buf := make([]Frame, 64)
	recv := func() {
		for got := 0; got < len(frames); {
			n, err := b.Recv(buf)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range buf[:n] {
				if !isWarmup(f) {
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
