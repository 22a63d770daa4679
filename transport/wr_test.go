package qp_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/qp"
)

// Every work-request opcode posted to an RC and a UC QP: accepted where
// table 38 gives the transport the operation, with the opcodes written
// out here by hand, and refused with ErrInvalid everywhere else, including
// opcodes ibv_wr_opcode does not define. (The local operations, which
// send nothing, have tests of their own.)
func TestPostedOpcodes(t *testing.T) {
	rc := map[qp.WROpcode]bth.OpCode{
		qp.WRRDMAWrite: bth.RCWriteOnly, qp.WRRDMAWriteWithImm: bth.RCWriteOnlyImm,
		qp.WRSend: bth.RCSendOnly, qp.WRSendWithImm: bth.RCSendOnlyImm, qp.WRSendWithInv: bth.RCSendOnlyInv,
		qp.WRRDMARead: bth.RCReadRequest, qp.WRAtomicCmpAndSwp: bth.RCCompareSwap, qp.WRAtomicFetchAndAdd: bth.RCFetchAdd,
	}
	uc := map[qp.WROpcode]bth.OpCode{
		qp.WRRDMAWrite: bth.UCWriteOnly, qp.WRRDMAWriteWithImm: bth.UCWriteOnlyImm,
		qp.WRSend: bth.UCSendOnly, qp.WRSendWithImm: bth.UCSendOnlyImm,
	}
	for _, c := range []struct {
		typ  qp.Type
		want map[qp.WROpcode]bth.OpCode
	}{{qp.RC, rc}, {qp.UC, uc}} {
		for o := 0; o < 256; o++ {
			op := qp.WROpcode(o)
			if op == qp.WRLocalInv || op == qp.WRBindMW || op == qp.WRRegMR {
				continue
			}
			h := newHarness(t, harnessOpts{typ: c.typ})
			err := h.q.PostSend(&qp.SendWR{Opcode: op, SGL: []mr.SGE{h.mr.SGE(0, 8)},
				RemoteAddr: h.mr.Addr(), RKey: h.mr.RKey(), InvRKey: 0x1234})
			want, ok := c.want[op]
			if !ok {
				if !errors.Is(err, qp.ErrInvalid) {
					t.Errorf("%v: post %v: %v, want ErrInvalid", c.typ, op, err)
				}
				if ps := h.sent(); len(ps) != 0 {
					t.Errorf("%v: refused %v sent %v", c.typ, op, describe(ps))
				}
				continue
			}
			if err != nil {
				t.Errorf("%v: post %v: %v", c.typ, op, err)
				continue
			}
			if ps := h.sent(); len(ps) != 1 || ps[0].OpCode() != want {
				t.Errorf("%v: %v sent %v, want one %v", c.typ, op, describe(ps), want)
			}
		}
	}
}

// A message of three packets (MTU 1024) carries its operation at FIRST,
// MIDDLE and LAST, and immediate data or an invalidation only on the last.
func TestPostedMessagePositions(t *testing.T) {
	for _, c := range []struct {
		typ  qp.Type
		op   qp.WROpcode
		want []bth.OpCode
	}{
		{qp.RC, qp.WRSend, []bth.OpCode{bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLast}},
		{qp.RC, qp.WRSendWithImm, []bth.OpCode{bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLastImm}},
		{qp.RC, qp.WRSendWithInv, []bth.OpCode{bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLastInv}},
		{qp.RC, qp.WRRDMAWrite, []bth.OpCode{bth.RCWriteFirst, bth.RCWriteMiddle, bth.RCWriteLast}},
		{qp.RC, qp.WRRDMAWriteWithImm, []bth.OpCode{bth.RCWriteFirst, bth.RCWriteMiddle, bth.RCWriteLastImm}},
		{qp.UC, qp.WRSendWithImm, []bth.OpCode{bth.UCSendFirst, bth.UCSendMiddle, bth.UCSendLastImm}},
		{qp.UC, qp.WRRDMAWriteWithImm, []bth.OpCode{bth.UCWriteFirst, bth.UCWriteMiddle, bth.UCWriteLastImm}},
	} {
		h := newHarness(t, harnessOpts{typ: c.typ})
		if err := h.q.PostSend(&qp.SendWR{Opcode: c.op, SGL: []mr.SGE{h.mr.SGE(0, 3000)},
			RemoteAddr: h.mr.Addr(), RKey: h.mr.RKey(), InvRKey: 0x1234, Imm: 7}); err != nil {
			t.Fatalf("%v %v: %v", c.typ, c.op, err)
		}
		var got []bth.OpCode
		for _, p := range h.sent() {
			got = append(got, p.OpCode())
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%v %v sent %v, want %v", c.typ, c.op, got, c.want)
		}
	}
}
