package qp

import (
	"sync"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic"
)

// txBatchMax is how many frames a QP hands the link in one call.
const txBatchMax = 32

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
	n      int
}

func (t *txBatch) drop() {
	for i := range t.n {
		bufPool.Put(t.bufs[i])
		t.bufs[i] = nil
		t.frames[i] = nic.Frame{}
	}
	t.n = 0
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
	end := nic.Headroom + len(dg)
	if q.tx == nil {
		q.tx = txPool.Get().(*txBatch)
	}
	t := q.tx
	t.bufs[t.n] = p.buf
	t.frames[t.n] = nic.Frame{B: p.buf[:end], Off: nic.Headroom}
	t.n++
	q.env.Counters.SentPkts.Add(1)
	if q.env.Trace != nil {
		q.env.Trace(true, dg)
	}
	if t.n == txBatchMax {
		q.flushTx()
	}
}

// flushTx hands the queued frames to the link.
func (q *QP) flushTx() {
	t := q.tx
	if t == nil {
		return
	}
	if t.n > 0 {
		if _, err := q.env.Link.Send(t.frames[:t.n]); err != nil {
			// The link failed as a whole: the packets are lost like any lost
			// packet, and RC recovers them by retransmission.
			q.env.Counters.SendErr.Add(uint64(t.n))
		}
	}
	q.dropTx()
}

// dropTx releases the queued frames unsent and gives the batch back.
func (q *QP) dropTx() {
	if q.tx == nil {
		return
	}
	q.tx.drop()
	txPool.Put(q.tx)
	q.tx = nil
}
