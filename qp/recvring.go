package qp

import (
	"fmt"

	"github.com/goroce/goroce/mr"
)

// recvRing holds receive WQEs in the order they were posted: a QP's own
// receive queue and an SRQ are both one (the SRQ adds its lock and its
// limit event).
type recvRing struct {
	ring       []recvWQE
	sges       []mr.SGE // maxSGE per slot
	maxSGE     uint32
	depth      uint32 // WRs held at most (max_recv_wr, max_wr)
	head, tail uint32
}

func newRecvRing(depth, maxSGE uint32) recvRing {
	return recvRing{ring: make([]recvWQE, depth), sges: make([]mr.SGE, depth*maxSGE),
		maxSGE: maxSGE, depth: depth}
}

func (r *recvRing) len() uint32 { return r.tail - r.head }

// check says whether wr may be queued, and its length: room, its SGE
// count and its total. It does not check the SGL's keys (checkSGL). what
// names the queue in errors.
func (r *recvRing) check(wr *RecvWR, what string) (uint32, error) {
	if r.depth == 0 {
		return 0, invalid("QP has no receive queue")
	}
	if r.len() == r.depth {
		return 0, fmt.Errorf("%w: %s holds %d WRs", ErrNoMem, what, r.depth)
	}
	if uint32(len(wr.SGL)) > r.maxSGE {
		return 0, invalid("%d SGEs exceed the %s's max_sge %d", len(wr.SGL), what, r.maxSGE)
	}
	total, ok := sgeTotal(wr.SGL)
	if !ok {
		return 0, invalid("receive buffers exceed 2^31 bytes")
	}
	return total, nil
}

// put queues wr, which check passed with total.
func (r *recvRing) put(wr *RecvWR, total uint32) {
	slot := r.tail % uint32(len(r.ring))
	sgl := r.sges[slot*r.maxSGE : slot*r.maxSGE+uint32(len(wr.SGL))]
	copy(sgl, wr.SGL)
	r.ring[slot] = recvWQE{wrID: wr.WRID, sgl: sgl, length: total}
	r.tail++
}

// pop takes the oldest WQE, copying its SGL into into, since its slot may
// be posted to again while its message arrives; with into nil (a flush)
// the SGL is dropped.
func (r *recvRing) pop(into []mr.SGE) (recvWQE, bool) {
	if r.head == r.tail {
		return recvWQE{}, false
	}
	w := r.ring[r.head%uint32(len(r.ring))]
	n := copy(into, w.sgl)
	w.sgl = into[:n]
	r.head++
	return w, true
}

// resize makes the ring hold up to depth WRs (at least len()), keeping
// those held in order.
func (r *recvRing) resize(depth uint32) {
	nr := newRecvRing(depth, r.maxSGE)
	for r.head != r.tail {
		w := r.ring[r.head%uint32(len(r.ring))]
		nr.put(&RecvWR{WRID: w.wrID, SGL: w.sgl}, w.length)
		r.head++
	}
	*r = nr
}

func (r *recvRing) reset() { r.head, r.tail = 0, 0 }
