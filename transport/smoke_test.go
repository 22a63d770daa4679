package transport_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/goroce/goroce/internal/testharness"

	"github.com/goroce/goroce/transport"
)

// TestSmokeRC runs each RC operation once between two engines: SEND,
// RDMA WRITE, RDMA READ, fetch-and-add and compare-and-swap (one that
// swaps, one that does not). It checks every completion field a program
// reads, every byte each operation moves, and that no byte beside them
// changed in either region.
func TestSmokeRC(t *testing.T) {
	a, b, _ := testharness.MemPair(t, testharness.Options{PSN: 0xfffff0, PSNB: 100})
	for i := range a.Buf {
		a.Buf[i] = byte(i * 7)
	}
	for i := range b.Buf {
		b.Buf[i] = byte(i*13 + 1)
	}
	// What each region must hold at the end: the expectation is built
	// from the operations' definitions, beside the engine, not read back.
	wantA := append([]byte(nil), a.Buf...)
	wantB := append([]byte(nil), b.Buf...)
	sendWC := func(wrid uint64, op transport.WCOpcode, n uint32) {
		t.Helper()
		wc := testharness.Wait(t, a.SCQ, timeoutShort)
		want := transport.WC{WRID: wrid, Status: transport.Success, Opcode: op, ByteLen: n, QPNum: a.QP.QPN()}
		if wc != want {
			t.Fatalf("send wc %+v\nwant    %+v", wc, want)
		}
	}
	// SEND 10000 bytes (10 packets at MTU 1024) into a 16 KiB receive.
	testharness.Must(t, b.QP.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{b.MR.SGE(0, 16384)}}))
	testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{a.MR.SGE(0, 10000)}}))
	wc := testharness.Wait(t, b.RCQ, timeoutShort)
	if want := (transport.WC{WRID: 1, Status: transport.Success, Opcode: transport.OpRecv, ByteLen: 10000,
		QPNum: b.QP.QPN(), SrcQP: a.QP.QPN()}); wc != want {
		t.Fatalf("recv wc %+v\nwant    %+v", wc, want)
	}
	sendWC(2, transport.OpSend, 10000)
	copy(wantB[:10000], wantA[:10000])
	// WRITE 5000 bytes to b at offset 20000.
	testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: 3, Opcode: transport.WRRDMAWrite, Flags: transport.Signaled,
		SGL: []transport.SGE{a.MR.SGE(100, 5000)}, RemoteAddr: b.MR.Addr() + 20000, RKey: b.MR.RKey()}))
	sendWC(3, transport.OpRDMAWrite, 5000)
	copy(wantB[20000:25000], wantA[100:5100])
	// READ 7000 bytes from b at 20000 (the 5000 written and 2000 beyond)
	// into a at offset 50000.
	testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: 4, Opcode: transport.WRRDMARead, Flags: transport.Signaled,
		SGL: []transport.SGE{a.MR.SGE(50000, 7000)}, RemoteAddr: b.MR.Addr() + 20000, RKey: b.MR.RKey()}))
	sendWC(4, transport.OpRDMARead, 7000)
	copy(wantA[50000:57000], wantB[20000:27000])
	// Atomics on b's word at 64, each returning the original value into a
	// at 8, 16 and 24: fetch-and-add 40+2, compare-and-swap 42->99 (equal:
	// swaps), compare-and-swap 7->5 (not equal: leaves 99).
	binary.LittleEndian.PutUint64(b.Buf[64:], 40)
	binary.LittleEndian.PutUint64(wantB[64:], 40)
	atomics := []struct {
		wr        transport.SendWR
		op        transport.WCOpcode
		orig, now uint64
	}{
		{transport.SendWR{WRID: 5, Opcode: transport.WRAtomicFetchAndAdd, CompareAdd: 2}, transport.OpFetchAdd, 40, 42},
		{transport.SendWR{WRID: 6, Opcode: transport.WRAtomicCmpAndSwp, CompareAdd: 42, Swap: 99}, transport.OpCompSwap, 42, 99},
		{transport.SendWR{WRID: 7, Opcode: transport.WRAtomicCmpAndSwp, CompareAdd: 7, Swap: 5}, transport.OpCompSwap, 99, 99},
	}
	for i, x := range atomics {
		wr := x.wr
		off := 8 * (i + 1)
		wr.Flags, wr.SGL = transport.Signaled, []transport.SGE{a.MR.SGE(off, 8)}
		wr.RemoteAddr, wr.RKey = b.MR.Addr()+64, b.MR.RKey()
		testharness.Must(t, a.QP.PostSend(&wr))
		sendWC(wr.WRID, x.op, 8)
		binary.LittleEndian.PutUint64(wantA[off:], x.orig)
		binary.LittleEndian.PutUint64(wantB[64:], x.now)
		if got, now := binary.LittleEndian.Uint64(a.Buf[off:]), binary.LittleEndian.Uint64(b.Buf[64:]); got != x.orig || now != x.now {
			t.Fatalf("%v: returned %d, word now %d; want %d, %d", wr.Opcode, got, now, x.orig, x.now)
		}
	}
	for _, m := range []struct {
		name      string
		got, want []byte
	}{{"a", a.Buf, wantA}, {"b", b.Buf, wantB}} {
		if !bytes.Equal(m.got, m.want) {
			t.Fatalf("%s's region holds other bytes than the operations put there", m.name)
		}
	}
	// Nothing arrived that the engines had to drop.
	for _, d := range []*transport.Device{a.Dev, b.Dev} {
		c := d.Counters()
		if n := c.ICRCErr.Load() + c.Malformed.Load() + c.UnknownQP.Load() + c.BadState.Load() +
			c.BadSource.Load() + c.BadPKey.Load() + c.GhostResponses.Load(); n != 0 {
			t.Errorf("drops on a clean link: %v", d.Counters().List())
		}
	}
	if n := a.Dev.Counters().RDMASends.Load(); n != 1 {
		t.Errorf("rdma_sends %d, want 1", n)
	}
	if n := b.Dev.Counters().RDMARecvs.Load(); n != 1 {
		t.Errorf("rdma_recvs %d, want 1", n)
	}
}
