package transport

import (
	"github.com/goroce/goroce/bth"
)

// Completions and the error state: retiring send WQEs in order, posting
// to CQs, and flushing everything when the QP enters ERR.

// toError moves the QP to ERR: the failed WQE (if any) completes with
// status, every other outstanding work request completes with a flush
// error (IBA 10.3.1.7). w says why; Death keeps it.
func (q *QP) toError(failed *sendWQE, status WCStatus, w why) {
	if q.state == Err {
		return
	}
	q.die(failed, status, w)
	q.state = Err
	q.stopTimers()
	q.flushTx() // a NAK queued just before the error still goes out
	q.resp.outq = q.resp.outq[:0]
	q.resp.outHead = 0
	for q.sqHead != q.sqTail {
		w := q.sqAt(q.sqHead)
		st := WRFlushErr
		if w == failed {
			st = status
		}
		q.retire(st)
	}
	if q.resp.haveWQE {
		q.completeRecv(&q.resp.rwqe, WRFlushErr, 0, 0, 0, false)
		q.resp.haveWQE = false
	}
	for {
		w, ok := q.rq.pop(nil)
		if !ok {
			break
		}
		q.completeRecv(&w, WRFlushErr, 0, 0, 0, false)
	}
	if q.srq != nil && q.env.Event != nil {
		// IBA 11.6.3.2: a QP with an SRQ reports the last WQE it will take.
		q.env.Event(q, EventQPLastWQEReached, nil)
	}
}

// fatal moves the QP to ERR for a reason no work request reports, raising
// an affiliated asynchronous event.
func (q *QP) fatal(ev EventType, err error, w why) {
	q.toError(nil, WRFlushErr, w)
	if q.env.Event != nil {
		q.env.Event(q, ev, err)
	}
}

// sqSlot returns the slot of the send WQE at ring count i (initSQ).
func (q *QP) sqSlot(i uint32) uint32 { return i & uint32(len(q.sq)-1) }

// sqAt returns the send WQE at ring count i.
func (q *QP) sqAt(i uint32) *sendWQE { return &q.sq[q.sqSlot(i)] }

// retire completes the WQE at the head of the send queue.
func (q *QP) retire(st WCStatus) {
	w := q.sqAt(q.sqHead)
	if w.isReadOrAtomic() && w.state != wqePosted {
		q.req.rdOut--
	}
	if w.signaled || st != Success {
		wc := WC{WRID: w.wr.WRID, Status: st, Opcode: w.wcOpcode(), ByteLen: w.length, QPNum: q.qpn,
			VendorErr: sendVendorErr(st)}
		q.pushCQ(q.sendCQ, &wc, false)
	}
	if st == Success && w.op().kind == bth.KindSend {
		q.env.Counters.RDMASends.Add(1)
	}
	w.state = wqeDone
	w.wr.SGL, w.inline = nil, nil
	q.sqHead++
	if int32(q.req.cur-q.sqHead) < 0 { // flushed before the requester reached it
		q.req.cur, q.req.off = q.sqHead, 0
	}
}

// pushCQ posts a completion; an overrun moves the QP to ERR (the device
// reports the CQ error event).
func (q *QP) pushCQ(c *CQ, wc *WC, solicited bool) {
	if !c.push(*wc, solicited) && q.state != Err {
		q.state = Err // flushing into a full CQ would only lose more
		q.stopTimers()
		if q.env.Event != nil {
			q.env.Event(q, EventQPFatal, ErrOverrun)
		}
	}
}

// completeRecv posts a receive completion.
func (q *QP) completeRecv(w *recvWQE, st WCStatus, op WCOpcode, byteLen uint32, flags WCFlags, solicited bool) {
	wc := WC{WRID: w.wrID, Status: st, Opcode: op, ByteLen: byteLen, QPNum: q.qpn, Flags: flags}
	if st == WRFlushErr {
		wc.Opcode, wc.ByteLen, wc.Flags = OpRecv, 0, 0
	}
	q.pushCQ(q.recvCQ, &wc, solicited)
}

// outstanding reports whether sent packets await acknowledgement.
func (q *QP) outstanding() bool {
	return q.typ.reliable() && (q.comp.psn != q.req.hiPSN || q.sqHead != q.req.cur)
}

// checkDrained raises the SQ drained event once the draining QP has no
// outstanding work (IBA 10.3.1.4).
func (q *QP) checkDrained() {
	if q.state == SQD && q.req.drainNotify && !q.outstanding() {
		q.req.drainNotify = false
		if q.env.Event != nil {
			q.env.Event(q, EventSQDrained, nil)
		}
	}
}

// sendVendorErr is the vendor error of a send completion with status st.
// On the send queue these statuses come only from a NAK (or, for
// RetryExcErr, from the retry limit), so the status names the NAK.
func sendVendorErr(st WCStatus) uint32 {
	switch st {
	case RemInvReqErr:
		return VendorNAKInvalidRequest
	case RemAccessErr:
		return VendorNAKRemoteAccess
	case RemOpErr:
		return VendorNAKRemoteOp
	case RetryExcErr:
		return VendorRetryExceeded
	}
	return 0
}
