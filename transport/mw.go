package transport

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Memory windows (IBA 10.6; ibv_alloc_mw, ibv_bind_mw): an rkey of its
// own onto a range of a registered region, with its own remote rights,
// granted and revoked without registering anything. A window shares the
// key table with the regions, so an rkey names either.
//
// Binding and invalidating are work requests, executed in send-queue
// order by the QP that posts them (QP.BindMW for a type 1 window, a
// WRBindMW or WRLocalInv work request, or a peer's SEND with
// Invalidate); this file holds the window and the rules each operation
// checks, with rxe's rule numbers (rxe_mw.c).

// MWType is a memory window's type, with the values of enum ibv_mw_type.
type MWType uint8

// Memory window types.
const (
	// MWType1 windows belong to their PD: QP.BindMW binds them, through
	// any QP of the PD, and binding again (or with length 0) is the only
	// way to move or revoke them.
	MWType1 MWType = 1
	// MWType2 windows are bound by a WRBindMW work request to the QP
	// that posts it (type 2B): only that QP's peer may use the rkey. A
	// WRLocalInv, or the peer's SEND with Invalidate, frees the window
	// for its next bind.
	MWType2 MWType = 2
)

// String returns "type1" or "type2".
func (t MWType) String() string {
	switch t {
	case MWType1:
		return "type1"
	case MWType2:
		return "type2"
	}
	return fmt.Sprintf("MWType(%d)", uint8(t))
}

// Errors of memory windows. A failed bind completes with MWBindErr, a
// failed invalidation with LocQPOpErr (or, for a SEND with
// Invalidate, the responder's invalid request NAK); these errors say why.
var (
	ErrMWType     = errors.New("mr: memory window of the wrong type for the operation")
	ErrMWState    = errors.New("mr: memory window is not in a state that allows the operation")
	ErrMWQP       = errors.New("mr: memory window is bound to another QP")
	ErrMWBind     = errors.New("mr: the region does not allow memory window binding")
	ErrMWRange    = errors.New("mr: memory window range outside the region")
	ErrMWKey      = errors.New("mr: new rkey does not name the memory window")
	ErrMWBound    = errors.New("mr: memory windows are bound to the region")
	ErrMWZeroBase = errors.New("mr: zero-based memory window or region not allowed here")
)

// mwState is where a window is in its life (rxe's RXE_MW_STATE_*).
type mwState uint8

const (
	mwFree    mwState = iota // type 2, not bound
	mwValid                  // type 1 always (bound or not), type 2 bound
	mwInvalid                // deallocated
)

// MW is a memory window (struct ibv_mw). Its rkey, once bound, reaches the
// bytes [Addr, Addr+Len) of the region it was bound to, with the rights
// of the bind.
type MW struct {
	pd   *PD
	typ  MWType
	rkey atomic.Uint32 // the key it answers to now

	mu     sync.RWMutex // held shared by each access, exclusively by bind, invalidate, dealloc
	state  mwState
	posted uint32 // type 1: the key of the last bind posted (BindMW's new key)
	mr     *MR    // bound region (nil: unbound)
	addr   uint64 // the window's first byte, as an address of mr
	length uint64
	access Access
	qp     *QP // type 2: the QP it is bound to
}

// BindInfo is what a bind puts in a window, as struct ibv_mw_bind_info:
// Length bytes of MR at Addr (an address of the region, Addr() plus an
// offset), with Access: RemoteRead, RemoteWrite, RemoteAtomic and
// ZeroBased (the peer then addresses the window from 0).
type BindInfo struct {
	MR     *MR    // the region (registered with MWBind); nil with Length 0 unbinds a type 1 window
	Addr   uint64 // the window's first byte, an address of the region
	Length uint64 // bytes; 0 unbinds a type 1 window
	Access Access // RemoteRead, RemoteWrite, RemoteAtomic, ZeroBased
}

// AllocMW allocates a memory window in the PD (ibv_alloc_mw). A type 1
// window is valid at once but reaches nothing until bound; a type 2
// window is free until a BIND_MW work request binds it.
func (pd *PD) AllocMW(t MWType) (*MW, error) {
	if pd.table.isClosed() {
		return nil, errPDClosed("alloc_mw")
	}
	if t != MWType1 && t != MWType2 {
		return nil, fmt.Errorf("mr: alloc_mw: %w: %v", ErrMWType, t)
	}
	w := &MW{pd: pd, typ: t, state: mwFree}
	if t == MWType1 {
		w.state = mwValid
	}
	key, err := pd.table.insert(slot{mw: w})
	if err != nil {
		return nil, err
	}
	w.posted = key
	pd.hold()
	return w, nil
}

// Dealloc frees the window (ibv_dealloc_mw), bound or not: its rkey stops
// working at once. A second Dealloc fails.
func (w *MW) Dealloc() error {
	if w.pd.table.isClosed() {
		return errPDClosed("dealloc_mw")
	}
	w.mu.Lock()
	if w.state == mwInvalid {
		w.mu.Unlock()
		return fmt.Errorf("mr: dealloc_mw: the window was deallocated already: %w", ErrInvalidKey)
	}
	key := w.rkey.Load()
	w.unbind()
	w.state = mwInvalid
	w.mu.Unlock()
	w.pd.table.remove(key, slot{mw: w})
	w.pd.release()
	return nil
}

// unbind lets go of the bound region; w.mu is held.
func (w *MW) unbind() {
	if w.mr != nil {
		w.mr.windows.Add(-1)
	}
	w.mr, w.addr, w.length, w.access, w.qp = nil, 0, 0, 0, nil
}

// RKey returns the key the window answers to now: the last bind's, once
// it has executed.
func (w *MW) RKey() uint32 { return w.rkey.Load() }

// Type returns the window's type.
func (w *MW) Type() MWType { return w.typ }

// PD returns the protection domain the window belongs to.
func (w *MW) PD() *PD { return w.pd }

// Bound returns what the window is bound to, and false if it is not
// bound.
func (w *MW) Bound() (BindInfo, bool) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.mr == nil || w.state != mwValid {
		return BindInfo{}, false
	}
	return BindInfo{MR: w.mr, Addr: w.addr, Length: w.length, Access: w.access}, true
}

// String names the window for messages.
func (w *MW) String() string { return fmt.Sprintf("mw %v rkey 0x%x", w.typ, w.RKey()) }

// IncRKey returns rkey with its 8-bit variant advanced, as ibv_inc_rkey:
// the key a type 2 window's next bind should give it, so that the
// previous key stops working.
func IncRKey(rkey uint32) uint32 { return rkey&^0xff | (rkey+1)&0xff }

// nextType1Key reserves the key a type 1 bind being posted will install
// (ibv_bind_mw returns it before the bind executes).
func (w *MW) nextType1Key() (uint32, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.typ != MWType1 {
		return 0, fmt.Errorf("%w: bind_mw takes a type 1 window; a type 2 window is bound by a BIND_MW work request", ErrMWType)
	}
	if w.state == mwInvalid {
		return 0, fmt.Errorf("%w: window deallocated", ErrMWState)
	}
	w.posted = IncRKey(w.posted)
	return w.posted, nil
}

// bind executes a bind posted on qp, a QP of pd: type1 tells a bind
// through the verb from a BIND_MW work request.
func (w *MW) bind(pd *PD, qp *QP, type1 bool, rkey uint32, b BindInfo) error {
	if w == nil {
		return fmt.Errorf("%w: no window", ErrInvalidKey)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state == mwInvalid {
		return fmt.Errorf("%w: window deallocated", ErrMWState)
	}
	if type1 != (w.typ == MWType1) {
		return fmt.Errorf("%w: %v", ErrMWType, w.typ)
	}
	if rkey>>8 != w.rkey.Load()>>8 {
		return fmt.Errorf("%w: rkey 0x%x, window 0x%x", ErrMWKey, rkey, w.rkey.Load())
	}
	// The window, the region and the QP share one PD (C10-72).
	if w.pd != pd {
		return fmt.Errorf("%w: window of %v, QP of %v", ErrPD, w.pd, pd)
	}
	switch w.typ {
	case MWType1:
		if b.Access&ZeroBased != 0 {
			return fmt.Errorf("%w: a type 1 window cannot be zero-based (o10-36.2.2)", ErrMWZeroBase)
		}
		if b.Length == 0 { // a type 1 window is unbound by a bind of length 0
			w.unbind()
			w.rkey.Store(rkey)
			return nil
		}
	case MWType2:
		if w.state != mwValid && w.state != mwFree {
			return ErrMWState
		}
		if w.state == mwValid { // o10-37.2.30: invalidate it first
			return fmt.Errorf("%w: type 2 window bound already", ErrMWState)
		}
		if b.Length == 0 || b.MR == nil { // o10-37.2.40
			return fmt.Errorf("%w: a type 2 window is bound to a range of 1 byte or more", ErrMWRange)
		}
	}
	m := b.MR
	if m == nil {
		return fmt.Errorf("%w: no region", ErrInvalidKey)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if !m.valid {
		return fmt.Errorf("%w: region lkey 0x%x", ErrInvalidKey, m.key.Load())
	}
	if m.pd != pd {
		return fmt.Errorf("%w: region of %v, QP of %v", ErrPD, m.pd, pd)
	}
	if m.access&ZeroBased != 0 {
		return fmt.Errorf("%w: the region is zero-based", ErrMWZeroBase)
	}
	if m.access&MWBind == 0 { // C10-73
		return fmt.Errorf("%w: region registered %v", ErrMWBind, m.access)
	}
	if b.Access&(RemoteWrite|RemoteAtomic) != 0 && m.access&LocalWrite == 0 { // C10-74
		return fmt.Errorf("%w: a window with remote write or atomic needs a region with local write", ErrInvalidAccess)
	}
	// C10-75: the window lies inside the region. Written overflow-safe.
	if b.Addr < m.iova || b.Addr-m.iova > uint64(len(m.buf)) || b.Length > uint64(len(m.buf))-(b.Addr-m.iova) {
		return fmt.Errorf("%w: 0x%x+%d, region 0x%x+%d", ErrMWRange, b.Addr, b.Length, m.iova, len(m.buf))
	}
	w.unbind()
	m.windows.Add(1)
	w.mr, w.addr, w.length, w.access = m, b.Addr, b.Length, b.Access&(RemoteRead|RemoteWrite|RemoteAtomic|ZeroBased)
	if w.typ == MWType2 {
		w.qp = qp
	}
	w.state = mwValid
	w.rkey.Store(rkey)
	return nil
}

// invalidate frees a bound type 2 window named by rkey, for a local
// invalidate or (remote, from qp's peer) a SEND with Invalidate.
func (w *MW) invalidate(pd *PD, qp *QP, rkey uint32, remote bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.rkey.Load() != rkey || w.state == mwInvalid {
		return fmt.Errorf("%w: rkey 0x%x", ErrInvalidKey, rkey)
	}
	if w.pd != pd {
		return fmt.Errorf("%w: window of %v, QP of %v", ErrPD, w.pd, pd)
	}
	if w.typ == MWType1 { // o10-37.2.26
		return fmt.Errorf("%w: a type 1 window is not invalidated, only bound again", ErrMWType)
	}
	if w.state != mwValid {
		return fmt.Errorf("%w: type 2 window not bound", ErrMWState)
	}
	// A type 2B window belongs to the QP that bound it: another QP's peer
	// must not revoke it.
	if remote && w.qp != qp {
		return ErrMWQP
	}
	w.unbind()
	w.state = mwFree
	return nil
}

// access checks a remote access through the window's rkey by qp, a QP of
// pd, and returns the bytes and their region, locked until endAccess.
func (w *MW) remote(pd *PD, qp *QP, rkey uint32, addr uint64, n uint32, need Access) ([]byte, *MR, error) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.rkey.Load() != rkey || w.state != mwValid || w.mr == nil {
		return nil, nil, ErrInvalidKey
	}
	if w.pd != pd {
		return nil, nil, ErrPD
	}
	if w.typ == MWType2 && w.qp != qp {
		return nil, nil, ErrMWQP
	}
	if w.access&need != need {
		return nil, nil, ErrAccess
	}
	// The window's own range bounds the access (a zero-based window is
	// addressed from 0), not the region's.
	off := addr
	if w.access&ZeroBased == 0 {
		off = addr - w.addr
		if addr < w.addr {
			return nil, nil, ErrBounds
		}
	}
	if off > w.length || uint64(n) > w.length-off {
		return nil, nil, ErrBounds
	}
	// The bind checked the region's rights; now only that it is still
	// valid and where the bytes are. The region stays locked for the copy
	// after the window's lock is let go, as a region's access would.
	return w.mr.acquire(pd, w.addr+off, n, 0)
}
