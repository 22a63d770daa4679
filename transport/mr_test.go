package transport

import (
	"errors"
	"sync"
	"testing"
)

func TestKeysAndChecks(t *testing.T) {
	tab := newTable()
	pd, other := newPD(tab), newPD(tab)
	buf := make([]byte, 1000)
	m, err := pd.RegisterIOVA(buf, 0x10000, LocalWrite|RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	if m.LKey() == 0 || m.LKey()>>8 == 0 {
		t.Fatalf("key %#x: index 0 must never be used", m.LKey())
	}
	cases := []struct {
		name string
		pd   *PD
		key  uint32
		addr uint64
		n    uint32
		need Access
		err  error
	}{
		{"whole region", pd, m.RKey(), 0x10000, 1000, RemoteRead, nil},
		{"last byte", pd, m.RKey(), 0x10000 + 999, 1, RemoteRead, nil},
		{"zero bytes at the end", pd, m.RKey(), 0x10000 + 1000, 0, RemoteRead, nil},
		{"one past the end", pd, m.RKey(), 0x10000 + 999, 2, RemoteRead, ErrBounds},
		{"below the start", pd, m.RKey(), 0xffff, 1, RemoteRead, ErrBounds},
		{"length overflowing", pd, m.RKey(), 0x10001, 0xffffffff, RemoteRead, ErrBounds},
		{"address far above", pd, m.RKey(), 1 << 63, 1, RemoteRead, ErrBounds},
		{"right not granted", pd, m.RKey(), 0x10000, 1, RemoteWrite, ErrAccess},
		{"other PD", other, m.RKey(), 0x10000, 1, RemoteRead, ErrPD},
		{"wrong tag", pd, m.RKey() ^ 1, 0x10000, 1, RemoteRead, ErrInvalidKey},
		{"unknown index", pd, 0x7f0000, 0x10000, 1, RemoteRead, ErrInvalidKey},
	}
	for _, c := range cases {
		b, r, err := c.pd.remote(nil, c.key, c.addr, c.n, c.need)
		if !errors.Is(err, c.err) {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
		}
		if err == nil {
			if len(b) != int(c.n) || r != m {
				t.Errorf("%s: %d bytes of %p, want %d of %p", c.name, len(b), r, c.n, m)
			}
			r.endAccess()
		}
	}
}

func TestRegisterRules(t *testing.T) {
	pd := newPD(newTable())
	if _, err := pd.Register(make([]byte, 8), RemoteWrite); !errors.Is(err, ErrInvalidAccess) {
		t.Errorf("remote write without local write: %v", err)
	}
	if _, err := pd.Register(nil, LocalWrite); !errors.Is(err, ErrEmpty) {
		t.Errorf("empty: %v", err)
	}
	m, err := pd.Register(make([]byte, 8), LocalWrite|ZeroBased)
	if err != nil {
		t.Fatal(err)
	}
	if m.Addr() != 0 {
		t.Errorf("zero-based region at %#x", m.Addr())
	}
	if err := pd.Dealloc(); !errors.Is(err, ErrPDBusy) {
		t.Errorf("dealloc with a region: %v", err)
	}
	if err := m.Dereg(); err != nil {
		t.Errorf("dereg: %v", err)
	}
	if err := pd.Dealloc(); err != nil {
		t.Errorf("dealloc: %v", err)
	}
}

func TestKeysNotPredictable(t *testing.T) {
	pd := newPD(newTable())
	seen := map[uint32]bool{}
	var prev uint32
	same := 0
	for range 200 {
		m, err := pd.Register(make([]byte, 8), LocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		k := m.LKey()
		if seen[k] {
			t.Fatalf("key %#x reissued", k)
		}
		seen[k] = true
		if k&0xff == prev&0xff {
			same++
		}
		prev = k
		if err := m.Dereg(); err != nil { // the index is reused at once; the tag must differ
			t.Fatal(err)
		}
	}
	if same > 10 {
		t.Errorf("tag repeated %d times in 200 registrations", same)
	}
}

// Dereg waits for an access in progress and refuses every later one.
func TestDeregIsImmediate(t *testing.T) {
	pd := newPD(newTable())
	m, err := pd.Register(make([]byte, 64), LocalWrite|RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	_, r, err := pd.remote(nil, m.RKey(), m.Addr(), 8, RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		m.Dereg()
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("Dereg returned while an access was in progress")
	default:
	}
	r.endAccess()
	wg.Wait()
	if _, _, err := pd.remote(nil, m.RKey(), m.Addr(), 8, RemoteWrite); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("after Dereg: %v", err)
	}
}

// TestDeregOnce: Dereg frees the key and the PD's count once, also after
// an invalidation (a SEND with Invalidate), and a second Dereg is refused.
func TestDeregOnce(t *testing.T) {
	pd := newPD(newTable())
	for _, invalidate := range []bool{false, true} {
		m, err := pd.Register(make([]byte, 8), LocalWrite|RemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		if invalidate && pd.invalidateRKey(nil, m.RKey(), true) != nil {
			t.Fatal("invalidate")
		}
		if err := m.Dereg(); err != nil {
			t.Fatalf("invalidated %v: dereg: %v", invalidate, err)
		}
		if pd.table.lookup(m.LKey()) != nil {
			t.Fatalf("invalidated %v: the key still names the region", invalidate)
		}
		if err := pd.Dealloc(); err != nil {
			t.Fatalf("invalidated %v: dealloc after dereg: %v", invalidate, err)
		}
		if err := m.Dereg(); !errors.Is(err, ErrInvalidKey) || err.Error() != "mr: dereg_mr: the region was deregistered already: "+ErrInvalidKey.Error() {
			t.Fatalf("invalidated %v: second dereg: %v", invalidate, err)
		}
	}
}
