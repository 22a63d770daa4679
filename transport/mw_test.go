package transport

import (
	"bytes"
	"errors"
	"testing"
)

// mwEnv is a PD with a 4 KiB region that allows binding, and two QPs
// (two QPs never created: only their identities count here).
type mwEnv struct {
	pd       *PD
	m        *MR
	qpA, qpB *QP
}

func newMWEnv(t testing.TB) *mwEnv {
	t.Helper()
	pd := newPD(newTable())
	buf := make([]byte, 4096)
	for i := range buf {
		buf[i] = byte(i)
	}
	m, err := pd.RegisterIOVA(buf, 0x10000, LocalWrite|MWBind)
	if err != nil {
		t.Fatal(err)
	}
	return &mwEnv{pd: pd, m: m, qpA: new(QP), qpB: new(QP)}
}

// TestMWBindRules checks each rule a bind enforces, by the error that
// names it.
func TestMWBindRules(t *testing.T) {
	e := newMWEnv(t)
	other := newPD(e.pd.table)
	noBind, _ := e.pd.RegisterIOVA(make([]byte, 64), 0x20000, LocalWrite)
	readOnly, _ := e.pd.RegisterIOVA(make([]byte, 64), 0x30000, MWBind)
	zb, _ := e.pd.Register(make([]byte, 64), LocalWrite|MWBind|ZeroBased)
	otherMR, _ := other.RegisterIOVA(make([]byte, 64), 0x40000, LocalWrite|MWBind)
	w1, _ := e.pd.AllocMW(MWType1)
	w2, _ := e.pd.AllocMW(MWType2)
	in := BindInfo{MR: e.m, Addr: 0x10000, Length: 4096, Access: RemoteRead}
	cases := []struct {
		name  string
		w     *MW
		type1 bool
		key   uint32 // 0: the window's next key
		pd    *PD
		b     BindInfo
		want  error
	}{
		{"type 2 whole region", w2, false, 0, nil, in, nil},
		{"type 2 bound already (o10-37.2.30)", w2, false, 0, nil, in, ErrMWState},
		{"type 1 through a work request", w1, false, 0, nil, in, ErrMWType},
		{"type 2 through the verb", w2, true, 0, nil, in, ErrMWType},
		{"another PD's QP (C10-72)", w1, true, 0, other, in, ErrPD},
		{"another PD's region", w1, true, 0, nil, BindInfo{MR: otherMR, Addr: 0x40000, Length: 8}, ErrPD},
		{"region without MW_BIND (C10-73)", w1, true, 0, nil, BindInfo{MR: noBind, Addr: 0x20000, Length: 8}, ErrMWBind},
		{"remote write on a region without local write (C10-74)", w1, true, 0, nil, BindInfo{MR: readOnly, Addr: 0x30000, Length: 8, Access: RemoteWrite}, ErrInvalidAccess},
		{"remote read on a region without local write", w1, true, 0, nil, BindInfo{MR: readOnly, Addr: 0x30000, Length: 8, Access: RemoteRead}, nil},
		{"past the end (C10-75)", w1, true, 0, nil, BindInfo{MR: e.m, Addr: 0x10001, Length: 4096}, ErrMWRange},
		{"before the start", w1, true, 0, nil, BindInfo{MR: e.m, Addr: 0xffff, Length: 2}, ErrMWRange},
		{"length wraps", w1, true, 0, nil, BindInfo{MR: e.m, Addr: 0x10010, Length: ^uint64(0)}, ErrMWRange},
		{"zero-based region", w1, true, 0, nil, BindInfo{MR: zb, Addr: 0, Length: 8}, ErrMWZeroBase},
		{"zero-based type 1 (o10-36.2.2)", w1, true, 0, nil, BindInfo{MR: e.m, Addr: 0x10000, Length: 8, Access: ZeroBased}, ErrMWZeroBase},
		{"key of another index", w1, true, 0x100, nil, in, ErrMWKey},
		{"type 1 unbind", w1, true, 0, nil, BindInfo{}, nil},
	}
	for _, c := range cases {
		pd := e.pd
		if c.pd != nil {
			pd = c.pd
		}
		key := IncRKey(c.w.RKey())
		if c.key != 0 {
			key = c.w.RKey() + c.key
		}
		before, wasBound := c.w.Bound()
		err := bindMW(pd, e.qpA, c.w, c.type1, key, c.b)
		if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
			continue
		}
		if err != nil {
			if after, isBound := c.w.Bound(); after != before || isBound != wasBound {
				t.Errorf("%s: a failed bind changed the window: %+v", c.name, after)
			}
			continue
		}
		if c.w.RKey() != key {
			t.Errorf("%s: rkey 0x%x, want 0x%x", c.name, c.w.RKey(), key)
		}
	}
}

// TestMWType2Variant: each bind of a type 2 window installs the key it
// is given (ibv_inc_rkey's next variant); the old key stops working, a
// key of the right index but a stale variant never reaches memory.
func TestMWType2Variant(t *testing.T) {
	e := newMWEnv(t)
	w, _ := e.pd.AllocMW(MWType2)
	seen := map[uint32]bool{w.RKey(): true}
	key := w.RKey()
	for i := range 300 {
		next := IncRKey(key)
		if next>>8 != key>>8 || next == key {
			t.Fatalf("IncRKey(0x%x) = 0x%x", key, next)
		}
		if err := bindMW(e.pd, e.qpA, w, false, next, BindInfo{MR: e.m, Addr: 0x10000, Length: 16, Access: RemoteRead}); err != nil {
			t.Fatalf("bind %d: %v", i, err)
		}
		if _, _, err := e.pd.remote(e.qpA, key, 0x10000, 1, RemoteRead); err == nil {
			t.Fatalf("bind %d: the previous key 0x%x still works", i, key)
		}
		b, m, err := e.pd.remote(e.qpA, next, 0x10000, 16, RemoteRead)
		if err != nil || !bytes.Equal(b, e.m.Bytes()[:16]) {
			t.Fatalf("bind %d: access through 0x%x: %v", i, next, err)
		}
		m.endAccess()
		if err := e.pd.invalidateRKey(e.qpA, next, false); err != nil {
			t.Fatalf("invalidate %d: %v", i, err)
		}
		seen[next] = true
		key = next
	}
	if len(seen) != 256 {
		t.Fatalf("%d distinct keys in 300 binds, want all 256 variants", len(seen))
	}
}

// TestMWInvalidateRules: what a local invalidate and a SEND with
// Invalidate may free, and what not.
func TestMWInvalidateRules(t *testing.T) {
	e := newMWEnv(t)
	w1, _ := e.pd.AllocMW(MWType1)
	w2, _ := e.pd.AllocMW(MWType2)
	k1 := IncRKey(w1.RKey())
	if err := bindMW(e.pd, e.qpA, w1, true, k1, BindInfo{MR: e.m, Addr: 0x10000, Length: 8, Access: RemoteRead}); err != nil {
		t.Fatal(err)
	}
	if err := e.pd.invalidateRKey(e.qpA, w2.RKey(), false); !errors.Is(err, ErrMWState) {
		t.Errorf("free type 2: %v", err)
	}
	if err := e.pd.invalidateRKey(e.qpA, k1, false); !errors.Is(err, ErrMWType) {
		t.Errorf("type 1 (o10-37.2.26): %v", err)
	}
	// The region a window is bound to: not while the window is bound.
	if err := e.pd.invalidateRKey(e.qpA, e.m.RKey(), true); !errors.Is(err, ErrMWBound) {
		t.Errorf("region in use by a window: %v", err)
	}
	k2 := IncRKey(w2.RKey())
	if err := bindMW(e.pd, e.qpA, w2, false, k2, BindInfo{MR: e.m, Addr: 0x10000, Length: 8, Access: RemoteRead}); err != nil {
		t.Fatal(err)
	}
	if err := e.pd.invalidateRKey(e.qpA, IncRKey(k2), false); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("stale variant: %v", err)
	}
	if err := newPD(e.pd.table).invalidateRKey(e.qpA, k2, false); !errors.Is(err, ErrPD) {
		t.Errorf("another PD: %v", err)
	}
	if err := e.pd.invalidateRKey(e.qpB, k2, true); !errors.Is(err, ErrMWQP) {
		t.Errorf("SEND with Invalidate from another QP's peer: %v", err)
	}
	if err := e.pd.invalidateRKey(e.qpB, k2, false); err != nil {
		t.Errorf("local invalidate: %v", err)
	}
	if e.m.windows.Load() != 1 {
		t.Errorf("%d windows on the region, want 1 (the type 1)", e.m.windows.Load())
	}
	if err := e.m.Dereg(); !errors.Is(err, ErrMWBound) {
		t.Errorf("Dereg: %v", err)
	}
	if err := w1.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Dereg(); err != nil {
		t.Errorf("Dereg once no window is bound: %v", err)
	}
}

// FuzzMW runs a sequence of binds, invalidations, deallocations and
// remote accesses drawn from the input against one region and two
// windows, and checks after each step that:
//   - a remote access through a window succeeds only inside the range
//     the window is bound to now, with a right it grants, from the QP it
//     is bound to (type 2), and returns exactly those bytes of the region;
//   - a failed bind or invalidation leaves the window as it was;
//   - the region counts exactly the windows bound to it.
func FuzzMW(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 16, 1, 3, 0, 0, 8, 0})
	f.Add([]byte{0, 1, 0, 0, 16, 1, 3, 1, 0, 8, 1, 2, 1, 3, 1, 0, 8})
	f.Add([]byte{0, 1, 1, 10, 255, 7, 3, 1, 10, 8, 4, 4, 0, 5, 1})
	f.Fuzz(func(t *testing.T, in []byte) {
		e := newMWEnv(t)
		ws := [2]*MW{}
		ws[0], _ = e.pd.AllocMW(MWType1)
		ws[1], _ = e.pd.AllocMW(MWType2)
		qps := [2]*QP{e.qpA, e.qpB}
		next := func() byte {
			if len(in) == 0 {
				return 0
			}
			b := in[0]
			in = in[1:]
			return b
		}
		for len(in) > 0 {
			op, wi := next()%6, next()%2
			w := ws[wi]
			switch op {
			case 0, 1: // bind: key variant, offset, length, access, QP
				key := IncRKey(w.RKey())
				if v := next(); v%5 == 4 {
					key = w.RKey()&^0xff | uint32(v)
				}
				b := BindInfo{MR: e.m, Addr: 0x10000 + uint64(next())*17, Length: uint64(next()) * 19,
					Access: Access(next()) & (RemoteRead | RemoteWrite | RemoteAtomic | ZeroBased)}
				before, was := w.Bound()
				err := bindMW(e.pd, qps[next()%2], w, w.typ == MWType1, key, b)
				if after, is := w.Bound(); err != nil && (after != before || is != was) {
					t.Fatalf("failed bind (%v) changed the window", err)
				}
			case 2: // invalidate, local or remote
				before, was := w.Bound()
				err := e.pd.invalidateRKey(qps[next()%2], w.RKey(), next()%2 == 0)
				if after, is := w.Bound(); err != nil && (after != before || is != was) {
					t.Fatalf("failed invalidation (%v) changed the window", err)
				}
			case 3: // remote access through the window's key
				addr, n := 0x10000+uint64(next())*13, uint32(next())*11
				need := []Access{RemoteRead, RemoteWrite, RemoteAtomic}[next()%3]
				qpi := next() % 2
				got, m, err := e.pd.remote(qps[qpi], w.RKey(), addr, n, need)
				if err != nil {
					continue
				}
				m.endAccess()
				b, ok := w.Bound()
				if !ok || b.Access&need == 0 || (w.typ == MWType2 && w.qp != qps[qpi]) {
					t.Fatalf("access granted: bound %v %+v, need %v", ok, b, need)
				}
				off := addr
				if b.Access&ZeroBased == 0 {
					off = addr - b.Addr
				}
				if addr < b.Addr && b.Access&ZeroBased == 0 || off+uint64(n) > b.Length {
					t.Fatalf("access 0x%x+%d outside the window %+v", addr, n, b)
				}
				start := b.Addr - 0x10000 + off
				if !bytes.Equal(got, e.m.Bytes()[start:start+uint64(n)]) {
					t.Fatal("access returned other bytes")
				}
			case 4: // dealloc and replace the window
				if err := w.Dealloc(); err != nil {
					t.Fatal(err)
				}
				if _, _, err := e.pd.remote(e.qpA, w.RKey(), 0x10000, 1, RemoteRead); err == nil {
					t.Fatal("a deallocated window's key works")
				}
				ws[wi], _ = e.pd.AllocMW(w.typ)
			case 5: // the region's own key, as an invalidation target
				_ = e.pd.invalidateRKey(e.qpA, e.m.RKey(), true)
				if e.m.windows.Load() != 0 && !e.m.valid {
					t.Fatal("a region with bound windows was invalidated")
				}
			}
			bound := int32(0)
			for _, w := range ws {
				if b, ok := w.Bound(); ok && b.MR == e.m {
					bound++
				}
			}
			if e.m.windows.Load() != bound {
				t.Fatalf("region counts %d windows, %d are bound", e.m.windows.Load(), bound)
			}
		}
	})
}
