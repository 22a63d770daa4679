package transport_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

// Every work-request opcode posted to an RC and a UC QP: accepted where
// table 38 gives the transport the operation, with the opcodes written
// out here by hand, and refused with ErrInvalid everywhere else, including
// opcodes ibv_wr_opcode does not define. (The local operations, which
// send nothing, have tests of their own.)
func TestPostedOpcodes(t *testing.T) {
	rc := map[transport.WROpcode]bth.OpCode{
		transport.WRRDMAWrite: bth.RCWriteOnly, transport.WRRDMAWriteWithImm: bth.RCWriteOnlyImm,
		transport.WRSend: bth.RCSendOnly, transport.WRSendWithImm: bth.RCSendOnlyImm, transport.WRSendWithInv: bth.RCSendOnlyInv,
		transport.WRRDMARead: bth.RCReadRequest, transport.WRAtomicCmpAndSwp: bth.RCCompareSwap, transport.WRAtomicFetchAndAdd: bth.RCFetchAdd,
	}
	uc := map[transport.WROpcode]bth.OpCode{
		transport.WRRDMAWrite: bth.UCWriteOnly, transport.WRRDMAWriteWithImm: bth.UCWriteOnlyImm,
		transport.WRSend: bth.UCSendOnly, transport.WRSendWithImm: bth.UCSendOnlyImm,
	}
	for _, c := range []struct {
		typ  transport.QPType
		want map[transport.WROpcode]bth.OpCode
	}{{transport.RC, rc}, {transport.UC, uc}} {
		for o := 0; o < 256; o++ {
			op := transport.WROpcode(o)
			if op == transport.WRLocalInv || op == transport.WRBindMW || op == transport.WRRegMR {
				continue
			}
			h := newHarness(t, harnessOpts{typ: c.typ})
			err := h.q.PostSend(&transport.SendWR{Opcode: op, SGL: []transport.SGE{h.mr.SGE(0, 8)},
				RemoteAddr: h.mr.Addr(), RKey: h.mr.RKey(), InvRKey: 0x1234})
			want, ok := c.want[op]
			if !ok {
				if !errors.Is(err, transport.ErrInvalid) {
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
		typ  transport.QPType
		op   transport.WROpcode
		want []bth.OpCode
	}{
		{transport.RC, transport.WRSend, []bth.OpCode{bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLast}},
		{transport.RC, transport.WRSendWithImm, []bth.OpCode{bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLastImm}},
		{transport.RC, transport.WRSendWithInv, []bth.OpCode{bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLastInv}},
		{transport.RC, transport.WRRDMAWrite, []bth.OpCode{bth.RCWriteFirst, bth.RCWriteMiddle, bth.RCWriteLast}},
		{transport.RC, transport.WRRDMAWriteWithImm, []bth.OpCode{bth.RCWriteFirst, bth.RCWriteMiddle, bth.RCWriteLastImm}},
		{transport.UC, transport.WRSendWithImm, []bth.OpCode{bth.UCSendFirst, bth.UCSendMiddle, bth.UCSendLastImm}},
		{transport.UC, transport.WRRDMAWriteWithImm, []bth.OpCode{bth.UCWriteFirst, bth.UCWriteMiddle, bth.UCWriteLastImm}},
	} {
		h := newHarness(t, harnessOpts{typ: c.typ})
		if err := h.q.PostSend(&transport.SendWR{Opcode: c.op, SGL: []transport.SGE{h.mr.SGE(0, 3000)},
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
