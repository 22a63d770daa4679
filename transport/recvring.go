package transport

import (
	"fmt"
	"math/bits"
)

// recvRing holds receive WQEs in the order they were posted: a QP's own
// receive queue and an SRQ are both one (the SRQ adds its lock and its
// limit event).
//
// head and tail count WQEs and run freely, wrapping at 2^32. The ring's
// length is a power of two at least depth, so that a count maps to its
// slot by a mask and every slot follows from the one before across the
// wrap; with any other length, counts on both sides of 2^32 fall on the
// same slot (2^32-1 and 0 mod 3 are both 0), and a queue held across the
// wrap would lose a WQE to the next. rxe's queues are powers of two too.
type recvRing struct {
	ring       []recvWQE
	sges       []SGE // maxSGE per slot
	maxSGE     uint32
	depth      uint32 // WRs held at most (max_recv_wr, max_wr)
	head, tail uint32
}

// ringLen is the length of a ring holding depth entries: the power of two
// at or above it.
func ringLen(depth uint32) uint32 {
	if depth <= 1 {
		return depth
	}
	return 1 << bits.Len32(depth-1)
}

// newRecvRing returns a ring of depth WRs of maxSGE SGEs each, which
// allocates its slots when the first WR is put: a QP that is created and
// never posted to holds none (TestManyQPsHeap).
func newRecvRing(depth, maxSGE uint32) recvRing {
	return recvRing{maxSGE: maxSGE, depth: depth}
}

func (r *recvRing) len() uint32 { return r.tail - r.head }

func (r *recvRing) mask() uint32 { return uint32(len(r.ring)) - 1 }

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
	if r.ring == nil {
		n := ringLen(r.depth)
		r.ring, r.sges = make([]recvWQE, n), make([]SGE, n*r.maxSGE)
	}
	slot := r.tail & r.mask()
	sgl := r.sges[slot*r.maxSGE : slot*r.maxSGE+uint32(len(wr.SGL))]
	copy(sgl, wr.SGL)
	r.ring[slot] = recvWQE{wrID: wr.WRID, sgl: sgl, length: total}
	r.tail++
}

// pop takes the oldest WQE, copying its SGL into into, since its slot may
// be posted to again while its message arrives; with into nil (a flush)
// the SGL is dropped.
func (r *recvRing) pop(into []SGE) (recvWQE, bool) {
	if r.head == r.tail {
		return recvWQE{}, false
	}
	w := r.ring[r.head&r.mask()]
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
		w := r.ring[r.head&r.mask()]
		nr.put(&RecvWR{WRID: w.wrID, SGL: w.sgl}, w.length)
		r.head++
	}
	*r = nr
}

func (r *recvRing) reset() { r.head, r.tail = 0, 0 }
