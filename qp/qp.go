package qp

import (
	"fmt"
	"sync"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cq"
	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/nic"
)

// Env is what a QP needs from the device it lives on.
type Env struct {
	Keys     *mr.Table
	Link     nic.Link
	Counters *Counters
	// GID returns the local GID at a GID-table index.
	GID func(index uint8) (bth.GID, bool)
	// Schedule asks the device to call QP.Run later, from its worker: the
	// QP has more to send than one run may do at once.
	Schedule func(*QP)
	// Event delivers an asynchronous event.
	Event func(Event)
	// Atomic serializes atomic operations on the device's memory, which
	// must be atomic with respect to each other across all QPs (IBA 9.4.5).
	Atomic *sync.Mutex
	// MaxMTU is the largest path MTU the link carries.
	MaxMTU MTU
	// Window bounds the unacknowledged packets an RC requester keeps in
	// flight (0: DefaultWindow).
	Window int
	// Trace, if set, sees every packet the QP sends, after it is sealed.
	Trace func(out bool, datagram []byte)
}

// runBudget bounds the packets one run of a QP builds before it yields, so
// that a long message does not hold a goroutine (and the QP lock) for long.
const runBudget = 64

// ackReqEvery is how often a long RC message asks for an acknowledgement,
// as Linux rxe does, so the requester's window keeps moving.
const ackReqEvery = 64

// QP is a queue pair. Its methods are safe for concurrent use.
type QP struct {
	env    *Env
	pd     *mr.PD
	typ    Type
	qpn    uint32
	sendCQ *cq.CQ
	recvCQ *cq.CQ
	srq    *SRQ
	sigAll bool
	cap    Cap

	mu      sync.Mutex
	state   State
	attr    Attr
	mtu     int
	outer   bth.Outer // RC/UC: the path to the peer
	srcPort uint16
	pkey    uint16

	// Send queue: a ring of WQEs addressed by free-running counters.
	sq          []sendWQE
	sqHead      uint32 // oldest WQE not yet completed
	sqTail      uint32 // next free slot
	sgeStore    []mr.SGE
	inlineStore []byte

	// Receive queue, when the QP has no SRQ.
	rq rqueue

	req  requester
	resp responder
	comp completer

	tx        txBatch
	scheduled bool // queued on the device worker
	inBatch   bool // touched by the receive burst in progress
	rtoTimer  *time.Timer
	rnrTimer  *time.Timer
	destroyed bool
}

// New creates a QP in the RESET state. The device chooses qpn.
func New(env *Env, pd *mr.PD, qpn uint32, ia InitAttr) (*QP, error) {
	switch ia.Type {
	case RC, UC, UD:
	default:
		return nil, invalid("unsupported QP type %v", ia.Type)
	}
	if ia.SendCQ == nil || ia.RecvCQ == nil {
		return nil, invalid("a QP needs a send CQ and a receive CQ")
	}
	c := ia.Cap
	if c.MaxSendWR == 0 || c.MaxSendWR > MaxWR || c.MaxSendSGE > MaxSGE ||
		c.MaxRecvSGE > MaxSGE || c.MaxInlineData > MaxInline || c.MaxRecvWR > MaxWR {
		return nil, invalid("capabilities %+v beyond the device's (max_wr %d, max_sge %d, max_inline %d)",
			c, MaxWR, MaxSGE, MaxInline)
	}
	if ia.SRQ == nil && c.MaxRecvWR == 0 {
		return nil, invalid("a QP without an SRQ needs max_recv_wr > 0")
	}
	if ia.SRQ != nil && ia.SRQ.pd != pd {
		return nil, invalid("SRQ belongs to another protection domain")
	}
	c.MaxSendSGE = max(c.MaxSendSGE, 1)
	c.MaxRecvSGE = max(c.MaxRecvSGE, 1)
	q := &QP{env: env, pd: pd, typ: ia.Type, qpn: qpn, sendCQ: ia.SendCQ, recvCQ: ia.RecvCQ,
		srq: ia.SRQ, sigAll: ia.SigAll, cap: c, pkey: bth.DefaultPKey}
	q.sq = make([]sendWQE, c.MaxSendWR)
	q.sgeStore = make([]mr.SGE, c.MaxSendWR*c.MaxSendSGE)
	if c.MaxInlineData > 0 {
		q.inlineStore = make([]byte, c.MaxSendWR*c.MaxInlineData)
	}
	if ia.SRQ == nil {
		q.rq.init(c.MaxRecvWR, c.MaxRecvSGE)
	} else {
		ia.SRQ.users.Add(1)
	}
	q.srcPort = env.Link.SrcPort(qpn)
	q.rtoTimer = time.AfterFunc(time.Hour, q.onRTO)
	q.rtoTimer.Stop()
	q.rnrTimer = time.AfterFunc(time.Hour, q.onRNRTimer)
	q.rnrTimer.Stop()
	pd.Hold()
	return q, nil
}

// QPN returns the QP number.
func (q *QP) QPN() uint32 { return q.qpn }

// Type returns the transport service.
func (q *QP) Type() Type { return q.typ }

// PD returns the protection domain.
func (q *QP) PD() *mr.PD { return q.pd }

// State returns the current state.
func (q *QP) State() State {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state
}

func (q *QP) String() string { return fmt.Sprintf("%v QP 0x%06x", q.typ, q.qpn) }

// Query returns the QP's attributes and its creation attributes, as ibv_query_qp.
func (q *QP) Query() (Attr, InitAttr) {
	q.mu.Lock()
	defer q.mu.Unlock()
	a := q.attr
	a.State, a.CurState = q.state, q.state
	a.Cap = q.cap
	a.SQDraining = q.state == SQD && q.outstanding()
	if q.typ != UD {
		a.SQPSN = uint32(q.req.psn)
		a.RQPSN = uint32(q.resp.epsn)
	}
	return a, InitAttr{Type: q.typ, SendCQ: q.sendCQ, RecvCQ: q.recvCQ, SRQ: q.srq, Cap: q.cap, SigAll: q.sigAll}
}

// Modify changes the QP's state and attributes, as ibv_modify_qp: the
// transition and the attribute mask must be one IBA 10.3.1 allows.
func (q *QP) Modify(a *Attr, mask AttrMask) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return fmt.Errorf("%w: QP destroyed", ErrState)
	}
	cur, next := q.state, q.state
	if mask&AttrState != 0 {
		next = a.State
	}
	if mask&AttrCurState != 0 && a.CurState != cur {
		return &AttrError{From: cur, To: next, Type: q.typ, Reason: fmt.Sprintf("cur_state %v is not the QP's state", a.CurState)}
	}
	if err := checkTransition(q.typ, cur, next, mask); err != nil {
		return err
	}
	if err := q.checkValues(a, mask); err != nil {
		return err
	}
	q.apply(a, mask)
	switch {
	case next == Reset && cur != Reset:
		q.reset()
	case next == Err && cur != Err:
		q.toError(nil, cq.WRFlushErr)
	case next == RTR && cur == Init:
		q.resp.epsn = bth.PSN(q.attr.RQPSN & bth.PSNMask)
		q.resp.init(q.attr.MaxDestRdAtomic)
		q.state = RTR
	case next == RTS && cur == RTR:
		p := bth.PSN(q.attr.SQPSN & bth.PSNMask)
		q.req.psn, q.req.hiPSN, q.comp.psn = p, p, p
		q.comp.resetRetries(&q.attr)
		q.state = RTS
	case next == SQD && cur == RTS:
		q.state = SQD
		q.req.drainNotify = q.attr.EnSQDAsyncNotify
		q.checkDrained()
	case next == RTS && (cur == SQD || cur == SQE):
		q.state = RTS
		q.run()
	default:
		q.state = next
	}
	return nil
}

// checkValues checks attribute values the mask selects.
func (q *QP) checkValues(a *Attr, mask AttrMask) error {
	if mask&AttrPathMTU != 0 {
		if !a.PathMTU.Valid() {
			return invalid("path MTU %d is not an IB MTU enum (1..5)", a.PathMTU)
		}
		if q.env.MaxMTU != 0 && a.PathMTU > q.env.MaxMTU {
			return invalid("path MTU %v exceeds the port's active MTU %v", a.PathMTU, q.env.MaxMTU)
		}
	}
	if mask&AttrPort != 0 && a.PortNum != 1 {
		return invalid("port %d: the device has one port, 1", a.PortNum)
	}
	if mask&AttrPKeyIndex != 0 && a.PKeyIndex != 0 {
		return invalid("P_Key index %d: the P_Key table has one entry", a.PKeyIndex)
	}
	if mask&AttrMaxQPRdAtomic != 0 && a.MaxRdAtomic > MaxRdAtomic {
		return invalid("max_rd_atomic %d exceeds %d", a.MaxRdAtomic, MaxRdAtomic)
	}
	if mask&AttrMaxDestRdAtomic != 0 && a.MaxDestRdAtomic > MaxRdAtomic {
		return invalid("max_dest_rd_atomic %d exceeds %d", a.MaxDestRdAtomic, MaxRdAtomic)
	}
	if mask&(AttrRetryCnt) != 0 && a.RetryCnt > 7 {
		return invalid("retry_cnt %d exceeds 7", a.RetryCnt)
	}
	if mask&(AttrRNRRetry) != 0 && a.RNRRetry > 7 {
		return invalid("rnr_retry %d exceeds 7", a.RNRRetry)
	}
	if mask&AttrMinRNRTimer != 0 && a.MinRNRTimer > 31 {
		return invalid("min_rnr_timer %d exceeds 31", a.MinRNRTimer)
	}
	if mask&AttrTimeout != 0 && a.Timeout > 31 {
		return invalid("timeout %d exceeds 31", a.Timeout)
	}
	if mask&(AttrRQPSN) != 0 && a.RQPSN > bth.PSNMask || mask&AttrSQPSN != 0 && a.SQPSN > bth.PSNMask {
		return invalid("PSN beyond 24 bits")
	}
	if mask&AttrDestQPN != 0 && a.DestQPN > bth.PSNMask {
		return invalid("destination QPN 0x%x beyond 24 bits", a.DestQPN)
	}
	if mask&AttrAV != 0 {
		if _, err := q.resolvePath(&a.AH); err != nil {
			return err
		}
	}
	return nil
}

// apply stores the selected attributes.
func (q *QP) apply(a *Attr, mask AttrMask) {
	t := &q.attr
	if mask&AttrAccessFlags != 0 {
		t.AccessFlags = a.AccessFlags
	}
	if mask&AttrPKeyIndex != 0 {
		t.PKeyIndex = a.PKeyIndex
	}
	if mask&AttrPort != 0 {
		t.PortNum = a.PortNum
	}
	if mask&AttrQKey != 0 {
		t.QKey = a.QKey
	}
	if mask&AttrAV != 0 {
		t.AH = a.AH
		q.outer, _ = q.resolvePath(&a.AH)
	}
	if mask&AttrPathMTU != 0 {
		t.PathMTU = a.PathMTU
		q.mtu = a.PathMTU.Bytes()
	}
	if mask&AttrTimeout != 0 {
		t.Timeout = a.Timeout
	}
	if mask&AttrRetryCnt != 0 {
		t.RetryCnt = a.RetryCnt
		q.comp.retryCnt = a.RetryCnt
	}
	if mask&AttrRNRRetry != 0 {
		t.RNRRetry = a.RNRRetry
		q.comp.rnrRetry = a.RNRRetry
	}
	if mask&AttrRQPSN != 0 {
		t.RQPSN = a.RQPSN
	}
	if mask&AttrSQPSN != 0 {
		t.SQPSN = a.SQPSN
	}
	if mask&AttrMaxQPRdAtomic != 0 {
		t.MaxRdAtomic = a.MaxRdAtomic
	}
	if mask&AttrMaxDestRdAtomic != 0 {
		t.MaxDestRdAtomic = a.MaxDestRdAtomic
		if q.state == SQD {
			q.resp.init(a.MaxDestRdAtomic)
		}
	}
	if mask&AttrMinRNRTimer != 0 {
		t.MinRNRTimer = a.MinRNRTimer
	}
	if mask&AttrDestQPN != 0 {
		t.DestQPN = a.DestQPN
	}
	if mask&AttrEnSQDAsyncNotify != 0 {
		t.EnSQDAsyncNotify = a.EnSQDAsyncNotify
	}
	if q.typ == UD && q.mtu == 0 {
		// UD has no path MTU attribute: it sends up to the port's MTU.
		q.mtu = q.env.MaxMTU.Bytes()
		if q.mtu == 0 {
			q.mtu = MTU4096.Bytes()
		}
	}
}

// resolvePath turns an address vector into the IP and UDP headers its
// packets carry. The source is the local GID the vector selects.
func (q *QP) resolvePath(ah *AHAttr) (bth.Outer, error) {
	return resolveAH(q.env, ah, q.srcPort)
}

func resolveAH(env *Env, ah *AHAttr, srcPort uint16) (bth.Outer, error) {
	sgid, ok := env.GID(ah.SGIDIndex)
	if !ok {
		return bth.Outer{}, invalid("source GID index %d is not in the GID table", ah.SGIDIndex)
	}
	if ah.DGID.IsZero() {
		return bth.Outer{}, invalid("destination GID is zero (RoCE needs a global route)")
	}
	if sgid.IsIPv4() != ah.DGID.IsIPv4() {
		return bth.Outer{}, invalid("source GID %v and destination GID %v are of different IP versions", sgid, ah.DGID)
	}
	if ah.FlowLabel > 0xfffff {
		return bth.Outer{}, invalid("flow label 0x%x beyond 20 bits", ah.FlowLabel)
	}
	if ah.SrcPort != 0 {
		srcPort = ah.SrcPort
	}
	return bth.Outer{Src: sgid.Addr(), Dst: ah.DGID.Addr(), SrcPort: srcPort,
		TClass: ah.TrafficClass, FlowLabel: ah.FlowLabel, HopLimit: ah.HopLimit}, nil
}

// Destroy destroys the QP (ibv_destroy_qp). Outstanding work requests are
// dropped without completions.
func (q *QP) Destroy() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return nil
	}
	// A consumer may destroy the QP as soon as its last receive completes,
	// while that message's ACK still waits for the end of the receive
	// burst (Batch.Flush). Send it: rxe acknowledges in the same responder
	// run that completes the receive, HCAs in hardware, so the peer's send
	// completes; dropped, the peer retries into a destroyed QP and fails.
	if q.typ == RC && q.state != Reset && q.state != Init && q.state != Err {
		q.sendQueuedAcks()
		q.flushTx()
	}
	q.destroyed = true
	q.state = Reset
	q.rtoTimer.Stop()
	q.rnrTimer.Stop()
	q.tx.drop()
	if q.srq != nil {
		q.srq.users.Add(-1)
	}
	q.pd.Release()
	return nil
}

// reset returns the QP to RESET: queues emptied, no completions (IBA 10.3.1.1).
func (q *QP) reset() {
	q.rtoTimer.Stop()
	q.rnrTimer.Stop()
	q.tx.drop()
	q.sqHead, q.sqTail = 0, 0
	q.rq.reset()
	q.req = requester{}
	q.resp = responder{}
	q.comp = completer{}
	q.attr = Attr{}
	q.mtu = 0
	q.state = Reset
}

// Run does the QP's pending work; the device worker calls it after Schedule.
func (q *QP) Run() {
	q.mu.Lock()
	q.scheduled = false
	q.run()
	q.mu.Unlock()
}

// run sends what the responder and requester have ready, up to a budget,
// and asks to be run again if more remains. Called with q.mu held.
func (q *QP) run() {
	if q.destroyed {
		return
	}
	budget := runBudget
	more := false
	if n, m := q.respond(budget); m {
		more = true
		budget -= n
	} else {
		budget -= n
	}
	if budget > 0 {
		if _, m := q.request(budget); m {
			more = true
		}
	} else if q.requestReady() {
		more = true
	}
	q.flushTx()
	if more && !q.scheduled && q.env.Schedule != nil {
		q.scheduled = true
		q.env.Schedule(q)
	}
}

// toError moves the QP to ERR: the failed WQE (if any) completes with
// status, every other outstanding work request completes with a flush
// error (IBA 10.3.1.7).
func (q *QP) toError(failed *sendWQE, status cq.Status) {
	if q.state == Err {
		return
	}
	q.state = Err
	q.rtoTimer.Stop()
	q.rnrTimer.Stop()
	q.flushTx() // a NAK queued just before the error still goes out
	q.resp.outq = q.resp.outq[:0]
	q.resp.outHead = 0
	for q.sqHead != q.sqTail {
		w := q.sqAt(q.sqHead)
		st := cq.WRFlushErr
		if w == failed {
			st = status
		}
		q.retire(st)
	}
	if q.resp.haveWQE {
		q.completeRecv(&q.resp.rwqe, cq.WRFlushErr, 0, 0, 0, false)
		q.resp.haveWQE = false
	}
	for {
		w, ok := q.rq.pop()
		if !ok {
			break
		}
		q.completeRecv(&w, cq.WRFlushErr, 0, 0, 0, false)
	}
	if q.srq != nil && q.env.Event != nil {
		// IBA 11.6.3.2: a QP with an SRQ reports the last WQE it will take.
		q.env.Event(Event{Type: EventQPLastWQEReached, QP: q})
	}
}

// fatal moves the QP to ERR for a reason no work request reports, raising
// an affiliated asynchronous event.
func (q *QP) fatal(ev EventType, err error) {
	q.toError(nil, cq.WRFlushErr)
	if q.env.Event != nil {
		q.env.Event(Event{Type: ev, QP: q, Err: err})
	}
}

// sqAt returns the send WQE at ring counter i.
func (q *QP) sqAt(i uint32) *sendWQE { return &q.sq[i%uint32(len(q.sq))] }

// retire completes the WQE at the head of the send queue.
func (q *QP) retire(st cq.Status) {
	w := q.sqAt(q.sqHead)
	if w.isReadOrAtomic() && w.state != wqePosted {
		q.req.rdOut--
	}
	if w.signaled || st != cq.Success {
		wc := cq.WC{WRID: w.wr.WRID, Status: st, Opcode: w.wcOpcode(), ByteLen: w.length, QPNum: q.qpn}
		q.pushCQ(q.sendCQ, &wc, false)
	}
	if st == cq.Success {
		switch w.wr.Opcode {
		case WRSend, WRSendWithImm, WRSendWithInv:
			q.env.Counters.RDMASends.Add(1)
		}
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
func (q *QP) pushCQ(c *cq.CQ, wc *cq.WC, solicited bool) {
	if !c.Push(wc, solicited) && q.state != Err {
		q.state = Err // flushing into a full CQ would only lose more
		q.rtoTimer.Stop()
		q.rnrTimer.Stop()
		if q.env.Event != nil {
			q.env.Event(Event{Type: EventQPFatal, QP: q, Err: cq.ErrOverrun})
		}
	}
}

// completeRecv posts a receive completion.
func (q *QP) completeRecv(w *recvWQE, st cq.Status, op cq.Opcode, byteLen uint32, flags cq.Flags, solicited bool) {
	wc := cq.WC{WRID: w.wrID, Status: st, Opcode: op, ByteLen: byteLen, QPNum: q.qpn, Flags: flags}
	if st == cq.WRFlushErr {
		wc.Opcode, wc.ByteLen, wc.Flags = cq.OpRecv, 0, 0
	}
	q.pushCQ(q.recvCQ, &wc, solicited)
}

// outstanding reports whether sent packets await acknowledgement.
func (q *QP) outstanding() bool {
	return q.typ == RC && (q.comp.psn != q.req.hiPSN || q.sqHead != q.req.cur)
}

// checkDrained raises the SQ drained event once the draining QP has no
// outstanding work (IBA 10.3.1.4).
func (q *QP) checkDrained() {
	if q.state == SQD && q.req.drainNotify && !q.outstanding() {
		q.req.drainNotify = false
		if q.env.Event != nil {
			q.env.Event(Event{Type: EventSQDrained, QP: q})
		}
	}
}

// rqueue is a QP's own receive queue.
type rqueue struct {
	ring       []recvWQE
	sges       []mr.SGE
	maxSGE     uint32
	head, tail uint32
}

func (r *rqueue) init(depth, maxSGE uint32) {
	r.ring = make([]recvWQE, depth)
	r.sges = make([]mr.SGE, depth*maxSGE)
	r.maxSGE = maxSGE
}

func (r *rqueue) reset() { r.head, r.tail = 0, 0 }

func (r *rqueue) len() uint32 { return r.tail - r.head }

func (r *rqueue) push(wr *RecvWR) error {
	if len(r.ring) == 0 {
		return invalid("QP has no receive queue")
	}
	if r.len() == uint32(len(r.ring)) {
		return fmt.Errorf("%w: receive queue holds %d WRs", ErrNoMem, len(r.ring))
	}
	if uint32(len(wr.SGL)) > r.maxSGE {
		return invalid("%d SGEs exceed max_recv_sge %d", len(wr.SGL), r.maxSGE)
	}
	total, ok := sgeTotal(wr.SGL)
	if !ok {
		return invalid("receive buffers exceed 2^31 bytes")
	}
	slot := r.tail % uint32(len(r.ring))
	sgl := r.sges[slot*r.maxSGE : slot*r.maxSGE+uint32(len(wr.SGL))]
	copy(sgl, wr.SGL)
	r.ring[slot] = recvWQE{wrID: wr.WRID, sgl: sgl, length: total}
	r.tail++
	return nil
}

func (r *rqueue) pop() (recvWQE, bool) {
	if r.head == r.tail {
		return recvWQE{}, false
	}
	w := r.ring[r.head%uint32(len(r.ring))]
	r.head++
	return w, true
}

// PostRecv posts a receive work request (ibv_post_recv).
func (q *QP) PostRecv(wr *RecvWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.postRecv(wr)
}

// PostRecvList posts several receive work requests; on failure it reports
// which one failed and posts none after it.
func (q *QP) PostRecvList(wrs []RecvWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range wrs {
		if err := q.postRecv(&wrs[i]); err != nil {
			return &PostError{Index: i, Err: err}
		}
	}
	return nil
}

func (q *QP) postRecv(wr *RecvWR) error {
	if q.srq != nil {
		return invalid("QP uses an SRQ: post receives to the SRQ")
	}
	if q.state == Reset || q.destroyed {
		return fmt.Errorf("%w: post_recv in %v", ErrState, q.state)
	}
	if err := q.rq.push(wr); err != nil {
		return err
	}
	if q.state == Err {
		w, _ := q.rq.pop()
		q.completeRecv(&w, cq.WRFlushErr, 0, 0, 0, false)
	}
	return nil
}

// PostSend posts a send work request (ibv_post_send).
func (q *QP) PostSend(wr *SendWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.postSend(wr); err != nil {
		return err
	}
	q.run()
	return nil
}

// PostSendList posts several send work requests; on failure it reports
// which one failed and posts none after it.
func (q *QP) PostSendList(wrs []SendWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	var err error
	for i := range wrs {
		if e := q.postSend(&wrs[i]); e != nil {
			err = &PostError{Index: i, Err: e}
			break
		}
	}
	q.run()
	return err
}

func (q *QP) postSend(wr *SendWR) error {
	switch q.state {
	case RTS, SQD, Err, SQE:
	default:
		return fmt.Errorf("%w: post_send in %v", ErrState, q.state)
	}
	if q.destroyed {
		return fmt.Errorf("%w: QP destroyed", ErrState)
	}
	if q.sqTail-q.sqHead == uint32(len(q.sq)) {
		return fmt.Errorf("%w: send queue holds %d WRs", ErrNoMem, len(q.sq))
	}
	if err := q.checkWR(wr); err != nil {
		return err
	}
	slot := q.sqTail % uint32(len(q.sq))
	w := &q.sq[slot]
	*w = sendWQE{wr: *wr, signaled: q.sigAll || wr.Flags&Signaled != 0}
	n := uint32(len(wr.SGL))
	w.wr.SGL = q.sgeStore[slot*q.cap.MaxSendSGE : slot*q.cap.MaxSendSGE+n]
	copy(w.wr.SGL, wr.SGL)
	w.length, _ = sgeTotal(wr.SGL)
	if wr.Flags&Inline != 0 && w.length > 0 {
		buf := q.inlineStore[slot*q.cap.MaxInlineData : slot*q.cap.MaxInlineData+w.length]
		if err := q.gather(w.wr.SGL, nil, 0, buf); err != nil {
			return fmt.Errorf("%w: inline data: %v", ErrInvalid, err)
		}
		w.inline = buf
	}
	if q.typ == UD {
		w.outer = wr.AH.outer
		w.outer.SrcPort = q.srcPort
		w.dqpn = wr.RemoteQPN
		w.qkey = wr.RemoteQKey
		if w.qkey&0x80000000 != 0 {
			// IBA 10.2.5: a Q_Key with its high bit set means the QP's own Q_Key.
			w.qkey = q.attr.QKey
		}
	}
	q.sqTail++
	if q.state == Err || q.state == SQE {
		// Posting to a QP whose send queue is in error flushes the request,
		// as rxe and HCAs do.
		for q.sqHead != q.sqTail {
			q.retire(cq.WRFlushErr)
		}
	}
	return nil
}

// checkWR validates a send work request against the QP (ibv_post_send's EINVAL).
func (q *QP) checkWR(wr *SendWR) error {
	if uint32(len(wr.SGL)) > q.cap.MaxSendSGE {
		return invalid("%d SGEs exceed max_send_sge %d", len(wr.SGL), q.cap.MaxSendSGE)
	}
	total, ok := sgeTotal(wr.SGL)
	if !ok {
		return invalid("message exceeds 2^31 bytes")
	}
	switch q.typ {
	case UD:
		if wr.Opcode != WRSend && wr.Opcode != WRSendWithImm {
			return invalid("%v is not a UD operation", wr.Opcode)
		}
		if wr.AH == nil {
			return invalid("UD send without an address handle")
		}
		if wr.AH.pd != q.pd {
			return invalid("address handle belongs to another protection domain")
		}
		if int(total) > q.mtu {
			return invalid("UD message of %d bytes exceeds the MTU %d", total, q.mtu)
		}
	case UC:
		switch wr.Opcode {
		case WRSend, WRSendWithImm, WRRDMAWrite, WRRDMAWriteWithImm:
		default:
			return invalid("%v is not a UC operation", wr.Opcode)
		}
	case RC:
		switch wr.Opcode {
		case WRSend, WRSendWithImm, WRSendWithInv, WRRDMAWrite, WRRDMAWriteWithImm:
		case WRRDMARead:
			if q.attr.MaxRdAtomic == 0 {
				return invalid("RDMA READ on a QP with max_rd_atomic 0")
			}
		case WRAtomicCmpAndSwp, WRAtomicFetchAndAdd:
			if q.attr.MaxRdAtomic == 0 {
				return invalid("atomic on a QP with max_rd_atomic 0")
			}
			if total != 8 {
				return invalid("atomic operation needs one 8-byte buffer, not %d bytes", total)
			}
			if wr.RemoteAddr&7 != 0 {
				return invalid("atomic remote address 0x%x is not 8-byte aligned", wr.RemoteAddr)
			}
		default:
			return invalid("%v is not supported", wr.Opcode)
		}
	}
	if wr.Flags&Inline != 0 {
		if total > q.cap.MaxInlineData {
			return invalid("inline data of %d bytes exceeds max_inline_data %d", total, q.cap.MaxInlineData)
		}
		if wr.Opcode == WRRDMARead || wr.Opcode == WRAtomicCmpAndSwp || wr.Opcode == WRAtomicFetchAndAdd {
			return invalid("%v cannot be inline", wr.Opcode)
		}
	}
	return nil
}

// gather copies message bytes [off, off+len(dst)) from an SGL (or from the
// inline copy) into dst, checking each lkey.
func (q *QP) gather(sgl []mr.SGE, inline []byte, off uint32, dst []byte) error {
	if inline != nil {
		copy(dst, inline[off:])
		return nil
	}
	for _, s := range sgl {
		if len(dst) == 0 {
			return nil
		}
		if off >= s.Length {
			off -= s.Length
			continue
		}
		n := min(s.Length-off, uint32(len(dst)))
		span, err := q.env.Keys.Local(q.pd, s.LKey, s.Addr+uint64(off), n, 0)
		if err != nil {
			return err
		}
		copy(dst, span.B)
		span.Release()
		dst = dst[n:]
		off = 0
	}
	if len(dst) != 0 {
		return fmt.Errorf("SGL shorter than the message")
	}
	return nil
}

// scatter copies src into an SGL at message offset off; the memory must
// grant local write.
func (q *QP) scatter(sgl []mr.SGE, off uint32, src []byte) error {
	for _, s := range sgl {
		if len(src) == 0 {
			return nil
		}
		if off >= s.Length {
			off -= s.Length
			continue
		}
		n := min(s.Length-off, uint32(len(src)))
		span, err := q.env.Keys.Local(q.pd, s.LKey, s.Addr+uint64(off), n, mr.LocalWrite)
		if err != nil {
			return err
		}
		copy(span.B, src[:n])
		span.Release()
		src = src[n:]
		off = 0
	}
	if len(src) != 0 {
		return errSGLShort
	}
	return nil
}

var errSGLShort = fmt.Errorf("%w: receive buffer too small", ErrInvalid)

// Batch collects the QPs a burst of received packets touched, so that each
// sends one coalesced acknowledgement and one batch of frames at the end of
// the burst rather than one per packet.
type Batch struct {
	qps []*QP
}

// Flush ends the burst.
func (b *Batch) Flush() {
	for i, q := range b.qps {
		q.mu.Lock()
		q.inBatch = false
		q.run()
		q.mu.Unlock()
		b.qps[i] = nil
	}
	b.qps = b.qps[:0]
}

// Receive handles one received packet addressed to the QP. The device has
// verified the ICRC and parsed the packet; f is the frame it came in. The
// QP's replies go out when b is flushed.
func (q *QP) Receive(p bth.Packet, f bth.Frame, b *Batch) {
	q.mu.Lock()
	defer q.mu.Unlock()
	c := q.env.Counters
	switch q.state {
	case RTR, RTS, SQD, SQE:
	default:
		c.BadState.Add(1)
		return
	}
	if q.destroyed {
		return
	}
	h := p.BTH()
	// IBA 9.6.1.1 / C9-40: the P_Key must match the QP's partition (the low
	// 15 bits; at least one side a full member).
	if k := h.PKey(); k&0x7fff != q.pkey&0x7fff || k&0x8000 == 0 && q.pkey&0x8000 == 0 {
		c.BadPKey.Add(1)
		return
	}
	if q.typ != UD {
		// Connected QPs take packets only from their peer, as Linux rxe does.
		if src, _ := srcAddr(f); src != q.outer.Dst {
			c.BadSource.Add(1)
			return
		}
	}
	if p.Info().IsRequest() {
		q.handleRequest(p, f)
	} else if q.typ == RC && (q.state == RTS || q.state == SQD || q.state == SQE) {
		q.handleResponse(p)
	} else {
		c.BadState.Add(1)
	}
	if !q.inBatch {
		q.inBatch = true
		b.qps = append(b.qps, q)
	}
}
