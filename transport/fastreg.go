package transport

import (
	"errors"
	"fmt"
)

// Fast registration (the kernel verbs' IB_MR_TYPE_MEM_REG regions and
// IB_WR_REG_MR; rxe_reg_fast_mr): a region allocated once over an
// allocation of the program's, whose key reaches nothing until a
// registration work request (WRRegMR), executed in send-queue order,
// maps a range of the allocation under the key's next variant, with the
// rights of that registration; a local invalidate (WRLocalInv) or a
// peer's SEND with Invalidate frees it for the next. A storage target
// rekeys a buffer per I/O this way without a registration's cost, and a
// key the peer kept from an earlier I/O no longer works.

// ErrNotFast is the error of a registration work request on a region
// that was not allocated for fast registration, or of one a region's
// state does not allow.
var ErrNotFast = errors.New("mr: region not allocated for fast registration")

// ErrRegState is a registration of a fast region still valid: as on
// rxe, it must be invalidated first.
var ErrRegState = errors.New("mr: fast region registered already: invalidate it first")

// AllocFastMR allocates a region for fast registration over backing, the
// program's memory (ib_alloc_mr with IB_MR_TYPE_MEM_REG): a key that
// reaches nothing until a WRRegMR maps a range of backing. Like every
// region it keeps backing alive and, for a Mapping, mapped until Dereg.
func (pd *PD) AllocFastMR(backing []byte) (*MR, error) {
	if pd.table.isClosed() {
		return nil, errPDClosed("alloc_mr")
	}
	if len(backing) == 0 {
		return nil, ErrEmpty
	}
	m := &MR{pd: pd, buf: backing, backing: backing, fast: true, registered: true}
	if _, err := pd.table.insert(slot{mr: m}); err != nil {
		return nil, err
	}
	pd.hold()
	if err := attach(m); err != nil {
		m.Dereg()
		return nil, err
	}
	m.buf = backing[:0] // nothing is reachable until registered
	return m, nil
}

// Fast reports whether the region was allocated for fast registration.
func (m *MR) Fast() bool { return m.fast }

// Backing returns a fast region's whole allocation (nil for another
// region).
func (m *MR) Backing() []byte { return m.backing }

// RegInfo is what a registration work request maps: Length bytes of the
// fast region's allocation from Offset, addressed from IOVA, with Access,
// under Key (the region's index with a new 8-bit variant: IncRKey of its
// current key).
type RegInfo struct {
	Key    uint32 // the new lkey and rkey
	Offset uint64 // into the allocation (Backing)
	Length uint64 // bytes, 1 or more
	IOVA   uint64 // the address the first byte gets
	Access Access // LocalWrite, RemoteRead, RemoteWrite, RemoteAtomic
}

// regFast executes a registration posted on a QP of pd.
func regFast(pd *PD, m *MR, r RegInfo) error {
	if m == nil {
		return fmt.Errorf("%w: no region", ErrInvalidKey)
	}
	if !m.fast {
		return ErrNotFast
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.registered {
		return fmt.Errorf("%w: region deregistered", ErrInvalidKey)
	}
	// The QP and the region share one PD (rxe_reg_fast_mr).
	if m.pd != pd {
		return fmt.Errorf("%w: region of %v, QP of %v", ErrPD, m.pd, pd)
	}
	if m.valid {
		return ErrRegState
	}
	// Only the key's 8-bit variant may change (rxe_reg_fast_mr).
	if r.Key>>8 != m.key.Load()>>8 {
		return fmt.Errorf("%w: new key 0x%x, region 0x%x", ErrMWKey, r.Key, m.key.Load())
	}
	if r.Length == 0 || r.Offset > uint64(len(m.backing)) || r.Length > uint64(len(m.backing))-r.Offset {
		return fmt.Errorf("%w: %d bytes at %d of an allocation of %d", ErrBounds, r.Length, r.Offset, len(m.backing))
	}
	if r.Access&(RemoteWrite|RemoteAtomic) != 0 && r.Access&LocalWrite == 0 { // IBA 10.6.3.1, as for ibv_reg_mr
		return ErrInvalidAccess
	}
	if r.Access&(MWBind|ZeroBased) != 0 {
		return fmt.Errorf("%w: %v on a fast registration", ErrInvalidAccess, r.Access&(MWBind|ZeroBased))
	}
	m.buf = m.backing[r.Offset : r.Offset+r.Length]
	m.iova, m.access = r.IOVA, r.Access
	m.key.Store(r.Key)
	m.valid = true
	return nil
}
