package transport

import (
	"sync"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic"
)

// txBatchMax is how many frames a QP hands the link in one call. An
// acknowledgement into a stream of 64 KiB messages releases two or three
// of them (about 40 packets at MTU 4096): 64 sends them in one system
// call instead of two, which moved 3-6% more across a veth; 128 moved no
// more.
const txBatchMax = 64

// bufPool recycles frame buffers, so a packet costs no allocation.
var bufPool = sync.Pool{New: func() any { return new([nic.BufSize]byte) }}

// txPool recycles send batches. A QP holds one only while it has frames
// queued (within a run or a receive burst) and gives it back when it hands
// them to the link, so an idle QP carries no batch: 1.3 KiB less per QP,
// which is what lets a device hold 100,000 idle QPs at under 2 KiB each.
var txPool = sync.Pool{New: func() any { return new(txBatch) }}

// txBatch holds built frames until they are handed to the link together.
type txBatch struct {
	frames [txBatchMax]nic.Frame
	bufs   [txBatchMax]*[nic.BufSize]byte
	ack    [txBatchMax]bool // the frame is an acknowledgement (ackBehind)
	n      int
	next   *txBatch // the QP's next batch waiting for the link (txq)
}

// acksOnly reports whether the batch holds acknowledgements only.
func (t *txBatch) acksOnly() bool {
	for _, a := range t.ack[:t.n] {
		if !a {
			return false
		}
	}
	return true
}

func (t *txBatch) drop() {
	for i := range t.n {
		bufPool.Put(t.bufs[i])
		t.bufs[i] = nil
		t.frames[i] = nic.Frame{}
		t.ack[i] = false
	}
	t.n = 0
}

// txPos is a position in a QP's queued frames: the batch (txEpoch) and
// the index in it; i < 0 is none.
type txPos struct {
	epoch uint32
	i     int
}

// txMark returns where the next queued frame will go.
func (q *QP) txMark() txPos {
	if q.tx == nil {
		return txPos{q.txEpoch, 0}
	}
	return txPos{q.txEpoch, q.tx.n}
}

// loneAck returns the position of the frame queued since mark if it is
// the only one and an acknowledgement, else i -1.
func (q *QP) loneAck(mark txPos) txPos {
	if q.tx == nil || q.txEpoch != mark.epoch || q.tx.n != mark.i+1 || !q.tx.ack[mark.i] {
		return txPos{i: -1}
	}
	return mark
}

// ackBehind moves the acknowledgement at a, if it is still queued, behind
// the frames queued after it. A run's responder goes first, and in poll
// mode the acknowledgement a burst left open leaves with the reply the
// application posts; behind the reply it can join the reply's UDP GSO
// message as its shorter last segment (nic/udp: a segment no longer than
// the first closes the message), one pass through the kernel on each
// side rather than two. A QP's requests are ordered among themselves by
// PSN, and its responses among themselves; nothing orders one stream
// against the other (rxe's requester and responder tasks interleave them
// freely), so only the packets' order in the batch changes, and the
// acknowledgement goes in the same call to the link.
func (q *QP) ackBehind(a txPos) {
	t := q.tx
	if t == nil || q.txEpoch != a.epoch || a.i >= t.n-1 {
		return // sent already (the batch filled), or nothing came after it
	}
	f, b := t.frames[a.i], t.bufs[a.i]
	copy(t.frames[a.i:t.n-1], t.frames[a.i+1:t.n])
	copy(t.bufs[a.i:t.n-1], t.bufs[a.i+1:t.n])
	copy(t.ack[a.i:t.n-1], t.ack[a.i+1:t.n])
	t.frames[t.n-1], t.bufs[t.n-1], t.ack[t.n-1] = f, b, true
}

// packet is a packet being built in a pooled buffer: a bth.Draft after
// the link's headroom.
type packet struct {
	buf *[nic.BufSize]byte
	bth.Draft
}

// newPacket starts a packet with opcode op and payLen payload bytes; the BTH
// is filled in but for the AckReq and SE bits.
func (q *QP) newPacket(o *bth.Outer, op bth.OpCode, payLen int, psn bth.PSN, destQP uint32) packet {
	buf := bufPool.Get().(*[nic.BufSize]byte)
	d := bth.NewDraft(buf[nic.Headroom:], o, bth.BTHFields{OpCode: op, PKey: q.pkey, DestQP: destQP, PSN: psn}, payLen)
	return packet{buf: buf, Draft: d}
}

// release returns an unsent packet's buffer.
func (p *packet) release() { bufPool.Put(p.buf) }

// send seals the packet (IP and UDP headers, ICRC) and queues it for the link.
func (q *QP) send(p *packet) {
	dg := p.Seal()
	q.record(true, dg)
	q.ccSent(p, len(dg))
	end := nic.Headroom + len(dg)
	if q.tx == nil {
		q.tx = txPool.Get().(*txBatch)
	}
	t := q.tx
	t.bufs[t.n] = p.buf
	t.frames[t.n] = nic.Frame{B: p.buf[:end], Off: nic.Headroom, Sealed: true}
	t.ack[t.n] = p.Info().Kind == bth.KindAcknowledge
	t.n++
	q.env.Counters.SentPkts.Add(1)
	if t.n == txBatchMax {
		q.flushTx()
	}
}

// flushTx hands the queued frames to the link, or leaves them to unlock.
func (q *QP) flushTx() {
	t := q.tx
	if t == nil {
		return
	}
	if t.n == 0 {
		q.dropTx()
		return
	}
	q.tx = nil
	q.txEpoch++
	if q.txBusy {
		q.enqueue(t) // behind the batches being sent outside the lock: in order
		return
	}
	q.sendQueued() // a batch left to unlock, and then more came
	if q.txDefer == deferPost || q.txDefer == deferAcks && t.acksOnly() {
		q.enqueue(t)
		return
	}
	q.sendBatch(t)
}

// txDeferral says which batch flushTx leaves for unlock to send once the
// lock is released: the last one.
type txDeferral uint8

const (
	deferNone txDeferral = iota
	deferAcks            // endBurst: a batch of acknowledgements only
	deferPost            // a post's
)

func (q *QP) enqueue(t *txBatch) {
	if q.txqTail == nil {
		q.txq = t
	} else {
		q.txqTail.next = t
	}
	q.txqTail = t
}

// dequeue takes the oldest waiting batch off txq; nil when none waits.
func (q *QP) dequeue() *txBatch {
	t := q.txq
	if t == nil {
		return nil
	}
	q.txq, t.next = t.next, nil
	if q.txq == nil {
		q.txqTail = nil
	}
	return t
}

// sendQueued sends the waiting batches under the lock; none is departing.
func (q *QP) sendQueued() {
	for t := q.dequeue(); t != nil; t = q.dequeue() {
		q.sendBatch(t)
	}
}

// unlock releases q.mu, then sends the batches flushTx left to it and
// those that queued behind them meanwhile. The link's send is a system
// call (on loopback it carries the packet through the receiver's stack
// too). Made under the lock, it held up whoever came to the QP meanwhile:
// through libgoroce.so, ib_send_lat's post_recv met the receive
// goroutine's ACK on every other iteration, and a C thread blocked on a
// Go mutex in a cgo call parks its locked thread and hands its P to
// another, several thread switches. So a post's frames, and a burst's
// acknowledgement, leave after the lock is released; a poster that comes
// while they are being sent queues its frames behind them and returns,
// and the goroutine sending sends them too. One goroutine at a time sends
// (txBusy), so the QP's frames keep their order. The rest (what an ACK
// releases, READ responses, retransmissions) is sent under the lock by
// the goroutine that built it, as before: handed to the poster's thread
// instead, 64 KiB WRITEs moved less.
func (q *QP) unlock() {
	if q.txq == nil || q.txBusy {
		q.mu.Unlock()
		return
	}
	q.txBusy = true
	for t := q.dequeue(); t != nil; t = q.dequeue() {
		q.mu.Unlock()
		q.sendBatch(t)
		q.mu.Lock()
	}
	q.txBusy = false
	if q.txDone != nil {
		q.txDone.Broadcast()
	}
	q.mu.Unlock()
}

// waitDeparted waits, q.mu held, until no batch is being sent outside
// it: the receive goroutine sends its burst's frames itself rather than
// queue them behind a poster's, leaving that thread to its program.
func (q *QP) waitDeparted() {
	for q.txBusy {
		if q.txDone == nil {
			q.txDone = sync.NewCond(&q.mu)
		}
		q.txDone.Wait()
	}
}

// sendBatch hands a closed batch to the link and gives it back.
func (q *QP) sendBatch(t *txBatch) {
	if q.env.Trace != nil { // in the order the link gets them (ackBehind)
		for _, f := range t.frames[:t.n] {
			q.env.Trace(true, f.Datagram())
		}
	}
	if _, err := q.env.Link.Send(t.frames[:t.n]); err != nil {
		// The link failed as a whole: the packets are lost like any lost
		// packet, and RC recovers them by retransmission.
		q.env.Counters.SendErr.Add(uint64(t.n))
	}
	putBatch(t)
}

// putBatch releases a batch's frames and gives the batch back to txPool.
func putBatch(t *txBatch) {
	t.drop()
	txPool.Put(t)
}

// dropQueued gives back the waiting batches unsent: the device closed.
func (q *QP) dropQueued() {
	for t := q.dequeue(); t != nil; t = q.dequeue() {
		putBatch(t)
	}
}

// dropTx releases the queued frames unsent and gives the batch back.
func (q *QP) dropTx() {
	if q.tx == nil {
		return
	}
	putBatch(q.tx)
	q.tx = nil
	q.txEpoch++
}
