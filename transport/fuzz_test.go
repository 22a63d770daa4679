package transport

import (
	"encoding/binary"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cq"
	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
)

// FuzzReceive feeds packets that pass every framing check and carry a
// valid ICRC, but whose transport headers are arbitrary, to live RC, UC and
// UD queue pairs: whatever a hostile or broken peer sends must be dropped,
// NAKed or executed within bounds, never panic or touch memory outside the
// registered regions.
func FuzzReceive(f *testing.F) {
	seeds := [][]byte{
		mkSeed(bth.RCSendOnly, 0, []byte("hello")),
		mkSeed(bth.RCWriteOnly, 0, make([]byte, 64), reth(0, 0, 64)),
		mkSeed(bth.RCReadRequest, 0, nil, reth(0, 0, 5000)),
		mkSeed(bth.RCFetchAdd, 0, nil, atomicETH(0, 0, 1, 0)),
		mkSeed(bth.RCAcknowledge, 0, nil, aeth(bth.NAKSyndrome(bth.NAKPSNSequenceError), 0)),
		mkSeed(bth.RCReadResponseFirst, 0, make([]byte, 1024), aeth(ack, 1)),
		mkSeed(bth.UCSendFirst, 0, make([]byte, 1024)),
		mkSeed(bth.UDSendOnly, 0, []byte("x"), func(p []byte, i *bth.Info) { bth.DETH(p[i.Offset(bth.ExtDETH):]).SetQKey(0x11111111) }),
	}
	for _, s := range seeds {
		for sel := range byte(3) {
			f.Add(sel, s)
		}
	}
	o := pairOpts{timeout: 16}
	o.defaults()
	net := nic.NewMemNet(1)
	s := newSide(f, net, "10.0.0.1", &o)
	r := newRawPeer(f, net, "10.0.0.9")
	connectRaw(f, s, r, o, 5000, 0)
	var qps [3]*qp.QP
	qps[0] = s.qp
	for i, typ := range []qp.Type{qp.UC, qp.UD} {
		x := *s
		var err error
		x.qp, err = s.dev.CreateQP(s.pd, qp.InitAttr{Type: typ, SendCQ: s.scq, RecvCQ: s.rcq,
			Cap: qp.Cap{MaxSendWR: 8, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			f.Fatal(err)
		}
		oo := o
		oo.typ = typ
		connectRaw(f, &x, r, oo, 5000, 0)
		qps[i+1] = x.qp
	}
	types := []qp.Type{qp.RC, qp.UC, qp.UD}
	// revive brings a QP that an input drove to ERR back to RTS, so later
	// inputs reach the protocol rather than a closed door; and keeps
	// receives posted so SENDs reach the memory path.
	revive := func(t testing.TB, i int) {
		q := qps[i]
		if q.State() == qp.Err {
			must(t, q.Modify(&qp.Attr{State: qp.Reset}, qp.AttrState))
			x := *s
			x.qp = q
			oo := o
			oo.typ = types[i]
			connectRaw(t, &x, r, oo, 5000, 0)
		}
		for range 4 {
			q.PostRecv(&qp.RecvWR{SGL: []mr.SGE{s.mr.SGE(0, 4096)}})
		}
		// Drain completions so the CQs never overrun.
		var wc [64]cq.WC
		for n, _ := s.rcq.Poll(wc[:]); n > 0; n, _ = s.rcq.Poll(wc[:]) {
		}
		for n, _ := s.scq.Poll(wc[:]); n > 0; n, _ = s.scq.Poll(wc[:]) {
		}
	}
	f.Fuzz(func(t *testing.T, sel byte, roce []byte) {
		if len(roce) < bth.BTHLen+bth.ICRCLen || len(roce) > 4200 {
			return
		}
		i := int(sel) % len(qps)
		q := qps[i]
		revive(t, i)
		roce = append([]byte(nil), roce...)
		bth.BTH(roce).SetDestQP(q.QPN())
		if sel&0x40 != 0 { // in sequence, so the checks after the PSN's run
			a, _ := q.Query()
			bth.BTH(roce).SetPSN(bth.PSN(a.RQPSN))
		}
		// Point keys and addresses at the real region often enough that the
		// memory paths run, not only the key checks.
		if sel&0x80 != 0 && len(roce) >= bth.BTHLen+bth.RETHLen+bth.ICRCLen {
			binary.BigEndian.PutUint64(roce[bth.BTHLen:], s.mr.Addr()+uint64(sel&0x7f))
			binary.BigEndian.PutUint32(roce[bth.BTHLen+8:], s.mr.RKey())
		}
		o := bth.Outer{Src: r.addr, Dst: s.addr, SrcPort: 0xc000}
		dg := make([]byte, o.Len()+len(roce))
		hl := o.Put(dg, len(roce))
		copy(dg[hl:], roce)
		bth.Seal(dg[:hl-8], dg[hl-8:hl], dg[hl:])
		var b qp.Batch
		s.dev.input(dg, &b)
		b.Flush()
	})
}

// mkSeed builds the transport bytes of one packet.
func mkSeed(op bth.OpCode, psn uint32, payload []byte, hs ...hdr) []byte {
	info := op.Info()
	pad := bth.PadFor(len(payload))
	roce := make([]byte, info.HdrLen+len(payload)+pad+bth.ICRCLen)
	bth.BTH(roce).Encode(&bth.BTHFields{OpCode: op, PadCount: uint8(pad), PKey: 0xffff, PSN: bth.PSN(psn), AckReq: true})
	for _, h := range hs {
		h(roce, info)
	}
	copy(roce[info.HdrLen:], payload)
	return roce
}
