package transport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goroce/goroce/internal/closed"
)

// Access is a set of memory access rights, with the bit values of
// libibverbs' enum ibv_access_flags.
type Access uint32

// Access rights. Local read is always granted.
const (
	LocalWrite   Access = 1 << 0
	RemoteWrite  Access = 1 << 1
	RemoteRead   Access = 1 << 2
	RemoteAtomic Access = 1 << 3
	MWBind       Access = 1 << 4
	ZeroBased    Access = 1 << 5
)

// String lists the rights by name ("local-write|remote-read"), or
// "local-read" for none, the one right every region has.
func (a Access) String() string {
	if a == 0 {
		return "local-read"
	}
	s := ""
	for _, f := range []struct {
		bit  Access
		name string
	}{{LocalWrite, "local-write"}, {RemoteWrite, "remote-write"}, {RemoteRead, "remote-read"},
		{RemoteAtomic, "remote-atomic"}, {MWBind, "mw-bind"}, {ZeroBased, "zero-based"}} {
		if a&f.bit != 0 {
			if s != "" {
				s += "|"
			}
			s += f.name
		}
	}
	return s
}

// Errors of registration and of access checks. Access-check errors are
// values so the data path reports them without allocating.
var (
	ErrInvalidKey    = errors.New("mr: key names no valid memory region")
	ErrPD            = errors.New("mr: memory region belongs to another protection domain")
	ErrAccess        = errors.New("mr: access not granted by the memory region")
	ErrBounds        = errors.New("mr: access outside the memory region")
	ErrInvalidAccess = errors.New("mr: remote write or atomic access requires local write") // ibv_reg_mr gives EINVAL
	ErrEmpty         = errors.New("mr: empty buffer")
	ErrPDBusy        = errors.New("mr: protection domain still has resources")
	ErrTableFull     = errors.New("mr: key table full")
)

// table is a device's key table: it maps lkeys and rkeys to memory regions
// and memory windows, which share one key space as on an HCA. A key is an
// index into the table and a random 8-bit tag, as hardware makes them, so
// that a stale or guessed key is rejected.
type table struct {
	mu     sync.Mutex
	slots  atomic.Pointer[[]slot] // copy-on-write: lookups take no lock
	free   []uint32
	tags   []uint8 // per index: the variant of the last key issued there
	closed atomic.Bool
}

// slot is one index of the key table: a region or a window, or neither.
type slot struct {
	mr *MR
	mw *MW
}

// close marks the table's device closed: from then on registering,
// deregistering and deallocating fail with an error wrapping
// ErrClosed. The device calls it on Close.
func (t *table) close() { t.closed.Store(true) }

// isClosed reports whether the table's device is closed.
func (t *table) isClosed() bool { return t.closed.Load() }

// errClosed wraps the closed device's error for call op.
func errPDClosed(op string) error { return fmt.Errorf("mr: %s: %w", op, closed.Err) }

// MaxRegions bounds the table (2^24 indexes fit in a key with its tag);
// regions and windows count together.
const MaxRegions = 1 << 24

// newTable returns an empty key table.
func newTable() *table {
	t := &table{tags: []uint8{0}}
	empty := []slot{{}} // index 0 is never used, so key 0 is always invalid
	t.slots.Store(&empty)
	return t
}

// insert puts s at a free index and returns the key issued for it.
func (t *table) insert(s slot) (uint32, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.slots.Load()
	var idx uint32
	if n := len(t.free); n > 0 {
		idx = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		idx = uint32(len(old))
		if idx >= MaxRegions {
			return 0, ErrTableFull
		}
	}
	slots := make([]slot, max(len(old), int(idx)+1))
	copy(slots, old)
	// Like an HCA's memory key: the index, and an 8-bit variant that starts
	// random for each index and advances on every reuse, so a stale key is
	// refused for the next 255 registrations at that index.
	if int(idx) >= len(t.tags) {
		t.tags = append(t.tags, uint8(rand.Uint32()))
	}
	t.tags[idx]++
	key := idx<<8 | uint32(t.tags[idx])
	switch {
	case s.mr != nil:
		s.mr.key.Store(key)
	case s.mw != nil:
		s.mw.rkey.Store(key)
	}
	slots[idx] = s
	t.slots.Store(&slots)
	return key, nil
}

// remove frees the index key names if s is still what it holds.
func (t *table) remove(key uint32, s slot) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.slots.Load()
	idx := key >> 8
	if int(idx) >= len(old) || old[idx] != s {
		return
	}
	slots := make([]slot, len(old))
	copy(slots, old)
	slots[idx] = slot{}
	t.slots.Store(&slots)
	t.free = append(t.free, idx)
}

// at returns what the index of key holds, without checking the tag.
func (t *table) at(key uint32) slot {
	slots := *t.slots.Load()
	idx := key >> 8
	if int(idx) >= len(slots) {
		return slot{}
	}
	return slots[idx]
}

// lookup returns the region a key names, or nil.
func (t *table) lookup(key uint32) *MR {
	m := t.at(key).mr
	if m == nil || m.key.Load() != key {
		return nil
	}
	return m
}

// PD is a protection domain: memory regions and queue pairs of one PD may
// only be used together.
type PD struct {
	table *table
	users atomic.Int32 // regions, QPs and SRQs created in it
	id    uint32
}

var pdIDs atomic.Uint32

// newPD creates a protection domain whose regions get keys from t.
func newPD(t *table) *PD { return &PD{table: t, id: pdIDs.Add(1)} }

// hold records a resource (QP, SRQ, AH, region) created in the PD, so that
// Dealloc refuses while it lives.
func (pd *PD) hold() { pd.users.Add(1) }

// release forgets a resource hold recorded, when it is destroyed.
func (pd *PD) release() { pd.users.Add(-1) }

// closed reports whether the PD's device is closed.
func (pd *PD) closed() bool { return pd.table.isClosed() }

// Dealloc checks that no region, QP or SRQ still uses the PD (ibv_dealloc_pd
// fails with EBUSY otherwise).
func (pd *PD) Dealloc() error {
	if pd.table.isClosed() {
		return errPDClosed("dealloc_pd")
	}
	if pd.users.Load() != 0 {
		return ErrPDBusy
	}
	return nil
}

// String names the PD for messages: "pd" and a number unique in the process.
func (pd *PD) String() string { return fmt.Sprintf("pd%d", pd.id) }

// MR is a memory region: a caller's buffer registered for local and remote
// access. Its bytes are read and written by the engine only while the region
// is valid; Dereg waits for any access in progress and revokes every later
// one at once.
type MR struct {
	pd     *PD
	buf    []byte
	iova   uint64
	access Access
	// key is both the lkey and the rkey (goroce issues one key per
	// region); atomic because a fast-registered region changes it
	// (WRRegMR) while the receive path looks keys up.
	key atomic.Uint32

	mu         sync.RWMutex // held shared by each access, exclusively by Dereg/Invalidate
	valid      bool         // accesses are granted: registered and not invalidated
	registered bool         // Dereg has not run: the key and the PD's count are held
	windows    atomic.Int32 // memory windows bound to it
	// fast marks a region for fast registration (AllocFastMR): its key,
	// range and rights change with each WRRegMR, under mu.
	fast    bool
	backing []byte // fast: the allocation a registration maps a range of

	mapping *Mapping // the mapping the buffer lies in, if any (mapping.go)
}

// Register registers buf in pd with the given access rights. Its I/O
// virtual address is the buffer's address in memory, as for ibv_reg_mr,
// or 0 with ZeroBased.
func (pd *PD) Register(buf []byte, access Access) (*MR, error) {
	if pd.table.isClosed() {
		return nil, errPDClosed("reg_mr")
	}
	if len(buf) == 0 {
		return nil, ErrEmpty
	}
	iova := uint64(uintptr(unsafe.Pointer(&buf[0])))
	if access&ZeroBased != 0 {
		iova = 0
	}
	return pd.RegisterIOVA(buf, iova, access)
}

// RegisterIOVA registers buf with a chosen I/O virtual address (ibv_reg_mr_iova).
func (pd *PD) RegisterIOVA(buf []byte, iova uint64, access Access) (*MR, error) {
	if pd.table.isClosed() {
		return nil, errPDClosed("reg_mr")
	}
	if len(buf) == 0 {
		return nil, ErrEmpty
	}
	// IBA 10.6.3.1 (and ibv_reg_mr): remote write or atomic access needs local write.
	if access&(RemoteWrite|RemoteAtomic) != 0 && access&LocalWrite == 0 {
		return nil, ErrInvalidAccess
	}
	m := &MR{pd: pd, buf: buf, iova: iova, access: access, valid: true, registered: true}
	if _, err := pd.table.insert(slot{mr: m}); err != nil {
		return nil, err
	}
	pd.hold()
	if err := attach(m); err != nil {
		m.Dereg() // its keys were never given out
		return nil, err
	}
	return m, nil
}

// Dereg deregisters the region (ibv_dereg_mr): once it returns, no key
// reaches the buffer. A second Dereg fails (an error wrapping
// ErrInvalidKey).
func (m *MR) Dereg() error {
	if m.pd.table.isClosed() {
		return errPDClosed("dereg_mr")
	}
	m.mu.Lock()
	was := m.registered
	if was && m.windows.Load() != 0 {
		// As rxe: unbind or free the windows first, whose rkeys would
		// otherwise reach freed memory.
		m.mu.Unlock()
		return fmt.Errorf("mr: dereg_mr: %w (%d)", ErrMWBound, m.windows.Load())
	}
	m.valid, m.registered = false, false
	m.mu.Unlock()
	if !was {
		return fmt.Errorf("mr: dereg_mr: the region was deregistered already: %w", ErrInvalidKey)
	}
	// Also after an invalidation, which revoked access but left the key
	// and the PD's count held.
	m.pd.table.remove(m.key.Load(), slot{mr: m})
	m.pd.release()
	detach(m)
	return nil
}

// Invalidate revokes remote access through the region's rkey, as a SEND
// with Invalidate or a local invalidate does; the region stays registered
// but every access fails until it is registered anew.
func (m *MR) Invalidate() {
	m.mu.Lock()
	m.valid = false
	m.mu.Unlock()
}

// LKey returns the local key: what an SGE of a local work request names
// the region by (SGE sets it).
func (m *MR) LKey() uint32 { return m.key.Load() }

// RKey returns the remote key: what a peer's RDMA READ, WRITE or atomic
// names the region by, with an address inside [Addr, Addr+Len). A program
// sends it to the peer together with Addr.
func (m *MR) RKey() uint32 { return m.key.Load() }

// Addr returns the region's I/O virtual address: the address of its first
// byte for local SGEs and for a peer's remote address (the buffer's
// address in memory, 0 for a ZeroBased region, or the one RegisterIOVA
// was given).
func (m *MR) Addr() uint64 {
	if m.fast {
		m.mu.RLock()
		defer m.mu.RUnlock()
	}
	return m.iova
}

// Len returns the region's length in bytes.
func (m *MR) Len() int {
	if m.fast {
		m.mu.RLock()
		defer m.mu.RUnlock()
	}
	return len(m.buf)
}

// Access returns the rights the region was registered with.
func (m *MR) Access() Access {
	if m.fast {
		m.mu.RLock()
		defer m.mu.RUnlock()
	}
	return m.access
}

// PD returns the protection domain the region belongs to.
func (m *MR) PD() *PD { return m.pd }

// Bytes returns the registered buffer itself (not a copy). The engine
// writes it when a receive, READ response or peer's WRITE lands: read it
// once a completion, or the peer, says the data is there.
func (m *MR) Bytes() []byte {
	if m.fast {
		m.mu.RLock()
		defer m.mu.RUnlock()
	}
	return m.buf
}

// SGE returns a scatter/gather element covering n bytes at offset off.
func (m *MR) SGE(off, n int) SGE {
	return SGE{Addr: m.Addr() + uint64(off), Length: uint32(n), LKey: m.key.Load()}
}

// SGE is a scatter/gather element, as struct ibv_sge: n bytes at an address
// inside the region named by an lkey.
type SGE struct {
	Addr   uint64 // I/O virtual address of the first byte, within the region
	Length uint32 // bytes
	LKey   uint32 // the region's local key
}

// acquire locks m for shared access and returns the bytes [addr, addr+n);
// endAccess unlocks it.
func (m *MR) acquire(pd *PD, addr uint64, n uint32, need Access) ([]byte, *MR, error) {
	m.mu.RLock()
	if !m.valid {
		m.mu.RUnlock()
		return nil, nil, ErrInvalidKey
	}
	if m.pd != pd {
		m.mu.RUnlock()
		return nil, nil, ErrPD
	}
	if m.access&need != need {
		m.mu.RUnlock()
		return nil, nil, ErrAccess
	}
	off := addr - m.iova
	// Written to be overflow-safe: addr below iova wraps to a huge offset.
	if addr < m.iova || off > uint64(len(m.buf)) || uint64(n) > uint64(len(m.buf))-off {
		m.mu.RUnlock()
		return nil, nil, ErrBounds
	}
	return m.buf[off : off+uint64(n)], m, nil
}

// endAccess ends an access local or remote granted.
func (m *MR) endAccess() { m.mu.RUnlock() }

// local checks an access through an lkey (an SGE of a work request of a
// QP in pd) and returns the bytes and their region, locked until
// endAccess.
func (pd *PD) local(lkey uint32, addr uint64, n uint32, need Access) ([]byte, *MR, error) {
	m := pd.table.lookup(lkey)
	if m == nil || m.key.Load() != lkey {
		return nil, nil, ErrInvalidKey
	}
	return m.acquire(pd, addr, n, need)
}

// remote checks an access through an rkey (a RETH or AtomicETH, to qp, a
// QP in pd) and returns the bytes and their region, locked until
// endAccess. The rkey may name a region or a memory window.
func (pd *PD) remote(qp *QP, rkey uint32, addr uint64, n uint32, need Access) ([]byte, *MR, error) {
	s := pd.table.at(rkey)
	if s.mw != nil {
		return s.mw.remote(pd, qp, rkey, addr, n, need)
	}
	m := s.mr
	if m == nil || m.key.Load() != rkey {
		return nil, nil, ErrInvalidKey
	}
	return m.acquire(pd, addr, n, need)
}

// invalidateRKey invalidates the region or type 2 window rkey names in pd,
// for a local invalidate by qp or (remote) a SEND with Invalidate from
// qp's peer, and says why it cannot.
func (pd *PD) invalidateRKey(qp *QP, rkey uint32, remote bool) error {
	s := pd.table.at(rkey)
	if s.mw != nil {
		return s.mw.invalidate(pd, qp, rkey, remote)
	}
	m := s.mr
	if m == nil || m.key.Load() != rkey {
		return fmt.Errorf("%w: rkey 0x%x", ErrInvalidKey, rkey)
	}
	if m.pd != pd {
		return fmt.Errorf("%w: rkey 0x%x", ErrPD, rkey)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.windows.Load() != 0 { // as rxe: the windows would outlive the region's access
		return fmt.Errorf("%w: rkey 0x%x", ErrMWBound, rkey)
	}
	m.valid = false
	return nil
}

// bindMW executes a bind of w posted on qp, a QP of pd (type1: through
// the verb), installing rkey.
func bindMW(pd *PD, qp *QP, w *MW, type1 bool, rkey uint32, b BindInfo) error {
	return w.bind(pd, qp, type1, rkey, b)
}
