package transport_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testharness"

	"github.com/goroce/goroce/transport"
)

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*31) ^ seed
	}
}

// sgl splits n bytes at off into k SGEs of about equal size.
func sgl(m *transport.MR, off, n, k int) []transport.SGE {
	if n == 0 {
		return nil
	}
	var s []transport.SGE
	for i := range k {
		lo, hi := n*i/k, n*(i+1)/k
		if hi > lo {
			s = append(s, m.SGE(off+lo, hi-lo))
		}
	}
	return s
}

func TestOperations(t *testing.T) {
	sizes := []int{0, 1, 1023, 1024, 1025, 4096, 65536, 300001}
	ops := []transport.WROpcode{transport.WRSend, transport.WRSendWithImm, transport.WRRDMAWrite, transport.WRRDMAWriteWithImm, transport.WRRDMARead}
	for _, mtu := range []transport.MTU{transport.MTU256, transport.MTU1024, transport.MTU4096} {
		a, b, _ := testharness.MemPair(t, testharness.Options{MTU: mtu, PSN: 0xffff00, PSNB: 0x123456})
		for _, op := range ops {
			for _, n := range sizes {
				for _, k := range []int{1, 3} {
					t.Run(fmt.Sprintf("mtu%v/%v/%d/sge%d", mtu, op, n, k), func(t *testing.T) {
						checkOp(t, a, b, op, n, k)
					})
				}
			}
		}
	}
}

// checkOp runs one operation from a to b and checks data and completions.
func checkOp(t *testing.T, a, b *testharness.Peer, op transport.WROpcode, n, k int) {
	const srcOff, dstOff = 1000, 400000
	fill(a.Buf[srcOff:srcOff+n], byte(n+int(op)))
	fill(b.Buf[dstOff:dstOff+n], byte(n+int(op)+1))
	clear(b.Buf[dstOff+n : dstOff+n+64])
	wr := transport.SendWR{WRID: uint64(n)<<8 | uint64(op), Opcode: op, Flags: transport.Signaled, Imm: 0xdeadbeef}
	recv := op == transport.WRSend || op == transport.WRSendWithImm || op == transport.WRRDMAWriteWithImm
	if recv {
		if err := b.QP.PostRecv(&transport.RecvWR{WRID: 77, SGL: sgl(b.MR, dstOff, n+64, k)}); err != nil {
			t.Fatal(err)
		}
	}
	switch op {
	case transport.WRRDMARead:
		// a reads b's bytes into its own buffer.
		wr.SGL = sgl(a.MR, srcOff, n, k)
		wr.RemoteAddr, wr.RKey = b.MR.Addr()+dstOff, b.MR.RKey()
	default:
		wr.SGL = sgl(a.MR, srcOff, n, k)
		wr.RemoteAddr, wr.RKey = b.MR.Addr()+dstOff, b.MR.RKey()
	}
	if err := a.QP.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	wc := testharness.Wait(t, a.SCQ, 5*time.Second)
	if wc.Status != transport.Success || wc.WRID != wr.WRID {
		t.Fatalf("send completion %+v", wc)
	}
	if recv {
		rc := testharness.Wait(t, b.RCQ, 5*time.Second)
		wantOp := transport.OpRecv
		if op == transport.WRRDMAWriteWithImm {
			wantOp = transport.OpRecvRDMAWithImm
		}
		if rc.Status != transport.Success || rc.WRID != 77 || rc.ByteLen != uint32(n) || rc.Opcode != wantOp {
			t.Fatalf("recv completion %+v", rc)
		}
		if imm := op != transport.WRSend; imm != (rc.Flags&transport.WithImm != 0) || imm && rc.ImmData != 0xdeadbeef {
			t.Fatalf("immediate: %+v", rc)
		}
	}
	if op == transport.WRRDMAWrite && a.QP.Type() == transport.UC {
		// UC completes a WRITE once it is on the wire: a SEND after it on
		// the same QP arrives after it, so its receive shows the WRITE landed.
		waitPlaced(t, a, b)
	}
	if !bytes.Equal(a.Buf[srcOff:srcOff+n], b.Buf[dstOff:dstOff+n]) {
		t.Fatalf("%v of %d bytes: data differs", op, n)
	}
	if op != transport.WRRDMARead && !bytes.Equal(b.Buf[dstOff+n:dstOff+n+64], make([]byte, 64)) {
		t.Fatalf("%v wrote past its end", op)
	}
}

// waitPlaced sends an empty SEND from a to b and waits for its receive.
func waitPlaced(t testing.TB, a, b *testharness.Peer) {
	t.Helper()
	testharness.Must(t, b.QP.PostRecv(&transport.RecvWR{WRID: 0xfe}))
	testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: 0xfe, Opcode: transport.WRSend}))
	if wc := testharness.Wait(t, b.RCQ, 5*time.Second); wc.WRID != 0xfe {
		t.Fatalf("marker receive %+v", wc)
	}
}

func TestSendWithInvalidate(t *testing.T) {
	a, b, _ := testharness.MemPair(t, testharness.Options{})
	target, err := b.PD.Register(make([]byte, 4096), transport.LocalWrite|transport.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	b.QP.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{b.MR.SGE(0, 100)}})
	a.QP.PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRSendWithInv, Flags: transport.Signaled,
		SGL: []transport.SGE{a.MR.SGE(0, 10)}, InvRKey: target.RKey()})
	rc := testharness.Wait(t, b.RCQ, 2*time.Second)
	if rc.Status != transport.Success || rc.Flags&transport.WithInv == 0 || rc.InvalidatedRKey != target.RKey() {
		t.Fatalf("recv %+v", rc)
	}
	if wc := testharness.Wait(t, a.SCQ, 2*time.Second); wc.Status != transport.Success {
		t.Fatalf("send %+v", wc)
	}
	// The invalidated rkey no longer reaches the memory: the WRITE is NAKed.
	a.QP.PostSend(&transport.SendWR{WRID: 3, Opcode: transport.WRRDMAWrite, Flags: transport.Signaled,
		SGL: []transport.SGE{a.MR.SGE(0, 10)}, RemoteAddr: target.Addr(), RKey: target.RKey()})
	if wc := testharness.Wait(t, a.SCQ, 2*time.Second); wc.Status != transport.RemAccessErr {
		t.Fatalf("write through invalidated rkey: %+v", wc)
	}
}

func TestAtomics(t *testing.T) {
	a, b, _ := testharness.MemPair(t, testharness.Options{})
	word := func() uint64 { return binary.LittleEndian.Uint64(b.Buf[128:]) }
	binary.LittleEndian.PutUint64(b.Buf[128:], 1000)
	cases := []struct {
		op          transport.WROpcode
		cmpAdd, swp uint64
		orig, after uint64
	}{
		{transport.WRAtomicFetchAndAdd, 5, 0, 1000, 1005},
		{transport.WRAtomicCmpAndSwp, 1005, 7, 1005, 7},      // equal: swapped
		{transport.WRAtomicCmpAndSwp, 1005, 9, 7, 7},         // not equal: unchanged
		{transport.WRAtomicFetchAndAdd, ^uint64(6), 0, 7, 0}, // wraps
	}
	for i, c := range cases {
		err := a.QP.PostSend(&transport.SendWR{WRID: uint64(i), Opcode: c.op, Flags: transport.Signaled,
			SGL: []transport.SGE{a.MR.SGE(8*i, 8)}, RemoteAddr: b.MR.Addr() + 128, RKey: b.MR.RKey(),
			CompareAdd: c.cmpAdd, Swap: c.swp})
		if err != nil {
			t.Fatal(err)
		}
		if wc := testharness.Wait(t, a.SCQ, 2*time.Second); wc.Status != transport.Success {
			t.Fatalf("case %d: %+v", i, wc)
		}
		if got := binary.LittleEndian.Uint64(a.Buf[8*i:]); got != c.orig {
			t.Errorf("case %d: original %d, want %d", i, got, c.orig)
		}
		if word() != c.after {
			t.Errorf("case %d: memory %d, want %d", i, word(), c.after)
		}
	}
	// An unaligned address or a buffer other than 8 bytes is refused at post.
	if err := a.QP.PostSend(&transport.SendWR{Opcode: transport.WRAtomicFetchAndAdd, SGL: []transport.SGE{a.MR.SGE(0, 8)},
		RemoteAddr: b.MR.Addr() + 129, RKey: b.MR.RKey()}); err == nil {
		t.Error("unaligned atomic accepted")
	}
	if err := a.QP.PostSend(&transport.SendWR{Opcode: transport.WRAtomicFetchAndAdd, SGL: []transport.SGE{a.MR.SGE(0, 4)},
		RemoteAddr: b.MR.Addr() + 128, RKey: b.MR.RKey()}); err == nil {
		t.Error("4-byte atomic accepted")
	}
}

func TestInlineAndUnsignaled(t *testing.T) {
	a, b, _ := testharness.MemPair(t, testharness.Options{Inline: 256})
	for i := range 10 {
		b.QP.PostRecv(&transport.RecvWR{WRID: uint64(i), SGL: []transport.SGE{b.MR.SGE(i*300, 300)}})
	}
	for i := range 10 {
		fill(a.Buf[:200], byte(i))
		flags := transport.Inline
		if i == 9 {
			flags |= transport.Signaled
		}
		if err := a.QP.PostSend(&transport.SendWR{WRID: uint64(100 + i), Opcode: transport.WRSend, Flags: flags,
			SGL: []transport.SGE{a.MR.SGE(0, 200)}}); err != nil {
			t.Fatal(err)
		}
		// Inline data is copied at post: changing the buffer now must not matter.
		clear(a.Buf[:200])
	}
	// Only the signaled one completes on the send side.
	if wc := testharness.Wait(t, a.SCQ, 2*time.Second); wc.WRID != 109 || wc.Status != transport.Success {
		t.Fatalf("send %+v", wc)
	}
	if a.SCQ.Len() != 0 {
		t.Fatalf("%d unsignaled completions reported", a.SCQ.Len())
	}
	want := make([]byte, 200)
	for i := range 10 {
		wc := testharness.Wait(t, b.RCQ, 2*time.Second)
		if wc.WRID != uint64(i) || wc.ByteLen != 200 {
			t.Fatalf("recv %d: %+v", i, wc)
		}
		fill(want, byte(i))
		if !bytes.Equal(b.Buf[i*300:i*300+200], want) {
			t.Fatalf("inline message %d differs", i)
		}
	}
	if err := a.QP.PostSend(&transport.SendWR{Opcode: transport.WRSend, Flags: transport.Inline, SGL: []transport.SGE{a.MR.SGE(0, 257)}}); err == nil {
		t.Error("inline beyond max_inline_data accepted")
	}
}
