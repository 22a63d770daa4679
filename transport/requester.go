package transport

import (
	"github.com/goroce/goroce/bth"
)

// The requester (IBA 9.7.4.1 and 9.7.5.1; rxe_req.c) turns send WQEs into
// request packets: it segments messages by the path MTU, assigns PSNs,
// sets AckReq, honours the window, fences and the max_rd_atomic limit, and
// after a rewind by the completer sends again from the PSN it is told.

type requester struct {
	psn         bth.PSN // next PSN to transmit
	hiPSN       bth.PSN // one past the highest PSN ever transmitted
	cur         uint32  // send queue counter of the WQE being transmitted
	off         uint32  // bytes of it already transmitted
	noAck       int     // packets since the last one with AckReq
	rdOut       int     // READ and atomic WQEs started and not completed
	rnrWait     bool    // waiting out an RNR NAK's timer
	probe       bool    // after a local ACK timeout: one packet until progress (canSend)
	drainNotify bool    // raise SQ drained when the SQD drain completes
}

func (q *QP) window() int {
	if q.env.Window > 0 {
		return q.env.Window
	}
	return DefaultWindow
}

// canSend reports whether the WQE at req.cur may transmit its next packet.
func (q *QP) canSend() bool {
	r := &q.req
	if r.rnrWait {
		return false
	}
	if q.typ.reliable() && int(r.psn.Diff(q.comp.psn)) >= q.window() {
		return false
	}
	if q.paced() { // DCQCN's rate (congestion.go)
		return false
	}
	// After a local ACK timeout the responder has been silent for a whole
	// timeout: it may be gone, or still working through a queue of what we
	// sent (rxe on a slow guest: each window of 256 packets took it longer
	// than the 67 ms timeout). Resending the whole window then only
	// lengthens that queue, and each timeout adds more than the responder
	// can clear before the next, until retry_cnt runs out while it is busy
	// with copies. So the retry resends the oldest packet alone, asking for
	// an acknowledgement, and the window opens again at the first sign of
	// progress (progress). The requester must resend in order from the
	// oldest unacknowledged PSN; how much it keeps in flight meanwhile is
	// its own choice.
	if q.typ.reliable() && r.probe && r.psn != q.comp.psn {
		return false
	}
	w := q.sqAt(r.cur)
	if w.state != wqePosted {
		return true
	}
	if q.state == SQD {
		return false // IBA 10.3.1.4: a draining QP starts no new message
	}
	if w.wr.Flags&Fence != 0 && r.rdOut > 0 {
		return false // fence: wait for earlier READs and atomics
	}
	if w.isReadOrAtomic() && r.rdOut >= int(max(q.attr.MaxRdAtomic, 1)) {
		return false // never more outstanding than the responder has resources for (IBA 9.5)
	}
	return true
}

// requestReady reports whether request would send something now.
func (q *QP) requestReady() bool {
	return (q.state == RTS || q.state == SQD) && q.req.cur != q.sqTail && q.canSend()
}

// request transmits up to budget request packets. It returns how many it
// sent and whether it stopped with more ready to send.
func (q *QP) request(budget int) (int, bool) {
	if q.state != RTS && q.state != SQD {
		return 0, false
	}
	sent := 0
	for q.req.cur != q.sqTail && q.canSend() {
		w := q.sqAt(q.req.cur)
		if w.isLocal() {
			// Executed once, when the requester first reaches it; a
			// rewind over it goes past (seek).
			if w.state == wqePosted && !q.execLocal(w) {
				break
			}
			q.req.cur++
			q.retireLocal()
			continue
		}
		if sent == budget {
			return sent, true
		}
		if w.state == wqePosted {
			q.start(w)
		}
		if !q.sendNext(w) {
			break
		}
		sent++
	}
	if sent > 0 && q.typ.reliable() {
		q.armRTO()
	}
	return sent, false
}

// start assigns a WQE its PSNs when its first packet goes out.
func (q *QP) start(w *sendWQE) {
	mtu := uint32(q.mtu)
	switch {
	case w.isAtomic(), q.typ == UD:
		w.npkts = 1
	default:
		w.npkts = max(1, (w.length+mtu-1)/mtu)
	}
	// A new message always starts at the next fresh PSN: anything else would
	// make it overlap one already sent, which the responder takes for a
	// duplicate.
	w.firstPSN = q.req.hiPSN
	q.req.psn = w.firstPSN
	w.lastPSN = w.firstPSN.Add(int(w.npkts) - 1)
	w.state = wqeStarted
	if w.isReadOrAtomic() {
		q.req.rdOut++
	}
}

// sendNext builds and queues the next packet of w and advances the
// requester. It returns false if the WQE failed locally.
func (q *QP) sendNext(w *sendWQE) bool {
	r := &q.req
	mtu := uint32(q.mtu)
	psn := r.psn
	if psn.Before(r.hiPSN) {
		q.env.Counters.RetransmittedPkts.Add(1)
	}
	var p packet
	last := true
	ackReq := true // READ and atomic requests always ask for their response
	d := w.op()
	var n uint32
	if d.segmented() {
		n = min(mtu, w.length-r.off)
		last = r.off+n >= w.length
	}
	op, ok := d.opcode(q.typ.transport(), r.off == 0, last)
	if !ok { // checkWR lets no such operation through; never send a wrong opcode
		q.localError(w, LocQPOpErr, "the QP's transport has no opcode for the work request", nil)
		return false
	}
	switch d.kind {
	case bth.KindReadRequest:
		// A READ request names the rest of the data from r.off: a first
		// request asks for all of it, a retried one for what is missing
		// (IBA 9.7.5.1.3).
		p = q.newRequest(w, op, 0, psn)
		bth.RETH(p.Ext(bth.ExtRETH)).Encode(w.wr.RemoteAddr+uint64(r.off), w.wr.RKey, w.length-r.off)
		p.BTH().SetAckReq(true)
		q.send(&p)
		r.psn = w.lastPSN.Next()
	case bth.KindCompareSwap, bth.KindFetchAdd:
		swapAdd, compare := w.wr.CompareAdd, uint64(0)
		if d.kind == bth.KindCompareSwap {
			swapAdd, compare = w.wr.Swap, w.wr.CompareAdd
		}
		p = q.newRequest(w, op, 0, psn)
		bth.AtomicETH(p.Ext(bth.ExtAtomicETH)).Encode(w.wr.RemoteAddr, w.wr.RKey, swapAdd, compare)
		p.BTH().SetAckReq(true)
		q.send(&p)
		r.psn = psn.Next()
	default:
		if q.typ == UD {
			p = q.newPacket(&w.outer, op, int(n), psn, w.dqpn)
		} else {
			p = q.newRequest(w, op, int(n), psn)
		}
		info := p.Info()
		if info.Headers.Has(bth.ExtRETH) {
			bth.RETH(p.Ext(bth.ExtRETH)).Encode(w.wr.RemoteAddr, w.wr.RKey, w.length)
		}
		if info.Imm {
			bth.ImmDt(p.Ext(bth.ExtImmDt)).SetImm(w.wr.Imm)
		}
		if info.Inv {
			bth.IETH(p.Ext(bth.ExtIETH)).SetRKey(w.wr.InvRKey)
		}
		if info.Headers.Has(bth.ExtDETH) {
			d := bth.DETH(p.Ext(bth.ExtDETH))
			d.SetQKey(w.qkey)
			d.SetSrcQP(q.qpn)
		}
		if err := q.gather(w.wr.SGL, w.inline, r.off, p.Payload()); err != nil {
			p.release()
			q.localError(w, LocProtErr, "the work request's data could not be read from its SGL", err)
			return false
		}
		h := p.BTH()
		// RC asks for an ACK on the last packet of a message and, within a
		// long one, often enough that the window keeps moving (IBA 9.7.4.1.3).
		ackReq = q.typ.reliable() && (last || r.noAck >= ackReqEvery-1 || r.probe)
		h.SetAckReq(ackReq)
		if last && w.wr.Flags&Solicited != 0 && (info.Kind == bth.KindSend || info.Imm) {
			h.SetSE(true)
		}
		q.send(&p)
		r.off += n
		r.psn = psn.Next()
	}
	// p's buffer belongs to the link once sent: use only what was noted.
	if ackReq {
		r.noAck = 0
	} else {
		r.noAck++
	}
	if r.hiPSN.Before(r.psn) {
		r.hiPSN = r.psn
	}
	if last {
		r.cur++
		r.off = 0
		if !q.typ.reliable() {
			// UC and UD complete a send once it is on the wire (IBA 9.8.3).
			q.retire(Success)
		}
	}
	return true
}

// execLocal executes a bind, local invalidate or fast registration
// (rxe_do_local_ops). It
// reports false if it failed: the WQE completed with the error and the
// QP left RTS.
func (q *QP) execLocal(w *sendWQE) bool {
	var err error
	st := MWBindErr
	switch w.wr.Opcode {
	case WRBindMW:
		b := &w.wr.Bind
		err = bindMW(q.pd, q, b.MW, w.type1, b.RKey, b.Info)
	case WRLocalInv:
		st = LocQPOpErr
		err = q.pd.invalidateRKey(q, w.wr.InvRKey, false)
	case WRRegMR:
		st = LocQPOpErr // rxe_do_local_ops
		err = regFast(q.pd, w.wr.Reg.MR, w.wr.Reg.Info)
	}
	if err != nil {
		q.localError(w, st, "the local operation failed", err)
		return false
	}
	w.state = wqeDone
	return true
}

// retireLocal completes the executed local operations at the head of the
// send queue: they wait for the WQEs before them, so that completions
// stay in order.
func (q *QP) retireLocal() {
	for q.sqHead != q.req.cur {
		w := q.sqAt(q.sqHead)
		if !w.isLocal() || w.state != wqeDone {
			return
		}
		q.retire(Success)
	}
}

// newRequest starts a request packet of w to the connected peer, with
// the XRCETH an XRC request carries after the BTH naming the target's XRC
// SRQ (IBA 9.2.5).
func (q *QP) newRequest(w *sendWQE, op bth.OpCode, payLen int, psn bth.PSN) packet {
	p := q.newPacket(&q.outer, op, payLen, psn, q.attr.DestQPN)
	if q.typ == XRCIni {
		bth.XRCETH(p.Ext(bth.ExtXRCETH)).SetXRCSRQ(w.wr.RemoteSRQN)
	}
	return p
}

// localError completes a WQE that failed before reaching the wire. RC goes
// to ERR; UC and UD go to SQE, whose receive side keeps working (IBA
// 10.3.1.6).
func (q *QP) localError(w *sendWQE, st WCStatus, detail string, err error) {
	if q.typ.reliable() {
		q.toError(w, st, why{cause: CauseLocalError, detail: detail, err: err})
		return
	}
	q.state = SQE
	for q.sqHead != q.sqTail {
		s := WRFlushErr
		if q.sqAt(q.sqHead) == w {
			s = st
		}
		q.retire(s)
	}
}
