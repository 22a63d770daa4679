package qp

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/cq"
	"github.com/goroce/goroce/mr"
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
	pd    *mr.PD
	event func(Event)
	users atomic.Int32 // QPs attached

	// An XRC SRQ's number, domain and CQ (xrc.go), and what takes it out
	// of its device's tables when destroyed.
	srqn       uint32
	xrcd       *XRCD
	cq         *cq.CQ
	unregister func()

	mu         sync.Mutex
	ring       []recvWQE
	sges       []mr.SGE
	maxSGE     uint32
	head, tail uint32
	limit      uint32
	armed      bool
	destroyed  bool
}

// newSRQ creates a shared receive queue in pd; event receives its limit
// event (IBV_EVENT_SRQ_LIMIT_REACHED).
func newSRQ(pd *mr.PD, attr SRQAttr, event func(Event)) (*SRQ, error) {
	if attr.MaxWR == 0 || attr.MaxWR > MaxWR || attr.MaxSGE > MaxSGE {
		return nil, invalid("SRQ max_wr %d / max_sge %d beyond the device's (%d, %d)", attr.MaxWR, attr.MaxSGE, MaxWR, MaxSGE)
	}
	if attr.SRQLimit > attr.MaxWR {
		return nil, invalid("srq_limit %d exceeds max_wr %d", attr.SRQLimit, attr.MaxWR)
	}
	s := &SRQ{pd: pd, event: event, maxSGE: max(attr.MaxSGE, 1)}
	s.ring = make([]recvWQE, attr.MaxWR)
	s.sges = make([]mr.SGE, attr.MaxWR*s.maxSGE)
	if attr.SRQLimit > 0 {
		s.limit, s.armed = attr.SRQLimit, true
	}
	holdPD(pd)
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
	if closedPD(s.pd) {
		return errClosed("post_srq_recv")
	}
	if s.destroyed {
		return fmt.Errorf("%w: SRQ destroyed", ErrState)
	}
	if s.tail-s.head == uint32(len(s.ring)) {
		return fmt.Errorf("%w: SRQ holds %d WRs", ErrNoMem, len(s.ring))
	}
	if uint32(len(wr.SGL)) > s.maxSGE {
		return invalid("%d SGEs exceed the SRQ's max_sge %d", len(wr.SGL), s.maxSGE)
	}
	total, ok := sgeTotal(wr.SGL)
	if !ok {
		return invalid("receive buffers exceed 2^31 bytes")
	}
	if err := checkSGL(s.pd, wr.SGL, mr.LocalWrite); err != nil {
		return err
	}
	slot := s.tail % uint32(len(s.ring))
	sgl := s.sges[slot*s.maxSGE : slot*s.maxSGE+uint32(len(wr.SGL))]
	copy(sgl, wr.SGL)
	s.ring[slot] = recvWQE{wrID: wr.WRID, sgl: sgl, length: total}
	s.tail++
	return nil
}

// pop takes the oldest WQE, copying its SGL into into. When the queue falls
// below an armed limit, the limit event fires once and disarms (IBA 11.5.2.4).
func (s *SRQ) pop(into []mr.SGE) (recvWQE, bool) {
	s.mu.Lock()
	if s.head == s.tail {
		s.mu.Unlock()
		return recvWQE{}, false
	}
	w := s.ring[s.head%uint32(len(s.ring))]
	n := copy(into, w.sgl)
	w.sgl = into[:n]
	s.head++
	fire := s.armed && s.tail-s.head < s.limit
	if fire {
		s.armed = false
	}
	s.mu.Unlock()
	if fire && s.event != nil {
		s.event(Event{Type: EventSRQLimitReached, SRQ: s})
	}
	return w, true
}

// Len returns the number of receive WQEs waiting.
func (s *SRQ) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.tail - s.head)
}

// Modify resizes the SRQ or arms its limit (ibv_modify_srq).
func (s *SRQ) Modify(attr SRQAttr, mask SRQAttrMask) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if closedPD(s.pd) {
		return errClosed("modify_srq")
	}
	if mask&SRQMaxWR != 0 {
		if attr.MaxWR == 0 || attr.MaxWR > MaxWR || attr.MaxWR < s.tail-s.head {
			return invalid("SRQ max_wr %d: below the %d WRs held or beyond %d", attr.MaxWR, s.tail-s.head, MaxWR)
		}
		ring := make([]recvWQE, attr.MaxWR)
		sges := make([]mr.SGE, attr.MaxWR*s.maxSGE)
		n := s.tail - s.head
		for i := range n {
			w := s.ring[(s.head+i)%uint32(len(s.ring))]
			sgl := sges[i*s.maxSGE : i*s.maxSGE+uint32(len(w.sgl))]
			copy(sgl, w.sgl)
			w.sgl = sgl
			ring[i] = w
		}
		s.ring, s.sges, s.head, s.tail = ring, sges, 0, n
	}
	if mask&SRQLimit != 0 {
		if attr.SRQLimit > uint32(len(s.ring)) {
			return invalid("srq_limit %d exceeds max_wr %d", attr.SRQLimit, len(s.ring))
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
	a := SRQAttr{MaxWR: uint32(len(s.ring)), MaxSGE: s.maxSGE}
	if s.armed {
		a.SRQLimit = s.limit
	}
	return a
}

// Destroy destroys the SRQ (ibv_destroy_srq); it fails while QPs use it
// (ErrBusy), and a second time (ErrInvalid).
func (s *SRQ) Destroy() error {
	if closedPD(s.pd) {
		return errClosed("destroy_srq")
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
	releasePD(s.pd)
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
