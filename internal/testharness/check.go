package testharness

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/inet"
	"github.com/goroce/goroce/transport"
)

// completionWait bounds every wait for a completion: generous, because a
// lossy path recovers by timeouts and the machine may be loaded.
const completionWait = 20 * time.Second

// Sizes returns message sizes around the path MTU: empty, one byte, one
// packet and a byte either side, several packets, and up to max.
func Sizes(mtu transport.MTU, max int) []int {
	m := mtu.Bytes()
	var s []int
	for _, n := range []int{0, 1, m - 1, m, m + 1, 3*m + 5, 65536 + 3, 1 << 20} {
		if n <= max {
			s = append(s, n)
		}
	}
	return s
}

// Layout of a peer's buffer for the checks: sources in the first half,
// destinations in the second, each message with a guard after it that
// must stay untouched.
const guard = 64

func (p *Peer) half() int { return len(p.Buf) / 2 }

// Op runs one operation from a to b (READ: a reads b's bytes), n bytes
// split over sge SGEs, and checks the completions at both ends and every
// byte, including that nothing was written past the message.
func Op(t testing.TB, a, b *Peer, op transport.WROpcode, n, sge int, seed uint32) {
	t.Helper()
	do := b.half()
	if op == transport.WRRDMARead {
		do = a.half()
	}
	if n+guard > b.half() || n > len(b.RO) {
		t.Fatalf("%d bytes do not fit half of a %d-byte buffer", n, len(b.Buf))
	}
	// The source: a's first half, or for READ a stretch of b's read-only
	// region chosen by seed; the destination: the other side's second half.
	src, so := a.Buf, 0
	dst := b.Buf
	if op == transport.WRRDMARead {
		src, so, dst = b.RO, int(seed*4099)%(len(b.RO)-n+1), a.Buf
	} else {
		Fill(a.Buf[:n], seed)
	}
	Fill(dst[do:do+n], ^seed)
	clear(dst[do+n : do+n+guard])
	Settle(a, b)
	imm := seed | 1
	recv := op == transport.WRSend || op == transport.WRSendWithImm || op == transport.WRRDMAWriteWithImm
	if recv {
		Must(t, b.QP.PostRecv(&transport.RecvWR{WRID: uint64(seed), SGL: sgl(b.MR, do, n+guard, sge)}))
	}
	wr := transport.SendWR{WRID: uint64(seed), Opcode: op, Flags: transport.Signaled, Imm: imm}
	if op == transport.WRRDMARead {
		wr.SGL = sgl(a.MR, do, n, sge)
		wr.RemoteAddr, wr.RKey = b.ROMR.Addr()+uint64(so), b.ROMR.RKey()
	} else {
		wr.SGL = sgl(a.MR, so, n, sge)
		wr.RemoteAddr, wr.RKey = b.MR.Addr()+uint64(do), b.MR.RKey()
	}
	Must(t, a.QP.PostSend(&wr))
	if wc := Wait(t, a.SCQ, completionWait); wc.Status != transport.Success || wc.WRID != wr.WRID || wc.Opcode != sendOpcode(op) {
		t.Fatalf("%v %d bytes: send completion %+v", op, n, wc)
	}
	if recv {
		rc := Wait(t, b.RCQ, completionWait)
		wantOp := transport.OpRecv
		if op == transport.WRRDMAWriteWithImm {
			wantOp = transport.OpRecvRDMAWithImm
		}
		withImm := op != transport.WRSend
		if rc.Status != transport.Success || rc.WRID != uint64(seed) || rc.ByteLen != uint32(n) || rc.Opcode != wantOp ||
			withImm != (rc.Flags&transport.WithImm != 0) || withImm && rc.ImmData != imm || rc.SrcQP != a.QP.QPN() && a.QP.Type() != transport.RC {
			t.Fatalf("%v %d bytes: receive completion %+v", op, n, rc)
		}
	}
	if op == transport.WRRDMAWrite && a.QP.Type() == transport.UC {
		// UC completes a WRITE once it is on the wire. A SEND after it on
		// the same QP arrives after it: its receive shows the WRITE landed.
		marker(t, a, b)
	}
	Settle(a, b)
	if !bytes.Equal(src[so:so+n], dst[do:do+n]) {
		t.Fatalf("%v of %d bytes: data differs at byte %d", op, n, firstDiff(src[so:so+n], dst[do:do+n]))
	}
	if !bytes.Equal(dst[do+n:do+n+guard], make([]byte, guard)) {
		t.Fatalf("%v of %d bytes wrote past its end", op, n)
	}
}

func sendOpcode(op transport.WROpcode) transport.WCOpcode {
	switch op {
	case transport.WRRDMAWrite, transport.WRRDMAWriteWithImm:
		return transport.OpRDMAWrite
	case transport.WRRDMARead:
		return transport.OpRDMARead
	case transport.WRAtomicCmpAndSwp:
		return transport.OpCompSwap
	case transport.WRAtomicFetchAndAdd:
		return transport.OpFetchAdd
	}
	return transport.OpSend
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// marker sends an empty SEND from a to b and waits for its receive.
func marker(t testing.TB, a, b *Peer) {
	t.Helper()
	Must(t, b.QP.PostRecv(&transport.RecvWR{WRID: 0xfeed}))
	Must(t, a.QP.PostSend(&transport.SendWR{WRID: 0xfeed, Opcode: transport.WRSend}))
	if wc := Wait(t, b.RCQ, completionWait); wc.WRID != 0xfeed || wc.Status != transport.Success {
		t.Fatalf("marker receive %+v", wc)
	}
}

// sgl splits n bytes at off into k SGEs of about equal size.
func sgl(m *transport.MR, off, n, k int) []transport.SGE {
	var s []transport.SGE
	for i := range k {
		lo, hi := n*i/k, n*(i+1)/k
		if hi > lo {
			s = append(s, m.SGE(off+lo, hi-lo))
		}
	}
	return s
}

// Must fails t if err is set. It marks itself a helper only then:
// Helper walks the stack, and benchmarks call Must for every post.
func Must(t testing.TB, err error) {
	if err != nil {
		t.Helper()
		t.Fatal(err)
	}
}

// RCOps are the RC operations CheckRC runs besides atomics.
var RCOps = []transport.WROpcode{transport.WRSend, transport.WRSendWithImm, transport.WRRDMAWrite, transport.WRRDMAWriteWithImm, transport.WRRDMARead}

// CheckRC runs every RC operation from a to b at every size up to 1 MiB,
// with one and three SGEs, then the atomics, then a burst of mixed
// operations in flight together.
func CheckRC(t *testing.T, a, b *Peer) {
	t.Helper()
	seed := uint32(1)
	for _, op := range RCOps {
		for _, n := range Sizes(a.PathMTU(), a.half()-guard) {
			for _, k := range []int{1, 3} {
				Op(t, a, b, op, n, k, seed)
				seed++
			}
		}
	}
	Atomics(t, a, b)
	Burst(t, a, b, 64, 7)
}

// Atomics checks fetch-and-add and compare-and-swap on a word of b's.
func Atomics(t testing.TB, a, b *Peer) {
	t.Helper()
	const at, res = 64, 128 // b's word; where a receives the original value
	binary.LittleEndian.PutUint64(b.Buf[at:], 40)
	Settle(b)
	steps := []struct {
		op                  transport.WROpcode
		compareAdd, swap    uint64
		wantOrig, wantAfter uint64
	}{
		{transport.WRAtomicFetchAndAdd, 2, 0, 40, 42},
		{transport.WRAtomicCmpAndSwp, 42, 7, 42, 7},
		{transport.WRAtomicCmpAndSwp, 0, 9, 7, 7}, // no match: unchanged
		{transport.WRAtomicFetchAndAdd, 1 << 63, 0, 7, 7 + 1<<63},
	}
	for i, s := range steps {
		Must(t, a.QP.PostSend(&transport.SendWR{WRID: uint64(i), Opcode: s.op, Flags: transport.Signaled,
			SGL: []transport.SGE{a.MR.SGE(res, 8)}, RemoteAddr: b.MR.Addr() + at, RKey: b.MR.RKey(),
			CompareAdd: s.compareAdd, Swap: s.swap}))
		if wc := Wait(t, a.SCQ, completionWait); wc.Status != transport.Success || wc.Opcode != sendOpcode(s.op) || wc.ByteLen != 8 {
			t.Fatalf("atomic %d %v: %+v", i, s.op, wc)
		}
		Settle(a, b)
		orig, after := binary.LittleEndian.Uint64(a.Buf[res:]), binary.LittleEndian.Uint64(b.Buf[at:])
		if orig != s.wantOrig || after != s.wantAfter {
			t.Fatalf("atomic %d %v: original %d, now %d; want %d, %d", i, s.op, orig, after, s.wantOrig, s.wantAfter)
		}
	}
}

// Burst posts count operations of random kinds and sizes at once, each on
// its own stretch of the buffers, and checks them all: the send queue,
// the window and the READ/atomic limits working together on a real link.
func Burst(t testing.TB, a, b *Peer, count int, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0))
	slot := a.half() / count
	type msg struct {
		op transport.WROpcode
		n  int
		so int // source offset: in a's buffer, or in b's read-only region for READ
	}
	msgs := make([]msg, count)
	for i := range msgs {
		op := RCOps[rng.IntN(len(RCOps))]
		if a.QP.Type() == transport.UC && op == transport.WRRDMARead {
			op = transport.WRSend
		}
		n := rng.IntN(slot - guard)
		msgs[i] = msg{op, n, i * slot}
		do := a.half() + i*slot
		wr := transport.SendWR{WRID: uint64(i), Opcode: op, Flags: transport.Signaled, Imm: uint32(i), RKey: b.MR.RKey()}
		switch op {
		case transport.WRRDMARead:
			msgs[i].so = rng.IntN(len(b.RO) - n + 1)
			clear(a.Buf[do : do+n+guard])
			wr.SGL = []transport.SGE{a.MR.SGE(do, n)}
			wr.RemoteAddr, wr.RKey = b.ROMR.Addr()+uint64(msgs[i].so), b.ROMR.RKey()
		default:
			Fill(a.Buf[msgs[i].so:msgs[i].so+n], uint32(seed)<<16|uint32(i))
			clear(b.Buf[do : do+n+guard])
			wr.SGL = []transport.SGE{a.MR.SGE(msgs[i].so, n)}
			wr.RemoteAddr = b.MR.Addr() + uint64(do)
		}
		if op == transport.WRSend || op == transport.WRSendWithImm || op == transport.WRRDMAWriteWithImm {
			Must(t, b.QP.PostRecv(&transport.RecvWR{WRID: uint64(i), SGL: []transport.SGE{b.MR.SGE(do, slot)}}))
		}
		Settle(a, b)
		Must(t, a.QP.PostSend(&wr))
	}
	for i, m := range msgs {
		if wc := Wait(t, a.SCQ, completionWait); wc.Status != transport.Success || wc.WRID != uint64(i) {
			t.Fatalf("burst message %d (%v, %d bytes): %+v", i, m.op, m.n, wc)
		}
	}
	for i, m := range msgs {
		if m.op == transport.WRSend || m.op == transport.WRSendWithImm || m.op == transport.WRRDMAWriteWithImm {
			if rc := Wait(t, b.RCQ, completionWait); rc.Status != transport.Success || rc.WRID != uint64(i) || rc.ByteLen != uint32(m.n) {
				t.Fatalf("burst receive %d (%v, %d bytes): %+v", i, m.op, m.n, rc)
			}
		}
	}
	Settle(a, b)
	for i, m := range msgs {
		do := a.half() + i*slot
		src, dst := a.Buf, b.Buf
		if m.op == transport.WRRDMARead {
			src, dst = b.RO, a.Buf
		}
		if !bytes.Equal(src[m.so:m.so+m.n], dst[do:do+m.n]) || !bytes.Equal(dst[do+m.n:do+m.n+guard], make([]byte, guard)) {
			t.Fatalf("burst message %d (%v, %d bytes): data differs", i, m.op, m.n)
		}
	}
}

// UCOps are the UC operations CheckUC runs.
var UCOps = []transport.WROpcode{transport.WRSend, transport.WRSendWithImm, transport.WRRDMAWrite, transport.WRRDMAWriteWithImm}

// CheckUC runs every UC operation from a to b, up to 64 KiB: UC has no
// flow control, and a message longer than the veth's backlog of 1000
// packets would overrun the receiving CPU.
func CheckUC(t *testing.T, a, b *Peer) {
	t.Helper()
	seed := uint32(1)
	for _, op := range UCOps {
		for _, n := range Sizes(a.PathMTU(), 65536+3) {
			Op(t, a, b, op, n, 2, seed)
			seed++
		}
	}
	if c := b.Dev.Counters(); c.SentACKs.Load()+c.SentNAKs.Load() != 0 {
		t.Fatalf("UC responder acknowledged: %d ACKs, %d NAKs", c.SentACKs.Load(), c.SentNAKs.Load())
	}
}

// CheckUD sends UD messages of every size up to the MTU from a to b, with
// and without immediate data, and checks the GRH the receive buffer holds
// (as HCAs place it: an IPv4 header in its last 20 bytes, or the IPv6
// header), the completion and the payload; then b answers a through an
// address handle made from the completion, as a UD server does.
func CheckUD(t *testing.T, a, b *Peer) {
	t.Helper()
	ah := a.AH(t, b)
	mtu := a.Dev.ActiveMTU().Bytes()
	seed := uint32(1)
	var last transport.WC
	var lastGRH [bth.GRHLen]byte
	for _, n := range []int{0, 1, mtu / 2, mtu - 1, mtu} {
		for _, op := range []transport.WROpcode{transport.WRSend, transport.WRSendWithImm} {
			Fill(a.Buf[:n], seed)
			Fill(b.Buf[:bth.GRHLen+n+guard], ^seed)
			clear(b.Buf[bth.GRHLen+n : bth.GRHLen+n+guard])
			Settle(a, b)
			Must(t, b.QP.PostRecv(&transport.RecvWR{WRID: uint64(seed), SGL: []transport.SGE{b.MR.SGE(0, bth.GRHLen+n+guard)}}))
			Must(t, a.QP.PostSend(&transport.SendWR{WRID: uint64(seed), Opcode: op, Flags: transport.Signaled, Imm: seed,
				SGL: []transport.SGE{a.MR.SGE(0, n)}, AH: ah, RemoteQPN: b.QP.QPN(), RemoteQKey: QKey}))
			if wc := Wait(t, a.SCQ, completionWait); wc.Status != transport.Success || wc.WRID != uint64(seed) {
				t.Fatalf("UD %v %d bytes: send completion %+v", op, n, wc)
			}
			wc := Wait(t, b.RCQ, completionWait)
			flags := transport.WithGRH
			if op == transport.WRSendWithImm {
				flags |= transport.WithImm
			}
			// The SL is the packet type, as mlx5 reports it (transport.SLRoCEv2IPv4).
			sl := transport.SLRoCEv2IPv6
			if a.Addr.Is4() {
				sl = transport.SLRoCEv2IPv4
			}
			if wc.Status != transport.Success || wc.WRID != uint64(seed) || wc.ByteLen != uint32(bth.GRHLen+n) ||
				wc.SrcQP != a.QP.QPN() || wc.Flags != flags || wc.SL != sl || op == transport.WRSendWithImm && wc.ImmData != seed {
				t.Fatalf("UD %v %d bytes: receive completion %+v", op, n, wc)
			}
			Settle(a, b)
			if err := checkGRH(b.Buf[:bth.GRHLen], a, b); err != nil {
				t.Fatalf("UD %v %d bytes: %v", op, n, err)
			}
			if !bytes.Equal(b.Buf[bth.GRHLen:bth.GRHLen+n], a.Buf[:n]) || !bytes.Equal(b.Buf[bth.GRHLen+n:bth.GRHLen+n+guard], make([]byte, guard)) {
				t.Fatalf("UD %v %d bytes: payload differs", op, n)
			}
			last, lastGRH = wc, [bth.GRHLen]byte(b.Buf[:bth.GRHLen])
			seed++
		}
	}
	// b answers through an AH built from the last completion and its GRH.
	attr, err := transport.AHAttrFromWC(&last, lastGRH[:], b.GIDIndex)
	Must(t, err)
	back, err := b.Dev.CreateAH(b.PD, attr)
	Must(t, err)
	Fill(b.Buf[:100], seed)
	Settle(a, b)
	Must(t, a.QP.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{a.MR.SGE(a.half(), bth.GRHLen+100)}}))
	Must(t, b.QP.PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{b.MR.SGE(0, 100)},
		AH: back, RemoteQPN: last.SrcQP, RemoteQKey: QKey}))
	if wc := Wait(t, b.SCQ, completionWait); wc.Status != transport.Success {
		t.Fatalf("UD answer: send completion %+v", wc)
	}
	if wc := Wait(t, a.RCQ, completionWait); wc.Status != transport.Success || wc.ByteLen != bth.GRHLen+100 || wc.SrcQP != b.QP.QPN() {
		t.Fatalf("UD answer: receive completion %+v", wc)
	}
	Settle(a, b)
	if !bytes.Equal(a.Buf[a.half()+bth.GRHLen:a.half()+bth.GRHLen+100], b.Buf[:100]) {
		t.Fatal("UD answer: payload differs")
	}
}

// checkGRH checks the network header a UD receive placed before the
// payload: from a to b, the traffic class a's AH set.
func checkGRH(g []byte, a, b *Peer) error {
	h := bth.GRH(g)
	dst := netip.AddrFrom16(h.DGID())
	if h.IsIPv4() {
		dst = netip.AddrFrom4([4]byte(g[36:40]))
	}
	if h.Source() != a.Addr || dst != b.Addr {
		return fmt.Errorf("GRH %v -> %v, want %v -> %v", h.Source(), dst, a.Addr, b.Addr)
	}
	// The DSCP the AH set; the ECN bits are the sender's (goroce marks
	// ECT(0), rxe sends Not-ECT: docs/congestion.md).
	if a.Addr.Is4() {
		if !bytes.Equal(g[:20], make([]byte, 20)) || g[20] != 0x45 || g[21]&^inet.ECNMask != 0x28 {
			return fmt.Errorf("IPv4 GRH area % x", g)
		}
	} else if h.IPVer() != 6 || h.TClass()&^inet.ECNMask != 0x28 {
		return fmt.Errorf("IPv6 GRH: version %d traffic class %#x", h.IPVer(), h.TClass())
	}
	return nil
}
