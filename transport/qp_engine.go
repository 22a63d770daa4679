package qp

import (
	"github.com/goroce/goroce/internal/hook"
	"github.com/goroce/goroce/mr"
)

// The operations only the device calls (creating the verbs objects in its
// environment, destroying and shutting down QPs, and driving their receive
// path and deferred work) go to it through internal/hook rather than being
// exported: a QP made or destroyed outside its device would be unknown to
// the device's QPN table, or stay in it.
func init() {
	hook.NewQP = newQP
	hook.NewSRQ = newSRQ
	hook.NewXRCD = newXRCD
	hook.NewXRCSRQ = newXRCSRQ
	hook.NewAH = newAH
	hook.DestroyQP = (*QP).destroy
	hook.ShutdownQP = (*QP).shutdown
	hook.RunQP = (*QP).runScheduled
	hook.ReceiveQP = (*QP).receive
	hook.EndBurstQP = (*QP).endBurst
}

// mr's engine-only operations (see internal/hook), typed once: a QP's
// access checks go through the key table of its PD's device.
var (
	holdPD         = hook.HoldPD.(func(*mr.PD))
	releasePD      = hook.ReleasePD.(func(*mr.PD))
	closedPD       = hook.ClosedPD.(func(*mr.PD) bool)
	localAccess    = hook.LocalAccess.(func(pd *mr.PD, lkey uint32, addr uint64, n uint32, need mr.Access) ([]byte, *mr.MR, error))
	remoteAccess   = hook.RemoteAccess.(func(pd *mr.PD, qp any, rkey uint32, addr uint64, n uint32, need mr.Access) ([]byte, *mr.MR, error))
	endAccess      = hook.EndAccess.(func(*mr.MR))
	invalidateRKey = hook.InvalidateRKey.(func(pd *mr.PD, qp any, rkey uint32, remote bool) error)
	bindMW         = hook.BindMW.(func(pd *mr.PD, qp any, w *mr.MW, type1 bool, rkey uint32, b mr.BindInfo) error)
	nextType1Key   = hook.NextType1Key.(func(*mr.MW) (uint32, error))
	regFast        = hook.RegFast.(func(pd *mr.PD, m *mr.MR, r mr.RegInfo) error)
)

// span is memory an access check granted: the bytes, and the region
// whose lock they hold until release.
type span struct {
	m *mr.MR
	b []byte
}

// release ends the access.
func (s span) release() {
	if s.m != nil {
		endAccess(s.m)
	}
}

// localSpan checks an access through an lkey of pd (an SGE of a work
// request) and returns the bytes, locked until release.
func localSpan(pd *mr.PD, lkey uint32, addr uint64, n uint32, need mr.Access) (span, error) {
	b, m, err := localAccess(pd, lkey, addr, n, need)
	return span{m: m, b: b}, err
}

// remoteSpan checks an access through an rkey to q, a QP in pd (a RETH
// or AtomicETH), and returns the bytes, locked until release.
func remoteSpan(pd *mr.PD, q *QP, rkey uint32, addr uint64, n uint32, need mr.Access) (span, error) {
	b, m, err := remoteAccess(pd, q, rkey, addr, n, need)
	return span{m: m, b: b}, err
}
