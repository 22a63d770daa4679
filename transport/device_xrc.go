package device

import (
	"fmt"
	"sync"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/hook"
	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/qp"
)

// The device's XRC objects: XRC domains, and the XRC SRQs that target QPs
// find by the number a request's XRCETH carries.

var (
	newXRCD   = hook.NewXRCD.(func(closed func() bool, lookup func(srqn uint32) *qp.SRQ) *qp.XRCD)
	newXRCSRQ = hook.NewXRCSRQ.(func(pd *mr.PD, ia qp.SRQInitAttr, srqn uint32, limitReached func(*qp.SRQ), unregister func()) (*qp.SRQ, error))
)

// xrcSRQs numbers the device's XRC SRQs. The receive path reads it for
// every XRC request, under the read lock: no allocation.
type xrcSRQs struct {
	mu   sync.RWMutex
	m    map[uint32]*qp.SRQ
	next uint32 // the last number given
}

func (t *xrcSRQs) get(n uint32) *qp.SRQ {
	t.mu.RLock()
	s := t.m[n]
	t.mu.RUnlock()
	return s
}

// reserve finds a free number, 1..2^24-1 (0 is never one: SendWR's
// RemoteSRQN uses it for "none").
func (t *xrcSRQs) reserve() (uint32, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = make(map[uint32]*qp.SRQ)
	}
	for range bth.PSNMask {
		t.next = t.next%bth.PSNMask + 1
		if _, used := t.m[t.next]; !used {
			t.m[t.next] = nil // held until put or drop
			return t.next, true
		}
	}
	return 0, false
}

func (t *xrcSRQs) put(n uint32, s *qp.SRQ) {
	t.mu.Lock()
	t.m[n] = s
	t.mu.Unlock()
}

func (t *xrcSRQs) drop(n uint32) {
	t.mu.Lock()
	delete(t.m, n)
	t.mu.Unlock()
}

// OpenXRCD opens an XRC domain (ibv_open_xrcd): the XRC SRQs and XRC
// target QPs created in it. Its Close refuses while they exist.
func (d *Device) OpenXRCD() (*qp.XRCD, error) {
	if d.closedNow() {
		return nil, errClosed("open_xrcd")
	}
	return newXRCD(d.closedNow, d.xrc.get), nil
}

// CreateSRQEx creates a shared receive queue with extended attributes
// (ibv_create_srq_ex) in pd, which must be this device's: a basic SRQ
// (ia.Type qp.SRQBasic, as CreateSRQ), or an XRC SRQ (qp.SRQXRC) in
// ia.XRCD completing on ia.CQ, which XRC initiators name by its SRQN
// (SRQ.SRQN). An XRC SRQ counts as a user of its CQ, which DestroyCQ then
// refuses, and of its domain.
func (d *Device) CreateSRQEx(pd *mr.PD, ia qp.SRQInitAttr) (*qp.SRQ, error) {
	if ia.Type == qp.SRQBasic {
		if ia.XRCD != nil || ia.CQ != nil {
			return nil, fmt.Errorf("device: create_srq_ex: a basic SRQ has no XRC domain or CQ: %w", qp.ErrInvalid)
		}
		return d.CreateSRQ(pd, ia.Attr)
	}
	if d.closedNow() {
		return nil, errClosed("create_srq_ex")
	}
	if err := d.foreign("create_srq_ex", pd); err != nil {
		return nil, err
	}
	if err := d.useCQs("create_srq_ex", 1, ia.CQ); err != nil {
		return nil, err
	}
	n, ok := d.xrc.reserve()
	if !ok {
		d.useCQs("create_srq_ex", -1, ia.CQ)
		return nil, fmt.Errorf("%w: out of XRC SRQ numbers", qp.ErrNoMem)
	}
	s, err := newXRCSRQ(pd, ia, n, d.srqLimitReached, func() {
		d.xrc.drop(n)
		d.useCQs("destroy_srq", -1, ia.CQ)
	})
	if err != nil {
		d.xrc.drop(n)
		d.useCQs("create_srq_ex", -1, ia.CQ)
		return nil, err
	}
	d.xrc.put(n, s)
	return s, nil
}
