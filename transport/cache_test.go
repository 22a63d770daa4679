package transport

import (
	"errors"
	"fmt"
	"testing"
)

// TestCacheHitsAndEvictions: a buffer inside a cached region is a hit;
// past MaxRegions the least recently used unused region is deregistered
// and reported; a region in use is never evicted.
func TestCacheHitsAndEvictions(t *testing.T) {
	pd := newPD(newTable())
	var evicted []string
	c := NewCache(pd, LocalWrite|RemoteRead, CacheOptions{MaxRegions: 2,
		OnEvict: func(m *MR, reason string) { evicted = append(evicted, fmt.Sprintf("%p %s", m, reason)) }})
	bufs := [][]byte{make([]byte, 4096), make([]byte, 4096), make([]byte, 4096)}
	m0, err := c.Get(bufs[0])
	if err != nil {
		t.Fatal(err)
	}
	if m0.Access() != LocalWrite|RemoteRead {
		t.Fatalf("access %v", m0.Access())
	}
	// A sub-slice of a cached buffer is a hit on the same region.
	if m, err := c.Get(bufs[0][100:200]); err != nil || m != m0 {
		t.Fatalf("sub-slice: %v %v", m, err)
	}
	sge, err := SGEOf(m0, bufs[0][100:200])
	if err != nil || sge.Addr != m0.Addr()+100 || sge.Length != 100 || sge.LKey != m0.LKey() {
		t.Fatalf("SGEOf: %+v %v", sge, err)
	}
	if _, err := SGEOf(m0, bufs[1]); !errors.Is(err, ErrBounds) {
		t.Fatalf("SGEOf outside: %v", err)
	}
	for range 2 {
		if err := c.Put(m0); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Put(m0); !errors.Is(err, ErrCacheNotInUse) {
		t.Fatalf("a third Put: %v", err)
	}
	m1, _ := c.Get(bufs[1])
	c.Put(m1)
	// The third region passes MaxRegions: m0, used least recently, goes.
	m2, _ := c.Get(bufs[2])
	if len(evicted) != 1 || evicted[0] != fmt.Sprintf("%p regions", m0) {
		t.Fatalf("evicted %v, want m0 for regions", evicted)
	}
	if pd.table.lookup(m0.LKey()) != nil {
		t.Fatal("an evicted region is still registered")
	}
	// m2 is in use and m1 is not: a fourth region evicts m1, never m2.
	b3 := make([]byte, 64)
	m3, _ := c.Get(b3)
	if len(evicted) != 2 || evicted[1] != fmt.Sprintf("%p regions", m1) {
		t.Fatalf("evicted %v, want m1 next", evicted)
	}
	st := c.Stats()
	if st.Hits != 1 || st.Misses != 4 || st.Evictions != 2 || st.Regions != 2 || st.InUse != 2 || st.Bytes != 4096+64 {
		t.Fatalf("stats %+v", st)
	}
	if err := c.Close(); !errors.Is(err, ErrCacheInUse) {
		t.Fatalf("Close while in use: %v", err)
	}
	if err := c.Evict(bufs[2][10:20]); !errors.Is(err, ErrCacheInUse) {
		t.Fatalf("Evict while in use: %v", err)
	}
	c.Put(m2)
	c.Put(m3)
	if err := c.Evict(bufs[2][10:20]); err != nil || len(evicted) != 3 || evicted[2] != fmt.Sprintf("%p evict", m2) {
		t.Fatalf("Evict: %v %v", err, evicted)
	}
	if err := c.Close(); err != nil || len(evicted) != 4 || evicted[3] != fmt.Sprintf("%p close", m3) {
		t.Fatalf("Close: %v %v", err, evicted)
	}
	if pd.Dealloc() != nil {
		t.Fatal("the PD still holds regions after Close")
	}
}

// TestCacheMaxBytes: past MaxBytes unused regions go, oldest first.
func TestCacheMaxBytes(t *testing.T) {
	pd := newPD(newTable())
	var reasons []string
	c := NewCache(pd, LocalWrite, CacheOptions{MaxBytes: 10000,
		OnEvict: func(m *MR, reason string) { reasons = append(reasons, fmt.Sprintf("%d %s", m.Len(), reason)) }})
	for _, n := range []int{4000, 5000, 3000} {
		m, err := c.Get(make([]byte, n))
		if err != nil {
			t.Fatal(err)
		}
		c.Put(m)
	}
	if len(reasons) != 1 || reasons[0] != "4000 bytes" || c.Stats().Bytes != 8000 {
		t.Fatalf("evicted %v, %d bytes held", reasons, c.Stats().Bytes)
	}
	if _, err := c.Get(nil); !errors.Is(err, ErrEmpty) {
		t.Fatalf("Get(nil): %v", err)
	}
}
