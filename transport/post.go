package transport

import (
	"fmt"

	"github.com/goroce/goroce/bth"
)

// Posting work requests: the receive queue, PostSend and PostRecv with the
// checks ibv_post_send and ibv_post_recv make, and the copies between
// messages and scatter/gather lists.

// PostRecv posts a receive work request (ibv_post_recv).
func (q *QP) PostRecv(wr *RecvWR) error {
	q.mu.Lock()
	defer q.unlock()
	return q.postRecv(wr)
}

// PostRecvList posts several receive work requests; on failure it reports
// which one failed and posts none after it.
func (q *QP) PostRecvList(wrs []RecvWR) error {
	q.mu.Lock()
	defer q.unlock()
	for i := range wrs {
		if err := q.postRecv(&wrs[i]); err != nil {
			return &PostError{Index: i, Err: err}
		}
	}
	return nil
}

func (q *QP) postRecv(wr *RecvWR) error {
	if q.deviceClosed() {
		return errQPClosed("post_recv")
	}
	if q.destroyed {
		return errDestroyed
	}
	if q.typ == XRCIni || q.typ == XRCTgt {
		return invalid("%v QP has no receive queue: post receives to an XRC SRQ", q.typ)
	}
	if q.srq != nil {
		return invalid("QP uses an SRQ: post receives to the SRQ")
	}
	if q.state == Reset {
		return fmt.Errorf("%w: post_recv in %v", ErrState, q.state)
	}
	if err := checkSGL(q.pd, wr.SGL, LocalWrite); err != nil {
		return err
	}
	total, err := q.rq.check(wr, "receive queue")
	if err != nil {
		return err
	}
	q.rq.put(wr, total)
	if q.state == Err {
		w, _ := q.rq.pop(nil)
		q.completeRecv(&w, WRFlushErr, 0, 0, 0, false)
	}
	return nil
}

// PostSend posts a send work request (ibv_post_send). What the window
// allows leaves at once, on the caller's goroutine; on an RC QP with 16
// messages or more in flight the request waits instead for the next
// acknowledgement, which sends it with the others posted meanwhile, or
// for 15 more posts (the clocked_posts counter; README, "Posting into a
// stream").
func (q *QP) PostSend(wr *SendWR) error {
	q.mu.Lock()
	defer q.unlock()
	if err := q.postSend(wr, false); err != nil {
		return err
	}
	q.txDefer = deferPost
	q.doorbell()
	q.txDefer = deferNone
	return nil
}

// BindMW binds a type 1 memory window (ibv_bind_mw): it posts a bind
// work request on the QP, which executes in send-queue order and
// completes as OpBindMW (with MWBindErr, the QP then in error, if
// it breaks a rule: see WRBindMW), and returns the rkey the window
// will answer to once it has executed: the window's key with its
// variant advanced, so the old rkey stops working. A bind of length 0
// unbinds the window. wrID and flags are the work request's (Signaled,
// Fence).
func (q *QP) BindMW(w *MW, info BindInfo, wrID uint64, flags SendFlags) (uint32, error) {
	if w == nil {
		return 0, invalid("bind_mw without a memory window")
	}
	q.mu.Lock()
	defer q.unlock()
	if err := q.canPostSend(); err != nil {
		return 0, err
	}
	key, err := w.nextType1Key()
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	wr := SendWR{WRID: wrID, Opcode: WRBindMW, Flags: flags &^ Inline, Bind: MWBindWR{MW: w, RKey: key, Info: info}}
	if err := q.postSend(&wr, true); err != nil {
		return 0, err
	}
	q.run()
	return key, nil
}

// PostSendList posts several send work requests; on failure it reports
// which one failed and posts none after it.
func (q *QP) PostSendList(wrs []SendWR) error {
	q.mu.Lock()
	defer q.unlock()
	var err error
	for i := range wrs {
		if e := q.postSend(&wrs[i], false); e != nil {
			err = &PostError{Index: i, Err: e}
			break
		}
	}
	q.txDefer = deferPost
	q.doorbell()
	q.txDefer = deferNone
	return err
}

// canPostSend checks that the QP takes send work requests now.
func (q *QP) canPostSend() error {
	if q.deviceClosed() {
		return errQPClosed("post_send")
	}
	if q.destroyed {
		return errDestroyed
	}
	if q.typ == XRCTgt {
		return invalid("XRC target QP has no send queue")
	}
	switch q.state {
	case RTS, SQD, Err, SQE:
	default:
		return fmt.Errorf("%w: post_send in %v", ErrState, q.state)
	}
	if q.sqTail-q.sqHead == q.cap.MaxSendWR {
		return fmt.Errorf("%w: send queue holds %d WRs", ErrNoMem, q.cap.MaxSendWR)
	}
	return nil
}

// postSend queues wr; type1 marks QP.BindMW's bind of a type 1 window.
func (q *QP) postSend(wr *SendWR, type1 bool) error {
	if err := q.canPostSend(); err != nil {
		return err
	}
	if err := q.checkWR(wr, type1); err != nil {
		return err
	}
	if q.sq == nil {
		q.sqAlloc()
	}
	slot := q.sqSlot(q.sqTail)
	w := &q.sq[slot]
	*w = sendWQE{wr: *wr, signaled: q.sigAll || wr.Flags&Signaled != 0, type1: type1}
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
			q.retire(WRFlushErr)
		}
	}
	return nil
}

// checkWR validates a send work request against the QP (ibv_post_send's EINVAL).
func (q *QP) checkWR(wr *SendWR, type1 bool) error {
	d := wrOpOf(wr.Opcode)
	if d != nil && d.local {
		return q.checkLocalWR(wr, type1)
	}
	if uint32(len(wr.SGL)) > q.cap.MaxSendSGE {
		return invalid("%d SGEs exceed max_send_sge %d", len(wr.SGL), q.cap.MaxSendSGE)
	}
	total, ok := sgeTotal(wr.SGL)
	if !ok {
		return invalid("message exceeds 2^31 bytes")
	}
	if d == nil || !d.sentOn(q.typ.transport()) {
		// What each transport carries is table 38's: UD has SENDs only, UC
		// no READ, atomic or invalidate.
		return invalid("%v is not an operation of %v", wr.Opcode, q.typ.transport())
	}
	switch q.typ {
	case UD:
		if wr.AH == nil {
			return invalid("UD send without an address handle")
		}
		if wr.AH.destroyed.Load() {
			return invalid("address handle destroyed")
		}
		if wr.AH.pd != q.pd {
			return invalid("address handle belongs to another protection domain")
		}
		if int(total) > q.mtu {
			return invalid("UD message of %d bytes exceeds the MTU %d", total, q.mtu)
		}
	case RC, XRCIni:
		if q.typ == XRCIni && (wr.RemoteSRQN == 0 || wr.RemoteSRQN > bth.PSNMask) {
			return invalid("XRC send with remote SRQN 0x%x: it must name the target's XRC SRQ (1..2^24-1)", wr.RemoteSRQN)
		}
		switch wr.Opcode {
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
		}
	}
	need := Access(0)
	if d.readsBack() {
		need = LocalWrite // the response lands in the local buffer
	}
	if err := checkSGL(q.pd, wr.SGL, need); err != nil {
		return err
	}
	if wr.Flags&Inline != 0 {
		if total > q.cap.MaxInlineData {
			return invalid("inline data of %d bytes exceeds max_inline_data %d", total, q.cap.MaxInlineData)
		}
		if d.readsBack() {
			return invalid("%v cannot be inline", wr.Opcode)
		}
	}
	return nil
}

// checkLocalWR validates a bind or local invalidate at post time; the
// rules of the window and the region are checked when it executes, as
// rxe does, and a breach completes with an error.
func (q *QP) checkLocalWR(wr *SendWR, type1 bool) error {
	if q.typ != RC && q.typ != UC {
		return invalid("%v is not a %v operation", wr.Opcode, q.typ)
	}
	if wr.Flags&Inline != 0 {
		return invalid("%v cannot be inline", wr.Opcode)
	}
	if wr.Opcode == WRBindMW {
		if wr.Bind.MW == nil {
			return invalid("BIND_MW without a memory window")
		}
		if !type1 && wr.Bind.MW.Type() != MWType2 {
			return invalid("BIND_MW work requests bind type 2 windows; QP.BindMW binds a type 1 window")
		}
	}
	if wr.Opcode == WRRegMR {
		if wr.Reg.MR == nil {
			return invalid("REG_MR without a region")
		}
		if !wr.Reg.MR.Fast() {
			return invalid("REG_MR of a region not allocated for fast registration (mr.PD.AllocFastMR)")
		}
	}
	return nil
}

// errDestroyed is what every call on a destroyed QP returns.
var errDestroyed = fmt.Errorf("%w: QP destroyed", ErrState)

// checkSGL checks each SGE's lkey, protection domain, access and range when
// the work request is posted, so a wrong SGE fails the post that names it
// rather than a completion later. The memory is checked again when it is
// used, since the region may be deregistered in between.
func checkSGL(pd *PD, sgl []SGE, need Access) error {
	for i, s := range sgl {
		if s.Length == 0 {
			continue
		}
		span, err := localSpan(pd, s.LKey, s.Addr, s.Length, need)
		if err != nil {
			return fmt.Errorf("%w: SGE %d (addr 0x%x, length %d, lkey 0x%x): %w", ErrInvalid, i, s.Addr, s.Length, s.LKey, err)
		}
		span.release()
	}
	return nil
}

// gather copies message bytes [off, off+len(dst)) from an SGL (or from the
// inline copy) into dst, checking each lkey.
func (q *QP) gather(sgl []SGE, inline []byte, off uint32, dst []byte) error {
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
		span, err := localSpan(q.pd, s.LKey, s.Addr+uint64(off), n, 0)
		if err != nil {
			return err
		}
		copy(dst, span.b)
		span.release()
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
func (q *QP) scatter(sgl []SGE, off uint32, src []byte) error {
	for _, s := range sgl {
		if len(src) == 0 {
			return nil
		}
		if off >= s.Length {
			off -= s.Length
			continue
		}
		n := min(s.Length-off, uint32(len(src)))
		span, err := localSpan(q.pd, s.LKey, s.Addr+uint64(off), n, LocalWrite)
		if err != nil {
			return err
		}
		copy(span.b, src[:n])
		span.release()
		src = src[n:]
		off = 0
	}
	if len(src) != 0 {
		return errSGLShort
	}
	return nil
}

var errSGLShort = fmt.Errorf("%w: receive buffer too small", ErrInvalid)

// ackClock is how many messages in flight make a post wait for the next
// acknowledgement to send it, and how many waiting posts are sent
// without waiting longer.
const ackClock = 16

// doorbell starts what a post queued. A requester with ackClock messages
// or more sent and not yet acknowledged is streaming: acknowledgements
// are on their way (each message's last packet asks for one), and the
// run each one triggers (endBurst) sends everything posted since in one
// batch, which the link sends in one system call and, for equal packets,
// one GSO message, where sending at each post costs a system call per
// packet. The wait adds nothing to a stream's rate: the messages queue
// behind ackClock others. Once ackClock posts wait, the last one sends
// them all, so that one batch is in flight while the next gathers. A
// post with fewer in flight, the latency case, sends at once, and UC and
// UD, which have no acknowledgements, always do. After a timeout the
// requester has gone back to the oldest message (cur is sqHead again),
// so a post runs and the probe rule (canSend) decides.
func (q *QP) doorbell() {
	if q.typ.reliable() && q.state == RTS && q.req.cur-q.sqHead >= ackClock &&
		q.sqTail-q.req.cur < ackClock && q.req.hiPSN != q.comp.psn {
		q.env.Counters.ClockedPosts.Add(1)
		return
	}
	q.run()
}
