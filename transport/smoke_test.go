package device_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"

	"github.com/goroce/goroce/cq"
	"github.com/goroce/goroce/device"
	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/qp"
)

// TestSmokeRC runs each RC operation once between two engines: SEND,
// RDMA WRITE, RDMA READ, fetch-and-add and compare-and-swap (one that
// swaps, one that does not). It checks every completion field a program
// reads, every byte each operation moves, and that no byte beside them
// changed in either region.
func TestSmokeRC(t *testing.T) {
	a, b, _ := rdmatest.MemPair(t, rdmatest.Options{PSN: 0xfffff0, PSNB: 100})
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
	sendWC := func(wrid uint64, op cq.Opcode, n uint32) {
		t.Helper()
		wc := rdmatest.Wait(t, a.SCQ, timeoutShort)
		want := cq.WC{WRID: wrid, Status: cq.Success, Opcode: op, ByteLen: n, QPNum: a.QP.QPN()}
		if wc != want {
			t.Fatalf("send wc %+v\nwant    %+v", wc, want)
		}
	}
	// SEND 10000 bytes (10 packets at MTU 1024) into a 16 KiB receive.
	rdmatest.Must(t, b.QP.PostRecv(&qp.RecvWR{WRID: 1, SGL: []mr.SGE{b.MR.SGE(0, 16384)}}))
	rdmatest.Must(t, a.QP.PostSend(&qp.SendWR{WRID: 2, Opcode: qp.WRSend, Flags: qp.Signaled, SGL: []mr.SGE{a.MR.SGE(0, 10000)}}))
	wc := rdmatest.Wait(t, b.RCQ, timeoutShort)
	if want := (cq.WC{WRID: 1, Status: cq.Success, Opcode: cq.OpRecv, ByteLen: 10000,
		QPNum: b.QP.QPN(), SrcQP: a.QP.QPN()}); wc != want {
		t.Fatalf("recv wc %+v\nwant    %+v", wc, want)
	}
	sendWC(2, cq.OpSend, 10000)
	copy(wantB[:10000], wantA[:10000])
	// WRITE 5000 bytes to b at offset 20000.
	rdmatest.Must(t, a.QP.PostSend(&qp.SendWR{WRID: 3, Opcode: qp.WRRDMAWrite, Flags: qp.Signaled,
		SGL: []mr.SGE{a.MR.SGE(100, 5000)}, RemoteAddr: b.MR.Addr() + 20000, RKey: b.MR.RKey()}))
	sendWC(3, cq.OpRDMAWrite, 5000)
	copy(wantB[20000:25000], wantA[100:5100])
	// READ 7000 bytes from b at 20000 (the 5000 written and 2000 beyond)
	// into a at offset 50000.
	rdmatest.Must(t, a.QP.PostSend(&qp.SendWR{WRID: 4, Opcode: qp.WRRDMARead, Flags: qp.Signaled,
		SGL: []mr.SGE{a.MR.SGE(50000, 7000)}, RemoteAddr: b.MR.Addr() + 20000, RKey: b.MR.RKey()}))
	sendWC(4, cq.OpRDMARead, 7000)
	copy(wantA[50000:57000], wantB[20000:27000])
	// Atomics on b's word at 64, each returning the original value into a
	// at 8, 16 and 24: fetch-and-add 40+2, compare-and-swap 42->99 (equal:
	// swaps), compare-and-swap 7->5 (not equal: leaves 99).
	binary.LittleEndian.PutUint64(b.Buf[64:], 40)
	binary.LittleEndian.PutUint64(wantB[64:], 40)
	atomics := []struct {
		wr        qp.SendWR
		op        cq.Opcode
		orig, now uint64
	}{
		{qp.SendWR{WRID: 5, Opcode: qp.WRAtomicFetchAndAdd, CompareAdd: 2}, cq.OpFetchAdd, 40, 42},
		{qp.SendWR{WRID: 6, Opcode: qp.WRAtomicCmpAndSwp, CompareAdd: 42, Swap: 99}, cq.OpCompSwap, 42, 99},
		{qp.SendWR{WRID: 7, Opcode: qp.WRAtomicCmpAndSwp, CompareAdd: 7, Swap: 5}, cq.OpCompSwap, 99, 99},
	}
	for i, x := range atomics {
		wr := x.wr
		off := 8 * (i + 1)
		wr.Flags, wr.SGL = qp.Signaled, []mr.SGE{a.MR.SGE(off, 8)}
		wr.RemoteAddr, wr.RKey = b.MR.Addr()+64, b.MR.RKey()
		rdmatest.Must(t, a.QP.PostSend(&wr))
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
	for _, d := range []*device.Device{a.Dev, b.Dev} {
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
