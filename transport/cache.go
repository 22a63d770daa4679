package transport

import (
	"container/list"
	"errors"
	"fmt"
	"sync"
	"unsafe"
)

// Cache is a registration cache, the strategy UCX's rcache and the MPI
// libraries use so that a program sending from buffers it allocates as
// it goes does not pay a registration per message: Get returns a region
// covering a buffer, registering it on a miss and reusing one on a hit.
// A region is in use from Get to Put and is never evicted then; once
// unused it stays registered for the next Get until the cache holds more
// than its limits, when the least recently used unused regions are
// deregistered, each reported to OnEvict with the reason.
//
// A cached region keeps its buffer alive and registered: a program that
// frees a buffer's memory some other way (a Mapping's Close) must Evict
// it first. The regions' addresses are the buffers' own (not zero-based),
// so an SGE is SGEOf(region, buf).
type Cache struct {
	pd     *PD
	access Access
	o      CacheOptions

	mu      sync.Mutex
	entries map[*MR]*cacheEntry
	unused  *list.List // of *cacheEntry, least recently used first
	bytes   int
	stats   CacheStats
}

// CacheOptions bounds a Cache and says what it evicts.
type CacheOptions struct {
	MaxRegions int // regions kept registered, in use or not (0: 64)
	MaxBytes   int // their bytes (0: no bound)
	// OnEvict, if set, is called (without the cache's lock) with each
	// region the cache deregisters and why: "regions" or "bytes" (a limit
	// was passed), "evict" (Evict) or "close".
	OnEvict func(m *MR, reason string)
}

// CacheStats counts what a Cache did.
type CacheStats struct {
	Hits      uint64 // Gets a cached region covered
	Misses    uint64 // Gets that registered
	Evictions uint64 // regions deregistered (limits, Evict, Close)
	// Regions, InUse and Bytes are what the cache holds now.
	Regions, InUse, Bytes int
}

type cacheEntry struct {
	m          *MR
	start, end uintptr
	refs       int
	elem       *list.Element // in unused while refs == 0
}

// ErrCacheInUse is Evict or Close of a region in use (between Get and
// Put).
var ErrCacheInUse = errors.New("mr: cached region in use")

// NewCache returns a cache of regions in pd registered with access.
func NewCache(pd *PD, access Access, o CacheOptions) *Cache {
	if o.MaxRegions <= 0 {
		o.MaxRegions = 64
	}
	return &Cache{pd: pd, access: access, o: o, entries: map[*MR]*cacheEntry{}, unused: list.New()}
}

// span is the address range of b.
func sliceSpan(b []byte) (uintptr, uintptr) {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p, p + uintptr(len(b))
}

// Get returns a region of the cache's access covering buf, in use until
// Put: a cached one whose range holds buf's, or a new registration of
// buf, evicting unused regions past the limits.
func (c *Cache) Get(buf []byte) (*MR, error) {
	if len(buf) == 0 {
		return nil, ErrEmpty
	}
	start, end := sliceSpan(buf)
	c.mu.Lock()
	for _, e := range c.entries {
		if e.start <= start && end <= e.end {
			c.stats.Hits++
			c.hold(e)
			c.mu.Unlock()
			return e.m, nil
		}
	}
	c.stats.Misses++
	c.mu.Unlock()
	// Registering takes no cache lock: another Get may register the same
	// buffer meanwhile, and both regions are cached.
	m, err := c.pd.Register(buf, c.access)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	e := &cacheEntry{m: m, start: start, end: end, refs: 1}
	c.entries[m] = e
	c.bytes += len(buf)
	evicted := c.trim()
	c.mu.Unlock()
	c.report(evicted)
	return m, nil
}

// hold marks e in use; c.mu is held.
func (c *Cache) hold(e *cacheEntry) {
	if e.refs == 0 {
		c.unused.Remove(e.elem)
		e.elem = nil
	}
	e.refs++
}

// ErrCacheNotInUse is Put of a region the cache did not give out.
var ErrCacheNotInUse = errors.New("mr: Put of a region not in use from this cache")

// Put ends a use of m that Get began.
func (c *Cache) Put(m *MR) error {
	c.mu.Lock()
	e, ok := c.entries[m]
	if !ok || e.refs == 0 {
		c.mu.Unlock()
		return ErrCacheNotInUse
	}
	e.refs--
	if e.refs == 0 {
		e.elem = c.unused.PushBack(e)
	}
	evicted := c.trim()
	c.mu.Unlock()
	c.report(evicted)
	return nil
}

type eviction struct {
	m      *MR
	reason string
}

// trim takes the least recently used unused regions out while the cache
// is past a limit; c.mu is held. The caller deregisters and reports them.
func (c *Cache) trim() []eviction {
	var out []eviction
	for c.unused.Len() > 0 {
		reason := ""
		switch {
		case len(c.entries) > c.o.MaxRegions:
			reason = "regions"
		case c.o.MaxBytes > 0 && c.bytes > c.o.MaxBytes:
			reason = "bytes"
		default:
			return out
		}
		e := c.unused.Remove(c.unused.Front()).(*cacheEntry)
		c.drop(e)
		out = append(out, eviction{e.m, reason})
	}
	return out
}

// drop forgets e; c.mu is held.
func (c *Cache) drop(e *cacheEntry) {
	delete(c.entries, e.m)
	c.bytes -= int(e.end - e.start)
	c.stats.Evictions++
}

// report deregisters evicted regions and tells OnEvict.
func (c *Cache) report(evicted []eviction) {
	for _, ev := range evicted {
		ev.m.Dereg()
		if c.o.OnEvict != nil {
			c.o.OnEvict(ev.m, ev.reason)
		}
	}
}

// Evict deregisters the cached regions that overlap buf, for a program
// about to free or reuse that memory. A region in use fails it with
// ErrCacheInUse, and none is evicted.
func (c *Cache) Evict(buf []byte) error {
	start, end := sliceSpan(buf)
	c.mu.Lock()
	var hit []*cacheEntry
	for _, e := range c.entries {
		if e.start < end && start < e.end {
			if e.refs > 0 {
				c.mu.Unlock()
				return fmt.Errorf("%w: rkey 0x%x", ErrCacheInUse, e.m.RKey())
			}
			hit = append(hit, e)
		}
	}
	var evicted []eviction
	for _, e := range hit {
		c.unused.Remove(e.elem)
		c.drop(e)
		evicted = append(evicted, eviction{e.m, "evict"})
	}
	c.mu.Unlock()
	c.report(evicted)
	return nil
}

// Close deregisters every cached region; it fails with ErrCacheInUse,
// evicting nothing, while one is in use.
func (c *Cache) Close() error {
	c.mu.Lock()
	for _, e := range c.entries {
		if e.refs > 0 {
			c.mu.Unlock()
			return fmt.Errorf("%w: rkey 0x%x", ErrCacheInUse, e.m.RKey())
		}
	}
	var evicted []eviction
	for e := c.unused.Front(); e != nil; e = e.Next() {
		ce := e.Value.(*cacheEntry)
		c.drop(ce)
		evicted = append(evicted, eviction{ce.m, "close"})
	}
	c.unused.Init()
	c.mu.Unlock()
	c.report(evicted)
	return nil
}

// Stats returns the cache's counters and what it holds now.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Regions, s.Bytes = len(c.entries), c.bytes
	s.InUse = len(c.entries) - c.unused.Len()
	return s
}

// SGEOf returns the scatter/gather element for b, which must lie inside
// m (a region whose address is its buffer's, as a Cache's are).
func SGEOf(m *MR, b []byte) (SGE, error) {
	start, end := sliceSpan(b)
	mb := m.Bytes()
	ms, me := sliceSpan(mb)
	if len(b) == 0 || start < ms || end > me {
		return SGE{}, fmt.Errorf("%w: buffer not inside the region", ErrBounds)
	}
	return m.SGE(int(start-ms), len(b)), nil
}
