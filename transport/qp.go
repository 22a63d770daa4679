package transport

import (
	"fmt"
	"sync"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/dcqcn"
	"github.com/goroce/goroce/inet"
	"github.com/goroce/goroce/internal/closed"
	"github.com/goroce/goroce/nic"
)

// env is what a QP needs from the device it lives on; the device fills it
// in and passes it to newQP and newAH.
type env struct {
	Link nic.Link // where packets go
	// Counters are the device's protocol counters, which its QPs count.
	Counters *Counters
	// GID returns the local GID at a GID-table index.
	GID func(index uint8) (bth.GID, bool)
	// Schedule asks the device to run the QP later, from its worker: the
	// QP has more to send than one run may do at once.
	Schedule func(*QP)
	// Event delivers an asynchronous event affiliated with a QP, and its
	// cause when known (nil: not reported).
	Event func(q *QP, e EventType, err error)
	// Died, if set, learns that a QP entered ERR and why: why is the QP's
	// *Death, called under the QP's lock (so it must not call back into
	// the QP).
	Died func(q *QP, why error)
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
	// Clock drives the QP's timers (nil: clock.Real).
	Clock clock.Clock
	// ECT marks the QP's packets ECN-capable, ECT(0), as mlx5 does with
	// congestion control on (congestion.go).
	ECT bool
	// CC, if set, is DCQCN on: the QP answers CE-marked packets with
	// CNPs and paces its requests by the CNPs it receives, with these
	// parameters; nil is off (CNPs received are counted and ignored).
	CC *dcqcn.Params
	// RxQueues is how many receive queues the device's link has: a QP's
	// packets arrive on queue nic.QueueOf(its QPN, RxQueues).
	RxQueues int
}

// rxQueue returns the receive queue the QP's packets arrive on.
func (q *QP) rxQueue() int { return nic.QueueOf(q.qpn, max(1, q.env.RxQueues)) }

// runBudget bounds the packets one run of a QP builds before it yields, so
// that a long message does not hold a goroutine (and the QP lock) for long.
const runBudget = 64

// ackReqEvery is how often a long RC message asks for an acknowledgement,
// as Linux rxe does, so the requester's window keeps moving.
const ackReqEvery = 64

// QP is a queue pair. Its methods are safe for concurrent use.
type QP struct {
	env    *env
	pd     *PD
	typ    QPType
	qpn    uint32
	sendCQ *CQ
	recvCQ *CQ
	srq    *SRQ  // XRCTgt: the XRC SRQ the request in hand named
	xrcd   *XRCD // XRCTgt: its domain
	sigAll bool
	cap    QPCap

	mu      sync.Mutex
	state   QPState
	attr    QPAttr
	mtu     int
	outer   bth.Outer // RC/UC: the path to the peer
	srcPort uint16
	pkey    uint16

	// Send queue: a ring of WQEs addressed by free-running counters,
	// allocated by the first post (sqAlloc).
	sq          []sendWQE
	sqHead      uint32 // oldest WQE not yet completed
	sqTail      uint32 // next free slot
	sgeStore    []SGE
	inlineStore []byte

	// recvSGE holds the SGL of the receive WQE a SEND in progress fills,
	// copied out of the RQ or SRQ so the slot can be reused meanwhile:
	// as long as the longest SGL the QP can be given, no longer. Made
	// by the first receive WQE taken (takeRecvWQE).
	recvSGE []SGE

	// Receive queue, when the QP has no SRQ; its ring is allocated by
	// the first post (recvRing.put).
	rq recvRing

	req  requester
	resp responder
	comp completer

	tx        *txBatch   // frames queued for the link; nil when none (txPool)
	txEpoch   uint32     // counts the batches given back (dropTx), so that run knows whether its batch is still queued
	txq       *txBatch   // batches waiting to be sent outside mu, oldest first (unlock)
	txqTail   *txBatch   // the last of txq
	txBusy    bool       // a goroutine is sending txq, outside mu
	txDefer   txDeferral // which batch flushTx leaves to unlock
	txDone    *sync.Cond // signalled when txBusy ends; nil until a goroutine waits on it
	scheduled bool       // queued on the device worker
	inBatch   bool       // touched by the receive burst in progress
	clock     clock.Clock
	rtoTimer  clock.Timer // nil until the first armRTO
	rnrTimer  clock.Timer // nil until the first RNR NAK
	destroyed bool
	closed    bool // the device closed (shutdown); destroyed is set too

	trace *traceRing // the last packets, for death; nil until the first
	death *Death     // why the QP entered ERR; nil while it has not

	cc ccState // congestion control (congestion.go)
}

// newQP creates a QP in the RESET state. The device chooses qpn.
func newQP(env *env, pd *PD, qpn uint32, ia QPInitAttr) (*QP, error) {
	switch ia.Type {
	case RC, UC, UD, XRCIni, XRCTgt:
	default:
		return nil, invalid("unsupported QP type %v", ia.Type)
	}
	if err := ia.checkXRC(pd); err != nil {
		return nil, err
	}
	if ia.Type == XRCTgt {
		return newXRCTgt(env, qpn, ia.XRCD)
	}
	if ia.Type != XRCIni && (ia.SendCQ == nil || ia.RecvCQ == nil) {
		return nil, invalid("a QP needs a send CQ and a receive CQ")
	}
	c := ia.Cap
	if err := c.check(); err != nil {
		return nil, err
	}
	if ia.Type != XRCIni && ia.SRQ == nil && c.MaxRecvWR == 0 {
		return nil, invalid("a QP without an SRQ needs max_recv_wr > 0")
	}
	if ia.SRQ != nil && ia.SRQ.pd != pd {
		return nil, invalid("SRQ belongs to another protection domain")
	}
	if ia.SRQ != nil && ia.SRQ.xrcd != nil {
		return nil, invalid("an XRC SRQ takes no QP: XRC target QPs of its domain reach it by number")
	}
	c.MaxSendSGE = max(c.MaxSendSGE, 1)
	if ia.Type != XRCIni {
		c.MaxRecvSGE = max(c.MaxRecvSGE, 1)
	}
	// The QP's queues and timers are allocated when first used, not
	// here: a program may create many QPs and use few (the issue's
	// 100,000 idle QPs, 7.6 KiB each when they held their rings from
	// creation, now under 1 KiB; TestManyQPsHeap).
	q := &QP{env: env, pd: pd, typ: ia.Type, qpn: qpn, sendCQ: ia.SendCQ, recvCQ: ia.RecvCQ,
		srq: ia.SRQ, sigAll: ia.SigAll, cap: c, pkey: bth.DefaultPKey}
	switch {
	case ia.Type == XRCIni: // no receive queue
	case ia.SRQ == nil:
		q.rq = newRecvRing(c.MaxRecvWR, c.MaxRecvSGE)
	default:
		if err := ia.SRQ.attach(); err != nil {
			return nil, err // nothing else failed or holds anything yet
		}
	}
	q.initCommon(env)
	pd.hold()
	return q, nil
}

// newXRCTgt creates an XRC target QP in x: no PD, CQ or queue of its own
// until a request names the XRC SRQ that supplies them (xrcTarget).
func newXRCTgt(env *env, qpn uint32, x *XRCD) (*QP, error) {
	if err := x.attach(); err != nil {
		return nil, err
	}
	q := &QP{env: env, typ: XRCTgt, qpn: qpn, xrcd: x, pkey: bth.DefaultPKey}
	q.initCommon(env)
	return q, nil
}

// sqAlloc allocates the send queue for q.cap, at the QP's first post: a
// power of two long for the same reason as recvRing, since sqHead and
// sqTail are free-running counts and a slot is a count masked (sqSlot).
// Until then sqHead == sqTail, so nothing reads a slot.
func (q *QP) sqAlloc() {
	n := ringLen(q.cap.MaxSendWR)
	q.sq = make([]sendWQE, n)
	q.sgeStore = make([]SGE, n*q.cap.MaxSendSGE)
	if q.cap.MaxInlineData > 0 {
		q.inlineStore = make([]byte, n*q.cap.MaxInlineData)
	}
}

// initCommon sets up what every QP has: its UDP source port and clock.
func (q *QP) initCommon(env *env) {
	q.srcPort = env.Link.SrcPort(q.qpn)
	q.clock = env.Clock
	if q.clock == nil {
		q.clock = clock.Real{}
	}
}

// stopTimers stops the QP's timers, those it has made.
func (q *QP) stopTimers() {
	if q.rtoTimer != nil {
		q.rtoTimer.Stop()
	}
	if q.rnrTimer != nil {
		q.rnrTimer.Stop()
	}
}

// check names the first capability that is zero where one is needed or
// exceeds the device's limit (ibv_create_qp's EINVAL).
func (c *QPCap) check() error {
	if c.MaxSendWR == 0 {
		return invalid("max_send_wr is 0: a QP needs room for at least one send WR")
	}
	for _, f := range []struct {
		name     string
		v, limit uint32
		limitOf  string
	}{
		{"max_send_wr", c.MaxSendWR, MaxWR, "max_qp_wr"},
		{"max_recv_wr", c.MaxRecvWR, MaxWR, "max_qp_wr"},
		{"max_send_sge", c.MaxSendSGE, MaxSGE, "max_sge"},
		{"max_recv_sge", c.MaxRecvSGE, MaxSGE, "max_sge"},
		{"max_inline_data", c.MaxInlineData, MaxInline, "max_inline"},
	} {
		if f.v > f.limit {
			return invalid("%s %d exceeds the device's %s %d", f.name, f.v, f.limitOf, f.limit)
		}
	}
	return nil
}

// QPN returns the QP number.
func (q *QP) QPN() uint32 { return q.qpn }

// Type returns the transport service.
func (q *QP) Type() QPType { return q.typ }

// PD returns the protection domain.
func (q *QP) PD() *PD { return q.pd }

// State returns the current state.
func (q *QP) State() QPState {
	q.mu.Lock()
	defer q.unlock()
	return q.state
}

// String names the QP for messages: its type and number ("RC QP 0x000011").
func (q *QP) String() string { return fmt.Sprintf("%v QP 0x%06x", q.typ, q.qpn) }

// Query returns the QP's attributes and its creation attributes, as ibv_query_qp.
func (q *QP) Query() (QPAttr, QPInitAttr) {
	q.mu.Lock()
	defer q.unlock()
	a := q.attr
	a.State, a.CurState = q.state, q.state
	a.Cap = q.cap
	a.SQDraining = q.state == SQD && q.outstanding()
	if q.typ != UD {
		a.SQPSN = uint32(q.req.psn)
		a.RQPSN = uint32(q.resp.epsn)
	}
	if q.typ == XRCTgt {
		return a, QPInitAttr{Type: q.typ, XRCD: q.xrcd}
	}
	return a, QPInitAttr{Type: q.typ, SendCQ: q.sendCQ, RecvCQ: q.recvCQ, SRQ: q.srq, Cap: q.cap, SigAll: q.sigAll}
}

// destroy destroys the QP (ibv_destroy_qp): the device's DestroyQP calls
// it once it has removed the QP from its table. Outstanding work requests
// are dropped without completions.
func (q *QP) destroy() error {
	q.mu.Lock()
	defer q.unlock()
	if q.deviceClosed() {
		return errQPClosed("destroy_qp")
	}
	if q.destroyed {
		return nil
	}
	// The receive goroutine may have released the lock with that ACK in
	// hand, still to send (unlock): destroyed meanwhile, the program could
	// exit before it leaves, and the peer's send would fail as below.
	q.waitDeparted()
	// A consumer may destroy the QP as soon as its last receive completes,
	// while that message's ACK still waits for the end of the receive
	// burst (endBurst). Send it: rxe acknowledges in the same responder
	// run that completes the receive, HCAs in hardware, so the peer's send
	// completes; dropped, the peer retries into a destroyed QP and fails.
	if q.typ.reliable() && q.state != Reset && q.state != Init && q.state != Err {
		q.sendQueuedAcks()
		q.flushTx()
	}
	q.destroyed = true
	q.state = Reset
	q.stopTimers()
	q.ccReset()
	q.dropTx()
	if q.typ == XRCTgt {
		q.xrcd.detach() // its SRQ and PD are borrowed, per request
		return nil
	}
	if q.srq != nil {
		q.srq.users.Add(-1)
	}
	q.pd.release()
	return nil
}

// shutdown ends the QP when its device closes, as if it entered ERR: every
// outstanding work request completes with a flush error (IBA 10.3.1.7),
// then the QP stops, in ERR, and every later call returns an error
// wrapping ErrClosed. The device calls it once its receive path
// and worker have stopped, so nothing is sent.
func (q *QP) shutdown() {
	q.mu.Lock()
	defer q.unlock()
	if q.closed || q.destroyed {
		return
	}
	q.dropTx()
	q.resp.outq = q.resp.outq[:0]
	q.resp.outHead = 0
	q.toError(nil, WRFlushErr, why{cause: CauseDeviceClosed})
	q.dropQueued() // toError's flush too: nothing is sent once the device closed
	q.closed, q.destroyed = true, true
}

// deviceClosed reports whether the device closed: shutdown ran, or, for a
// QP destroyed before Close and so not shut down, the key table says so.
func (q *QP) deviceClosed() bool {
	if q.typ == XRCTgt {
		return q.closed || q.xrcd.closed()
	}
	return q.closed || q.pd.closed()
}

// errClosed wraps the closed device's error for call op.
func errQPClosed(op string) error { return fmt.Errorf("qp: %s: %w", op, closed.Err) }

// reset returns the QP to RESET: queues emptied, no completions (IBA 10.3.1.1).
func (q *QP) reset() {
	q.stopTimers()
	q.ccReset()
	q.dropTx()
	q.sqHead, q.sqTail = 0, 0
	q.rq.reset()
	q.req = requester{}
	q.resp = responder{}
	q.comp = completer{}
	q.attr = QPAttr{}
	q.mtu = 0
	q.state = Reset
	q.trace, q.death = nil, nil
	if q.typ == XRCTgt {
		q.srq, q.pd, q.recvCQ = nil, nil, nil
	}
}

// runScheduled does the QP's pending work; the device worker calls it
// after Schedule.
func (q *QP) runScheduled() {
	q.mu.Lock()
	q.scheduled = false
	q.run()
	q.unlock()
}

// run sends what the responder and requester have ready, up to a budget,
// and asks to be run again if more remains. Called with q.mu held.
func (q *QP) run() {
	if q.destroyed {
		return
	}
	budget := runBudget
	more := false
	mark := q.txMark()
	if n, m := q.respond(budget); m {
		more = true
		budget -= n
	} else {
		budget -= n
	}
	ack := q.loneAck(mark)
	if budget > 0 {
		if _, m := q.request(budget); m {
			more = true
		}
	} else if q.requestReady() {
		more = true
	}
	if ack.i >= 0 {
		q.ackBehind(ack)
	}
	q.flushTx()
	if more && !q.scheduled && q.env.Schedule != nil {
		q.scheduled = true
		q.env.Schedule(q)
	}
}

// endBurst ends the burst of received packets the QP joined in receive:
// it sends one coalesced acknowledgement and one batch of frames for the
// whole burst rather than one per packet.
func (q *QP) endBurst() {
	q.mu.Lock()
	q.waitDeparted()
	q.inBatch = false
	q.txDefer = deferAcks
	q.run()
	q.txDefer = deferNone
	q.unlock()
}

// receive handles one received packet addressed to the QP. The device has
// verified the ICRC and parsed the packet; f is the frame it came in. The
// QP's replies wait for endBurst, which the device calls once for every
// QP for which receive reported joined, after the burst's last packet.
func (q *QP) receive(p bth.Packet, f bth.Frame) (joined bool) {
	q.mu.Lock()
	defer q.unlock()
	q.record(false, f.L3())
	c := q.env.Counters
	// Header validation (IBA 9.6; for UC and UD, C9-165: a packet with an
	// invalid header field is dropped silently): the opcode's transport
	// must be the QP's service, checked before anything else as rxe's
	// check_type_state does. A UC SEND to an RC QP, an XRC or RD ACK to an
	// RC requester, an RC ACK to a UC QP are dropped silently. rxe counts
	// this drop nowhere (6.1 and 6.12 have no hw_counter for it); goroce
	// counts it as malformed, its counter for failed header validation.
	if p.Info().Transport != q.typ.transport() {
		c.Malformed.Add(1)
		return
	}
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
		if f.SrcAddr() != q.outer.Dst {
			c.BadSource.Add(1)
			return
		}
	}
	if inet.ECN(f.L3()) == inet.CE {
		q.congestionExperienced(p, f)
	}
	if req := p.Info().IsRequest(); q.typ == XRCIni && req || q.typ == XRCTgt && !req {
		// An XRC initiator has no responder and a target no requester
		// (annex A14): a request to the one, a response to the other, is
		// for a QP half that does not exist.
		c.XRCMisdirected.Add(1)
		return
	}
	if p.Info().IsRequest() {
		q.handleRequest(p, f)
	} else if q.state == RTS || q.state == SQD || q.state == SQE {
		// Only RC and XRC have responses: the transport check let no other through.
		q.handleResponse(p)
	} else {
		c.BadState.Add(1)
	}
	if !q.inBatch {
		q.inBatch = true
		return true
	}
	return false
}
