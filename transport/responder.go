package transport

import (
	"encoding/binary"
	"fmt"

	"github.com/goroce/goroce/bth"
)

// The responder (IBA 9.7.5.1 and 9.7.5.2; rxe_resp.c) checks each incoming
// request's PSN, opcode sequence, length and keys, executes it, and queues
// what goes back: ACKs (coalesced), NAKs, READ responses and atomic ACKs,
// in the order the requests came. Duplicate READs and atomics are answered
// from a ring of max_dest_rd_atomic responder resources.

type msgKind uint8

const (
	msgNone msgKind = iota
	msgSend
	msgWrite
)

// rdResource remembers an executed READ or atomic so a duplicate of it can
// be answered again without executing it twice (IBA 9.7.5.1.3).
type rdResource struct {
	atomic   bool
	firstPSN bth.PSN
	lastPSN  bth.PSN
	rkey     uint32
	pd       *PD    // the PD rkey was checked in (XRCTgt: the XRC SRQ's)
	orig     uint64 // atomic: the value before the operation
	valid    bool
}

type itemKind uint8

const (
	itemACK itemKind = iota
	itemNAK
	itemRead
	itemAtomicAck
)

// respItem is one thing the responder has to send, in order.
type respItem struct {
	kind   itemKind
	psn    bth.PSN
	syn    bth.Syndrome
	msn    uint32
	va     uint64 // READ: next address to read
	rkey   uint32
	pd     *PD    // READ: the PD rkey names a region of
	remain uint32 // READ: bytes left
	first  bool   // READ: the next packet is the response's first
	orig   uint64 // atomic ACK
}

type responder struct {
	epsn    bth.PSN // expected PSN
	msn     uint32
	inMsg   msgKind // multi-packet message in progress
	nakSent bool    // a NAK for epsn went out; later packets wait for its retry
	dropMsg bool    // UC: dropping until the next FIRST or ONLY

	// The receive WQE the SEND in progress fills.
	rwqe    recvWQE // its SGL lives in QP.recvSGE
	haveWQE bool
	rOff    uint32

	// The RDMA WRITE in progress.
	wVA     uint64
	wRKey   uint32
	wRemain uint32
	wLen    uint32

	res     []rdResource
	resNext int

	outq    []respItem
	outHead int

	established bool
}

func (r *responder) init(maxDestRdAtomic uint8) {
	r.res = make([]rdResource, max(int(maxDestRdAtomic), 1))
	r.resNext = 0
}

// handleRequest processes one request packet.
func (q *QP) handleRequest(p bth.Packet, f bth.Frame) {
	if !q.resp.established {
		q.resp.established = true
		if q.state == RTR && q.env.Event != nil {
			q.env.Event(q, EventCommEst, nil) // IBA 11.6.3.1
		}
	}
	switch q.typ {
	case UD:
		q.receiveUD(p, f)
	case UC:
		q.receiveUC(p)
	default:
		q.receiveRC(p)
	}
}

// receiveRC applies the RC responder's checks in the specification's order:
// PSN (9.7.5.1.1), opcode sequence (9.7.5.1.2), then length and resources.
func (q *QP) receiveRC(p bth.Packet) {
	r := &q.resp
	c := q.env.Counters
	psn := p.BTH().PSN()
	switch d := psn.Diff(r.epsn); {
	case d > 0:
		// Out of sequence: one NAK per gap; later packets of the same gap
		// are dropped silently until the expected PSN arrives.
		c.OutOfSeqRequest.Add(1)
		if !r.nakSent {
			r.nakSent = true
			q.queueNAK(bth.NAKSyndrome(bth.NAKPSNSequenceError), r.epsn)
		}
		return
	case d < 0:
		c.DuplicateRequest.Add(1)
		q.duplicate(p, psn)
		return
	}
	r.nakSent = false
	if q.typ == XRCTgt && !q.xrcTarget(p) {
		return
	}
	info := p.Info()
	if !q.sequenceOK(info) {
		q.classC(bth.NAKInvalidRequest, RemInvReqErr, EventQPReqErr,
			badRequest("%v out of sequence (IBA 9.7.5.1.2)", p.OpCode()))
		return
	}
	switch info.Kind {
	case bth.KindSend:
		q.execSend(p)
	case bth.KindWrite:
		q.execWrite(p)
	case bth.KindReadRequest:
		q.execRead(p)
	case bth.KindCompareSwap, bth.KindFetchAdd:
		q.execAtomic(p)
	default:
		// FLUSH, ATOMIC WRITE and RD opcodes are not supported here.
		q.classC(bth.NAKInvalidRequest, RemInvReqErr, EventQPReqErr,
			badRequest("%v not supported", p.OpCode()))
	}
}

// sequenceOK checks the opcode against the message in progress (IBA
// 9.7.5.1.2): a FIRST or MIDDLE must be followed by a MIDDLE or LAST of the
// same operation, and nothing else may interrupt it.
func (q *QP) sequenceOK(info *bth.Info) bool {
	cont := info.Pos == bth.PosMiddle || info.Pos == bth.PosLast
	switch q.resp.inMsg {
	case msgSend:
		return cont && info.Kind == bth.KindSend
	case msgWrite:
		return cont && info.Kind == bth.KindWrite
	}
	return !cont
}

// lengthOK checks a packet's payload against the path MTU: FIRST and
// MIDDLE carry exactly one MTU, LAST at least one byte and at most one MTU,
// ONLY at most one MTU (IBA 9.7.5.1.4).
func (q *QP) lengthOK(p bth.Packet) bool {
	n, mtu := p.PayloadLen(), q.mtu
	switch p.Info().Pos {
	case bth.PosFirst, bth.PosMiddle:
		return n == mtu
	case bth.PosLast:
		return n > 0 && n <= mtu
	}
	return n <= mtu
}

// maxRecvSGE is the longest SGL a receive WQE the QP takes may have.
func (q *QP) maxRecvSGE() uint32 {
	switch {
	case q.typ == XRCTgt: // any XRC SRQ of the domain may be named
		return MaxSGE
	case q.srq != nil:
		return max(q.srq.rq.maxSGE, 1)
	default:
		return q.cap.MaxRecvSGE
	}
}

// takeRecvWQE pops the next receive WQE (from the SRQ if the QP has one),
// copying its SGL so the slot can be reused while the message arrives.
func (q *QP) takeRecvWQE() bool {
	var w recvWQE
	var ok bool
	if q.recvSGE == nil {
		q.recvSGE = make([]SGE, q.maxRecvSGE())
	}
	if q.srq != nil {
		w, ok = q.srq.pop(q.recvSGE)
	} else {
		w, ok = q.rq.pop(q.recvSGE)
	}
	if !ok {
		return false
	}
	q.resp.rwqe = w
	q.resp.haveWQE = true
	q.resp.rOff = 0
	return true
}

// rnr answers a request that needs a receive WQE when there is none: an
// RNR NAK with the QP's min_rnr_timer, and the PSN is not consumed (IBA
// 9.7.5.2.8).
func (q *QP) rnr() {
	q.env.Counters.SendRNRErr.Add(1)
	q.resp.nakSent = true // later packets of the burst wait for the retry
	q.queueNAK(bth.RNRNAKSyndrome(q.attr.MinRNRTimer), q.resp.epsn)
}

func (q *QP) execSend(p bth.Packet) {
	r := &q.resp
	info := p.Info()
	start := info.Pos == bth.PosFirst || info.Pos == bth.PosOnly
	if start && !r.haveWQE && !q.takeRecvWQE() {
		q.rnr()
		return
	}
	if !q.lengthOK(p) {
		q.classC(bth.NAKInvalidRequest, RemInvReqErr, EventQPReqErr, q.lengthError(p))
		return
	}
	pay := p.Payload()
	if uint64(r.rOff)+uint64(len(pay)) > uint64(r.rwqe.length) {
		// The message does not fit the receive buffer: local length error
		// here, invalid request at the requester (IBA 9.7.5.2.3).
		q.completeRecv(&r.rwqe, LocLenErr, OpRecv, r.rOff, 0, false)
		r.haveWQE = false
		q.classC(bth.NAKInvalidRequest, 0, 0, nil)
		return
	}
	if err := q.scatter(r.rwqe.sgl, r.rOff, pay); err != nil {
		q.completeRecv(&r.rwqe, LocProtErr, OpRecv, r.rOff, 0, false)
		r.haveWQE = false
		q.classC(bth.NAKRemoteOperational, 0, 0, nil)
		return
	}
	r.rOff += uint32(len(pay))
	r.epsn = r.epsn.Next()
	if info.Pos == bth.PosLast || info.Pos == bth.PosOnly {
		var flags WCFlags
		wc := q.peerRecvWC(OpRecv, r.rOff)
		if info.Imm {
			flags |= WithImm
			wc.ImmData = p.ImmDt().Imm()
		}
		if info.Inv {
			rkey := p.IETH().RKey()
			if err := q.pd.invalidateRKey(q, rkey, true); err != nil {
				r.epsn = r.epsn.Add(-1)
				q.classC(bth.NAKInvalidRequest, RemInvReqErr, EventQPReqErr,
					badRequest("SEND with Invalidate: rkey 0x%x: %w", rkey, err))
				return
			}
			flags |= WithInv
			wc.InvalidatedRKey = rkey
		}
		wc.Flags = flags
		r.haveWQE = false
		r.inMsg = msgNone
		r.msn++
		q.env.Counters.RDMARecvs.Add(1)
		q.pushCQ(q.recvCQ, &wc, p.BTH().SE())
	} else {
		r.inMsg = msgSend
	}
	if p.BTH().AckReq() {
		q.queueACK(p.BTH().PSN())
	}
}

func (q *QP) execWrite(p bth.Packet) {
	r := &q.resp
	info := p.Info()
	if info.Pos == bth.PosFirst || info.Pos == bth.PosOnly {
		reth := p.RETH()
		if q.attr.AccessFlags&RemoteWrite == 0 {
			q.qpAccessError("WRITE", "REMOTE_WRITE")
			return
		}
		r.wVA, r.wRKey, r.wLen = reth.VA(), reth.RKey(), reth.DMALen()
		r.wRemain = r.wLen
		// A zero-length WRITE checks no R_Key (IBA 9.7.5.2.2).
		if r.wLen > 0 {
			if _, err := q.remote(r.wRKey, r.wVA, r.wLen, RemoteWrite, false); err != nil {
				q.classC(bth.NAKRemoteAccessError, 0, EventQPAccessErr, rkeyError("WRITE", r.wRKey, r.wVA, r.wLen, err))
				return
			}
		}
	}
	// WRITE with immediate consumes a receive WQE: check for one before
	// touching memory, so an RNR retry finds the packet unconsumed.
	if info.Imm && !r.haveWQE && !q.takeRecvWQE() {
		q.rnr()
		return
	}
	if !q.lengthOK(p) {
		q.classC(bth.NAKInvalidRequest, RemInvReqErr, EventQPReqErr, q.lengthError(p))
		return
	}
	if uint32(p.PayloadLen()) > r.wRemain {
		q.classC(bth.NAKInvalidRequest, RemInvReqErr, EventQPReqErr,
			badRequest("WRITE longer than its DMA length %d", r.wLen))
		return
	}
	if n := uint32(p.PayloadLen()); n > 0 {
		span, err := q.remote(r.wRKey, r.wVA, n, RemoteWrite, true)
		if err != nil {
			q.classC(bth.NAKRemoteAccessError, 0, EventQPAccessErr, rkeyError("WRITE", r.wRKey, r.wVA, n, err))
			return
		}
		copy(span.b, p.Payload())
		span.release()
		r.wVA += uint64(n)
		r.wRemain -= n
	}
	last := info.Pos == bth.PosLast || info.Pos == bth.PosOnly
	if last && r.wRemain != 0 {
		// The message was shorter than its RETH said (IBA 9.7.5.2.2).
		q.classC(bth.NAKInvalidRequest, RemInvReqErr, EventQPReqErr,
			badRequest("WRITE ends %d bytes short of its DMA length %d", r.wRemain, r.wLen))
		return
	}
	r.epsn = r.epsn.Next()
	if last {
		r.inMsg = msgNone
		r.msn++
		if info.Imm {
			q.completeWriteImm(p)
		}
	} else {
		r.inMsg = msgWrite
	}
	if p.BTH().AckReq() {
		q.queueACK(p.BTH().PSN())
	}
}

// peerRecvWC starts the completion of the receive WQE in hand for a
// message from the connected peer (RC or UC).
func (q *QP) peerRecvWC(op WCOpcode, byteLen uint32) WC {
	return WC{WRID: q.resp.rwqe.wrID, Opcode: op, ByteLen: byteLen, QPNum: q.qpn, SrcQP: q.attr.DestQPN}
}

// completeWriteImm completes the receive WQE a WRITE with immediate
// consumes, at its last packet (RC and UC alike).
func (q *QP) completeWriteImm(p bth.Packet) {
	r := &q.resp
	wc := q.peerRecvWC(OpRecvRDMAWithImm, r.wLen)
	wc.Flags, wc.ImmData = WithImm, p.ImmDt().Imm()
	r.haveWQE = false
	q.pushCQ(q.recvCQ, &wc, p.BTH().SE())
}

// remote checks an access through an rkey against the QP's PD; with hold
// it returns the span locked for the copy.
func (q *QP) remote(rkey uint32, va uint64, n uint32, need Access, hold bool) (accessSpan, error) {
	span, err := remoteSpan(q.pd, q, rkey, va, n, need)
	if err == nil && !hold {
		span.release()
	}
	return span, err
}

func (q *QP) execRead(p bth.Packet) {
	r := &q.resp
	reth := p.RETH()
	psn := p.BTH().PSN()
	if q.attr.AccessFlags&RemoteRead == 0 {
		q.qpAccessError("READ", "REMOTE_READ")
		return
	}
	if q.attr.MaxDestRdAtomic == 0 {
		q.classC(bth.NAKInvalidRequest, 0, EventQPReqErr, badRequest("READ to a QP with max_dest_rd_atomic 0"))
		return
	}
	va, rkey, n := reth.VA(), reth.RKey(), reth.DMALen()
	if n > MaxMsgSize {
		q.classC(bth.NAKInvalidRequest, 0, EventQPReqErr, badRequest("READ of %d bytes exceeds 2^31", n))
		return
	}
	if n > 0 {
		if _, err := q.remote(rkey, va, n, RemoteRead, false); err != nil {
			q.classC(bth.NAKRemoteAccessError, 0, EventQPAccessErr, rkeyError("READ", rkey, va, n, err))
			return
		}
	}
	npkts := max(1, (n+uint32(q.mtu)-1)/uint32(q.mtu))
	last := psn.Add(int(npkts) - 1)
	r.res[r.resNext] = rdResource{firstPSN: psn, lastPSN: last, rkey: rkey, pd: q.pd, valid: true}
	r.resNext = (r.resNext + 1) % len(r.res)
	// The READ consumes one PSN per response packet (IBA 9.7.5.1.1), and its
	// responses carry the MSN counting it.
	r.epsn = last.Next()
	r.msn++
	q.queueItem(respItem{kind: itemRead, psn: psn, va: va, rkey: rkey, pd: q.pd, remain: n, first: true})
}

func (q *QP) execAtomic(p bth.Packet) {
	r := &q.resp
	a := p.AtomicETH()
	psn := p.BTH().PSN()
	if q.attr.AccessFlags&RemoteAtomic == 0 {
		q.qpAccessError("atomic", "REMOTE_ATOMIC")
		return
	}
	if q.attr.MaxDestRdAtomic == 0 {
		q.classC(bth.NAKInvalidRequest, 0, EventQPReqErr, badRequest("atomic to a QP with max_dest_rd_atomic 0"))
		return
	}
	if a.VA()&7 != 0 {
		// An atomic on an unaligned address is an invalid request (IBA 9.4.5).
		q.classC(bth.NAKInvalidRequest, 0, EventQPReqErr, badRequest("atomic address 0x%x is not 8-byte aligned", a.VA()))
		return
	}
	span, err := q.remote(a.RKey(), a.VA(), 8, RemoteAtomic, true)
	if err != nil {
		q.classC(bth.NAKRemoteAccessError, 0, EventQPAccessErr, rkeyError("atomic", a.RKey(), a.VA(), 8, err))
		return
	}
	q.env.Atomic.Lock()
	orig := binary.LittleEndian.Uint64(span.b)
	if p.OpCode().Info().Kind == bth.KindCompareSwap {
		if orig == a.Compare() {
			binary.LittleEndian.PutUint64(span.b, a.SwapAdd())
		}
	} else {
		binary.LittleEndian.PutUint64(span.b, orig+a.SwapAdd())
	}
	q.env.Atomic.Unlock()
	span.release()
	r.res[r.resNext] = rdResource{atomic: true, firstPSN: psn, lastPSN: psn, rkey: a.RKey(), orig: orig, valid: true}
	r.resNext = (r.resNext + 1) % len(r.res)
	r.epsn = psn.Next()
	r.msn++
	q.queueItem(respItem{kind: itemAtomicAck, psn: psn, orig: orig})
}

// duplicate answers a request whose PSN is behind the expected one (IBA
// 9.7.5.1.3, C9-105): SEND and WRITE are acknowledged again where they
// ask for it; READ and
// atomic requests are answered again from the responder resources, a READ
// from whatever PSN and range the retried request names.
func (q *QP) duplicate(p bth.Packet, psn bth.PSN) {
	r := &q.resp
	switch p.Info().Kind {
	case bth.KindSend, bth.KindWrite:
		// Acknowledged again as a new request is (C9-105), and as
		// coalesced as one: only where the requester asks, with AckReq,
		// and with the duplicate's own PSN. An ACK of a later PSN would
		// reach a requester in the middle of going back and cover packets
		// it has not sent again: rxe's completer then completes the WQE
		// it is still retransmitting and moves comp.psn past req.psn,
		// which turns off its retransmit timer, and a requester that
		// pauses (rxe's in-flight skb limit) never resumes. Seen in the
		// lab's impaired stage (interop/README.md, "rxe's requester
		// stalls again, after a lost ACK"). The MSN stays the latest.
		if p.BTH().AckReq() {
			q.queueACK(psn)
		}
	case bth.KindReadRequest:
		res := r.find(psn, false)
		if res == nil {
			return // forgotten: drop, the requester will time out (class D)
		}
		reth := p.RETH()
		if reth.RKey() != res.rkey {
			return
		}
		if n := reth.DMALen(); n > 0 {
			s, err := remoteSpan(res.pd, q, reth.RKey(), reth.VA(), n, RemoteRead)
			if err != nil {
				return
			}
			s.release()
		}
		q.dropQueuedFrom(psn)
		q.queueItem(respItem{kind: itemRead, psn: psn, va: reth.VA(), rkey: reth.RKey(), pd: res.pd, remain: reth.DMALen(), first: true})
	case bth.KindCompareSwap, bth.KindFetchAdd:
		if res := r.find(psn, true); res != nil && res.firstPSN == psn {
			q.dropQueuedFrom(psn)
			q.queueItem(respItem{kind: itemAtomicAck, psn: psn, orig: res.orig})
		}
	}
}

// dropQueuedFrom discards queued responses for psn and later PSNs. A
// duplicate READ or atomic means the requester went back to psn (go-back-N)
// and will ask again, in order, for everything after it; responses queued
// for those would arrive ahead of the replay and only be discarded there.
func (q *QP) dropQueuedFrom(psn bth.PSN) {
	r := &q.resp
	for i := r.outHead; i < len(r.outq); i++ {
		if !r.outq[i].psn.Before(psn) {
			clear(r.outq[i:])
			r.outq = r.outq[:i]
			return
		}
	}
}

// find returns the resource whose PSN range holds psn.
func (r *responder) find(psn bth.PSN, atomic bool) *rdResource {
	for i := range r.res {
		s := &r.res[i]
		if s.valid && s.atomic == atomic && !psn.Before(s.firstPSN) && !psn.After(s.lastPSN) {
			return s
		}
	}
	return nil
}

// classC handles an error that ends the connection at the responder: a
// NAK goes out, a receive WQE in use completes with st (if st != 0), and
// the QP enters ERR with an affiliated event (IBA 9.9.3.1, 10.3.1.7)
// whose Err is reason.
func (q *QP) classC(code bth.NAKCode, st WCStatus, ev EventType, reason error) {
	r := &q.resp
	psn := r.epsn
	q.queueNAK(bth.NAKSyndrome(code), psn)
	q.respond(1 << 30) // what was queued before the error goes first
	if r.haveWQE && st != 0 {
		q.completeRecv(&r.rwqe, st, OpRecv, r.rOff, 0, false)
		r.haveWQE = false
	}
	w := why{cause: CauseResponderError, psn: psn, hasPSN: true, err: reason,
		detail: fmt.Sprintf("this QP answered the request at PSN 0x%06x with %v", uint32(psn), bth.NAKSyndrome(code))}
	if ev != 0 {
		q.fatal(ev, reason, w)
	} else {
		q.toError(nil, WRFlushErr, w)
	}
}

// qpAccessError answers a request the QP's access flags do not enable: an
// invalid request, not a remote access error, as rxe's check_op_valid
// answers it (RESPST_ERR_UNSUPPORTED_OPCODE: NAK invalid request,
// IBV_WC_REM_INV_REQ_ERR at the requester).
func (q *QP) qpAccessError(op, flag string) {
	q.classC(bth.NAKInvalidRequest, RemInvReqErr, EventQPReqErr,
		fmt.Errorf("%w: %s to a QP without %s", ErrQPAccess, op, flag))
}

// lengthError names the length rule a packet broke (IBA 9.7.5.1.4).
func (q *QP) lengthError(p bth.Packet) error {
	return badRequest("%v with a payload of %d bytes on a path MTU of %d (IBA 9.7.5.1.4)", p.OpCode(), p.PayloadLen(), q.mtu)
}

func (q *QP) queueItem(it respItem) {
	r := &q.resp
	if it.msn == 0 {
		it.msn = r.msn
	}
	if r.outHead == len(r.outq) {
		r.outq, r.outHead = r.outq[:0], 0
	}
	r.outq = append(r.outq, it)
}

// queueACK queues an ACK of psn, folding it into an ACK already waiting at
// the tail: an ACK acknowledges everything before it (coalescing).
func (q *QP) queueACK(psn bth.PSN) {
	r := &q.resp
	if n := len(r.outq); n > r.outHead && r.outq[n-1].kind == itemACK {
		r.outq[n-1].psn, r.outq[n-1].msn = psn, r.msn
		q.env.Counters.AckDeferred.Add(1)
		return
	}
	q.queueItem(respItem{kind: itemACK, psn: psn, syn: bth.ACKSyndrome(bth.CreditsInvalid), msn: r.msn})
}

func (q *QP) queueNAK(syn bth.Syndrome, psn bth.PSN) {
	q.queueItem(respItem{kind: itemNAK, psn: psn, syn: syn, msn: q.resp.msn})
}

// respond sends queued responses, at most budget packets, and returns how
// many it sent and whether more remain.
func (q *QP) respond(budget int) (int, bool) {
	r := &q.resp
	sent := 0
	for r.outHead < len(r.outq) {
		if sent == budget {
			return sent, true
		}
		it := &r.outq[r.outHead]
		switch it.kind {
		case itemACK, itemNAK:
			q.sendAckItem(it)
			r.outHead++
		case itemAtomicAck:
			p := q.newPacket(&q.outer, q.typ.opcode(bth.RCAtomicAcknowledge), 0, it.psn, q.attr.DestQPN)
			bth.AETH(p.Ext(bth.ExtAETH)).Encode(bth.ACKSyndrome(bth.CreditsInvalid), it.msn)
			bth.AtomicAckETH(p.Ext(bth.ExtAtomicAckETH)).SetOrigData(it.orig)
			q.send(&p)
			r.outHead++
		case itemRead:
			if !q.sendReadResponse(it) {
				return sent, false
			}
			if it.remain == 0 && !it.first {
				r.outHead++
			}
		}
		sent++
	}
	return sent, false
}

// sendQueuedAcks sends the ACKs and NAKs at the head of the response
// queue, stopping at the first READ or atomic response.
func (q *QP) sendQueuedAcks() {
	r := &q.resp
	for ; r.outHead < len(r.outq); r.outHead++ {
		it := &r.outq[r.outHead]
		if it.kind != itemACK && it.kind != itemNAK {
			return
		}
		q.sendAckItem(it)
	}
}

// sendAckItem sends a queued ACK or NAK and counts it.
func (q *QP) sendAckItem(it *respItem) {
	q.sendAck(q.typ.opcode(bth.RCAcknowledge), it.psn, it.syn, it.msn)
	if it.kind == itemNAK {
		q.env.Counters.SentNAKs.Add(1)
	} else {
		q.env.Counters.SentACKs.Add(1)
	}
}

func (q *QP) sendAck(op bth.OpCode, psn bth.PSN, syn bth.Syndrome, msn uint32) {
	p := q.newPacket(&q.outer, op, 0, psn, q.attr.DestQPN)
	bth.AETH(p.Ext(bth.ExtAETH)).Encode(syn, msn)
	q.send(&p)
}

// sendReadResponse sends the next packet of a READ response. It returns
// false if the memory became inaccessible (the QP is then in ERR).
func (q *QP) sendReadResponse(it *respItem) bool {
	mtu := uint32(q.mtu)
	n := min(mtu, it.remain)
	last := it.remain <= mtu
	// Every transport that has READ requests has the four responses.
	op, _ := bth.Find(q.typ.transport(), bth.KindReadResponse, bth.MessagePosition(it.first, last), false, false)
	p := q.newPacket(&q.outer, op, int(n), it.psn, q.attr.DestQPN)
	if p.Info().Headers.Has(bth.ExtAETH) {
		bth.AETH(p.Ext(bth.ExtAETH)).Encode(bth.ACKSyndrome(bth.CreditsInvalid), it.msn)
	}
	if n > 0 {
		span, err := remoteSpan(it.pd, q, it.rkey, it.va, n, RemoteRead)
		if err != nil {
			// Deregistered while the response was going out: NAK this PSN,
			// drop what would follow it, and end the connection.
			p.release()
			q.resp.outq = q.resp.outq[:q.resp.outHead]
			q.resp.epsn = it.psn
			q.classC(bth.NAKRemoteAccessError, 0, EventQPAccessErr, rkeyError("READ response", it.rkey, it.va, n, err))
			return false
		}
		copy(p.Payload(), span.b)
		span.release()
	}
	q.send(&p)
	it.first = false
	it.va += uint64(n)
	it.remain -= n
	it.psn = it.psn.Next()
	return true
}
