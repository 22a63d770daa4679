package transport

import (
	"github.com/goroce/goroce/bth"
)

// The unreliable responders. They share the RC responder's receive WQE
// handling and length checks (responder.go) but never acknowledge: UC drops
// what it cannot place, UD what it cannot match.

// receiveUC is the UC responder: no ACKs and no retransmission; a PSN gap
// drops the rest of the message and the responder resumes at the next
// FIRST or ONLY, whatever its PSN (IBA 9.8.2).
func (q *QP) receiveUC(p bth.Packet) {
	r := &q.resp
	c := q.env.Counters
	info := p.Info()
	psn := p.BTH().PSN()
	start := info.Pos == bth.PosFirst || info.Pos == bth.PosOnly
	if r.dropMsg || psn != r.epsn {
		if !start {
			q.ucDrop()
			c.UCDropped.Add(1)
			return
		}
		// A new message resynchronizes; a message in progress is abandoned
		// and its receive WQE reused for the next one.
		r.dropMsg = false
		r.inMsg = msgNone
		r.rOff = 0
	}
	if !q.sequenceOK(info) {
		q.ucDrop()
		c.UCDropped.Add(1)
		return
	}
	ok := false
	switch info.Kind {
	case bth.KindSend:
		ok = q.ucSend(p)
	case bth.KindWrite:
		ok = q.ucWrite(p)
	}
	if !ok {
		q.ucDrop()
		c.UCDropped.Add(1)
		return
	}
	r.epsn = psn.Next()
}

// ucDrop abandons the UC message in progress.
func (q *QP) ucDrop() {
	r := &q.resp
	r.dropMsg = true
	r.inMsg = msgNone
	r.rOff = 0
}

func (q *QP) ucSend(p bth.Packet) bool {
	r := &q.resp
	info := p.Info()
	if (info.Pos == bth.PosFirst || info.Pos == bth.PosOnly) && !r.haveWQE && !q.takeRecvWQE() {
		q.env.Counters.NoRecvWQE.Add(1)
		return false
	}
	if !q.lengthOK(p) {
		return false
	}
	pay := p.Payload()
	if uint64(r.rOff)+uint64(len(pay)) > uint64(r.rwqe.length) {
		q.completeRecv(&r.rwqe, LocLenErr, OpRecv, r.rOff, 0, false)
		r.haveWQE = false
		return false
	}
	if err := q.scatter(r.rwqe.sgl, r.rOff, pay); err != nil {
		q.completeRecv(&r.rwqe, LocProtErr, OpRecv, r.rOff, 0, false)
		r.haveWQE = false
		return false
	}
	r.rOff += uint32(len(pay))
	if info.Pos == bth.PosLast || info.Pos == bth.PosOnly {
		wc := q.peerRecvWC(OpRecv, r.rOff)
		if info.Imm {
			wc.Flags, wc.ImmData = WithImm, p.ImmDt().Imm()
		}
		r.haveWQE = false
		r.inMsg = msgNone
		q.env.Counters.RDMARecvs.Add(1)
		q.pushCQ(q.recvCQ, &wc, p.BTH().SE())
	} else {
		r.inMsg = msgSend
	}
	return true
}

func (q *QP) ucWrite(p bth.Packet) bool {
	r := &q.resp
	info := p.Info()
	if info.Pos == bth.PosFirst || info.Pos == bth.PosOnly {
		if q.attr.AccessFlags&RemoteWrite == 0 {
			return false
		}
		reth := p.RETH()
		r.wVA, r.wRKey, r.wLen = reth.VA(), reth.RKey(), reth.DMALen()
		r.wRemain = r.wLen
	}
	if info.Imm && !r.haveWQE && !q.takeRecvWQE() {
		q.env.Counters.NoRecvWQE.Add(1)
		return false
	}
	n := uint32(p.PayloadLen())
	if !q.lengthOK(p) || n > r.wRemain {
		return false
	}
	if n > 0 {
		span, err := q.remote(r.wRKey, r.wVA, n, RemoteWrite, true)
		if err != nil {
			return false // UC drops what it may not place (class D)
		}
		copy(span.b, p.Payload())
		span.release()
	}
	r.wVA += uint64(n)
	r.wRemain -= n
	if info.Pos == bth.PosLast || info.Pos == bth.PosOnly {
		if r.wRemain != 0 {
			return false
		}
		r.inMsg = msgNone
		if info.Imm {
			q.completeWriteImm(p)
		}
	} else {
		r.inMsg = msgWrite
	}
	return true
}

// receiveUD is the UD responder: a Q_Key check, one packet per message,
// and the packet's network header in the first 40 bytes of the receive
// buffer, as HCAs place the GRH (IBA 9.8.3, 11.4.1.2).
func (q *QP) receiveUD(p bth.Packet, f bth.Frame) {
	c := q.env.Counters
	d := p.DETH() // every UD opcode carries one; receive checked the transport
	if d.QKey() != q.attr.QKey {
		c.BadQKey.Add(1) // a Q_Key mismatch is dropped silently (IBA 10.2.5)
		return
	}
	if p.PayloadLen() > q.mtu {
		c.Malformed.Add(1)
		return
	}
	if !q.takeRecvWQE() {
		c.NoRecvWQE.Add(1)
		return
	}
	r := &q.resp
	w := &r.rwqe
	r.haveWQE = false
	total := uint32(bth.GRHLen + p.PayloadLen())
	if total > w.length {
		q.completeRecv(w, LocLenErr, OpRecv, 0, 0, false)
		return
	}
	var grh [bth.GRHLen]byte
	bth.GRH(grh[:]).PutNetworkHeader(f.IP())
	if q.scatter(w.sgl, 0, grh[:]) != nil || q.scatter(w.sgl, bth.GRHLen, p.Payload()) != nil {
		q.completeRecv(w, LocProtErr, OpRecv, 0, 0, false)
		return
	}
	wc := WC{WRID: w.wrID, Opcode: OpRecv, ByteLen: total, QPNum: q.qpn, SrcQP: d.SrcQP(), Flags: WithGRH, SL: SLRoCEv2IPv4}
	if f.IsIPv6() {
		wc.SL = SLRoCEv2IPv6
	}
	if p.Info().Imm {
		wc.Flags |= WithImm
		wc.ImmData = p.ImmDt().Imm()
	}
	c.RDMARecvs.Add(1)
	q.pushCQ(q.recvCQ, &wc, p.BTH().SE())
}
