package transport

import (
	"fmt"
	"sync"

	"github.com/goroce/goroce/bth"
)

// The device's XRC objects: XRC domains, and the XRC SRQs that target QPs
// find by the number a request's XRCETH carries.

// xrcSRQs numbers the device's XRC SRQs. The receive path reads it for
// every XRC request, under the read lock: no allocation.
type xrcSRQs struct {
	mu   sync.RWMutex
	m    map[uint32]*SRQ
	next uint32 // the last number given
}

func (t *xrcSRQs) get(n uint32) *SRQ {
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
		t.m = make(map[uint32]*SRQ)
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

func (t *xrcSRQs) put(n uint32, s *SRQ) {
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
func (d *Device) OpenXRCD() (*XRCD, error) {
	if d.closedNow() {
		return nil, errDeviceClosed("open_xrcd")
	}
	return newXRCD(d.closedNow, d.xrc.get), nil
}

// CreateSRQEx creates a shared receive queue with extended attributes
// (ibv_create_srq_ex) in pd, which must be this device's: a basic SRQ
// (ia.Type SRQBasic, as CreateSRQ), or an XRC SRQ (SRQXRC) in
// ia.XRCD completing on ia.CQ, which XRC initiators name by its SRQN
// (SRQ.SRQN). An XRC SRQ counts as a user of its CQ, which DestroyCQ then
// refuses, and of its domain.
func (d *Device) CreateSRQEx(pd *PD, ia SRQInitAttr) (*SRQ, error) {
	if ia.Type == SRQBasic {
		if ia.XRCD != nil || ia.CQ != nil {
			return nil, fmt.Errorf("device: create_srq_ex: a basic SRQ has no XRC domain or CQ: %w", ErrInvalid)
		}
		return d.CreateSRQ(pd, ia.Attr)
	}
	if d.closedNow() {
		return nil, errDeviceClosed("create_srq_ex")
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
		return nil, fmt.Errorf("%w: out of XRC SRQ numbers", ErrNoMem)
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
