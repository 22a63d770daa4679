package transport

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// SRQAttr are a shared receive queue's attributes (struct ibv_srq_attr).
type SRQAttr struct {
	MaxWR    uint32 // receive work requests the queue holds
	MaxSGE   uint32 // SGEs per receive work request
	SRQLimit uint32 // arm the limit event: fires when fewer WRs remain (0: off)
}

// SRQAttrMask selects what ModifySRQ changes (enum ibv_srq_attr_mask).
type SRQAttrMask uint8

// SRQ attribute mask bits.
const (
	SRQMaxWR SRQAttrMask = 1 << 0 // resize
	SRQLimit SRQAttrMask = 1 << 1 // arm the limit event
)

// SRQ is a shared receive queue: receive WQEs that several QPs consume
// from, in the order they were posted (IBA 10.2.9). It is safe for
// concurrent use.
type SRQ struct {
	pd *PD
	// limitReached reports IBV_EVENT_SRQ_LIMIT_REACHED to the device.
	limitReached func(*SRQ)
	users        atomic.Int32 // QPs attached

	// An XRC SRQ's number, domain and CQ (xrc.go), and what takes it out
	// of its device's tables when destroyed.
	srqn       uint32
	xrcd       *XRCD
	cq         *CQ
	unregister func()

	mu        sync.Mutex
	rq        recvRing
	limit     uint32
	armed     bool
	destroyed bool
}

// newSRQ creates a shared receive queue in pd; limitReached reports its
// limit event (IBV_EVENT_SRQ_LIMIT_REACHED).
func newSRQ(pd *PD, attr SRQAttr, limitReached func(*SRQ)) (*SRQ, error) {
	if attr.MaxWR == 0 || attr.MaxWR > MaxWR || attr.MaxSGE > MaxSGE {
		return nil, invalid("SRQ max_wr %d / max_sge %d beyond the device's (%d, %d)", attr.MaxWR, attr.MaxSGE, MaxWR, MaxSGE)
	}
	if attr.SRQLimit > attr.MaxWR {
		return nil, invalid("srq_limit %d exceeds max_wr %d", attr.SRQLimit, attr.MaxWR)
	}
	s := &SRQ{pd: pd, limitReached: limitReached, rq: newRecvRing(attr.MaxWR, max(attr.MaxSGE, 1))}
	if attr.SRQLimit > 0 {
		s.limit, s.armed = attr.SRQLimit, true
	}
	pd.hold()
	return s, nil
}

// PostRecv posts a receive work request (ibv_post_srq_recv).
func (s *SRQ) PostRecv(wr *RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.post(wr)
}

// PostRecvList posts several receive work requests.
func (s *SRQ) PostRecvList(wrs []RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range wrs {
		if err := s.post(&wrs[i]); err != nil {
			return &PostError{Index: i, Err: err}
		}
	}
	return nil
}

func (s *SRQ) post(wr *RecvWR) error {
	if s.pd.closed() {
		return errQPClosed("post_srq_recv")
	}
	if s.destroyed {
		return fmt.Errorf("%w: SRQ destroyed", ErrState)
	}
	total, err := s.rq.check(wr, "SRQ")
	if err != nil {
		return err
	}
	if err := checkSGL(s.pd, wr.SGL, LocalWrite); err != nil {
		return err
	}
	s.rq.put(wr, total)
	return nil
}

// pop takes the oldest WQE, copying its SGL into into. When the queue falls
// below an armed limit, the limit event fires once and disarms (IBA 11.5.2.4).
func (s *SRQ) pop(into []SGE) (recvWQE, bool) {
	s.mu.Lock()
	w, ok := s.rq.pop(into)
	if !ok {
		s.mu.Unlock()
		return recvWQE{}, false
	}
	fire := s.armed && s.rq.len() < s.limit
	if fire {
		s.armed = false
	}
	s.mu.Unlock()
	if fire && s.limitReached != nil {
		s.limitReached(s)
	}
	return w, true
}

// Len returns the number of receive WQEs waiting.
func (s *SRQ) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.rq.len())
}

// Modify resizes the SRQ or arms its limit (ibv_modify_srq).
func (s *SRQ) Modify(attr SRQAttr, mask SRQAttrMask) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pd.closed() {
		return errQPClosed("modify_srq")
	}
	if mask&SRQMaxWR != 0 {
		if attr.MaxWR == 0 || attr.MaxWR > MaxWR || attr.MaxWR < s.rq.len() {
			return invalid("SRQ max_wr %d: below the %d WRs held or beyond %d", attr.MaxWR, s.rq.len(), MaxWR)
		}
		s.rq.resize(attr.MaxWR)
	}
	if mask&SRQLimit != 0 {
		if attr.SRQLimit > s.rq.depth {
			return invalid("srq_limit %d exceeds max_wr %d", attr.SRQLimit, s.rq.depth)
		}
		s.limit = attr.SRQLimit
		s.armed = attr.SRQLimit > 0
	}
	return nil
}

// Query returns the SRQ's attributes; SRQLimit is 0 when not armed.
func (s *SRQ) Query() SRQAttr {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := SRQAttr{MaxWR: s.rq.depth, MaxSGE: s.rq.maxSGE}
	if s.armed {
		a.SRQLimit = s.limit
	}
	return a
}

// Destroy destroys the SRQ (ibv_destroy_srq); it fails while QPs use it
// (ErrBusy), and a second time (ErrInvalid).
func (s *SRQ) Destroy() error {
	if s.pd.closed() {
		return errQPClosed("destroy_srq")
	}
	// Under s.mu, which attach holds too: no QP attaches between the
	// check and the destroy.
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return invalid("destroy_srq: the SRQ was destroyed already")
	}
	if n := s.users.Load(); n != 0 {
		return fmt.Errorf("%w: SRQ still used by %d QPs", ErrBusy, n)
	}
	s.destroyed = true
	if s.xrcd != nil {
		s.unregister()
		s.xrcd.detach()
	}
	s.pd.release()
	return nil
}

// attach counts a QP created to receive through the SRQ; a destroyed SRQ
// takes none.
func (s *SRQ) attach() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return invalid("SRQ destroyed")
	}
	s.users.Add(1)
	return nil
}
