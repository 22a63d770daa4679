package transport

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Errors of mappings.
var (
	// ErrInUse: Close of a mapping that a registered region still covers.
	ErrInUse = errors.New("mr: a memory region over the mapping is still registered")
	// ErrUnmapped: a call on a mapping after its Close.
	ErrUnmapped = errors.New("mr: the mapping is closed")
	// ErrNoHugePages: MapHugePages found too few free hugepages.
	ErrNoHugePages = errors.New("mr: not enough free hugepages")
)

// MapOptions configure a mapping.
type MapOptions struct {
	// Lock locks the mapping's pages in memory (mlock(2)) once it is
	// mapped: every page is faulted in then, and none is paged out or
	// faulted again while the mapping lives, so no access through a
	// region over it waits for a page fault. An unprivileged process may
	// lock only RLIMIT_MEMLOCK bytes (ulimit -l).
	Lock bool
}

// Mapping is memory mapped outside the Go heap with mmap(2): anonymous
// memory (MapAnonymous), hugepages (MapHugePages) or a file's pages
// (MapFile). Register its Bytes, or any part of them, with PD.Register or
// PD.RegisterIOVA like any buffer; the mapping then knows the region
// covers it, and Close refuses (ErrInUse) until every such region is
// deregistered, or its device closed: the memory stays mapped, at the same
// address, for as long as the engine may reach it.
//
// Close unmaps; a mapping never closed stays mapped until the process
// exits (the garbage collector does not see it). Its methods are safe for
// concurrent use.
type Mapping struct {
	mem    []byte // the whole mapping, as munmap takes it
	n      int    // the length asked for: Bytes is mem[:n]
	closed atomic.Bool

	regions map[*MR]struct{} // the regions registered over it, under mappings.mu
}

// mappings is the process's open mappings, by address, so that Register
// can tell whether a buffer lies in one.
var mappings struct {
	mu   sync.Mutex
	open []*Mapping   // sorted by address
	n    atomic.Int32 // len(open): a program without mappings registers without the lock
}

// MapAnonymous maps length bytes of anonymous memory (mmap MAP_PRIVATE |
// MAP_ANONYMOUS), zeroed. Its pages are allocated when first touched.
func MapAnonymous(length int, opt MapOptions) (*Mapping, error) {
	if err := checkLength("map_anonymous", length); err != nil {
		return nil, err
	}
	mem, err := unix.Mmap(-1, 0, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("mr: map_anonymous %d bytes: mmap: %w", length, err)
	}
	return track("map_anonymous", mem, length, opt)
}

// MapHugePages maps length bytes of anonymous memory in hugepages of the
// system's default size (Hugepagesize in /proc/meminfo, 2 MiB on x86-64),
// with mmap MAP_HUGETLB: length is rounded up to a whole number of
// hugepages, of which Bytes gives the first length bytes. Hugepages come
// from a pool the administrator reserves (/proc/sys/vm/nr_hugepages); the
// kernel reserves the mapping's pages from it when mapping, so too few
// free hugepages fail here, with an error wrapping ErrNoHugePages, rather
// than at first touch.
func MapHugePages(length int, opt MapOptions) (*Mapping, error) {
	if err := checkLength("map_hugepages", length); err != nil {
		return nil, err
	}
	size, err := hugePageSize()
	if err != nil {
		return nil, fmt.Errorf("mr: map_hugepages: %w", err)
	}
	if length > int(^uint(0)>>1)-size {
		return nil, fmt.Errorf("mr: map_hugepages: length %d too large", length)
	}
	pages := (length + size - 1) / size
	mem, err := unix.Mmap(-1, 0, pages*size, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_HUGETLB)
	if errors.Is(err, unix.ENOMEM) {
		return nil, fmt.Errorf("mr: map_hugepages %d bytes (%d hugepages of %d KiB): %w (HugePages_Free in /proc/meminfo: %s); "+
			"reserve more as root by writing a count to /proc/sys/vm/nr_hugepages (mmap MAP_HUGETLB: %w)",
			length, pages, size>>10, ErrNoHugePages, freeHugePages(), err)
	}
	if err != nil {
		return nil, fmt.Errorf("mr: map_hugepages %d bytes: mmap MAP_HUGETLB: %w", length, err)
	}
	return track("map_hugepages", mem, length, opt)
}

// MapFile maps length bytes of f from offset (mmap MAP_SHARED): what the
// engine writes there is written to the file, what the file holds is what
// a peer reads. f must be open for reading and writing (os.O_RDWR), offset
// a multiple of the page size (os.Getpagesize), and [offset,
// offset+length) inside the file, since touching a page past the end of a
// file raises SIGBUS: extend it first (File.Truncate), and do not shrink
// it while mapped. f may be closed once mapped; Sync writes the mapped
// pages back.
func MapFile(f *os.File, offset int64, length int, opt MapOptions) (*Mapping, error) {
	if f == nil {
		return nil, errors.New("mr: map_file: no file")
	}
	if err := checkLength("map_file", length); err != nil {
		return nil, err
	}
	if offset < 0 {
		return nil, fmt.Errorf("mr: map_file %s: offset %d is negative", f.Name(), offset)
	}
	if ps := int64(os.Getpagesize()); offset%ps != 0 {
		return nil, fmt.Errorf("mr: map_file %s: offset %d is not a multiple of the page size %d (mmap maps whole pages)",
			f.Name(), offset, ps)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("mr: map_file %s: %w", f.Name(), err)
	}
	var mem []byte
	var merr error
	err = rc.Control(func(fd uintptr) {
		var st unix.Stat_t
		if merr = unix.Fstat(int(fd), &st); merr != nil {
			merr = fmt.Errorf("fstat: %w", merr)
			return
		}
		if st.Mode&unix.S_IFMT == unix.S_IFREG && (offset > st.Size || int64(length) > st.Size-offset) {
			merr = fmt.Errorf("offset %d and length %d reach past the end of the file (%d bytes), where a touch raises SIGBUS: extend it first (File.Truncate)",
				offset, length, st.Size)
			return
		}
		mem, merr = unix.Mmap(int(fd), offset, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if errors.Is(merr, unix.EACCES) {
			merr = fmt.Errorf("mmap: %w: the file must be open for reading and writing (os.O_RDWR)", merr)
		} else if merr != nil {
			merr = fmt.Errorf("mmap: %w", merr)
		}
	})
	if err != nil { // the only failure Control has
		err = fmt.Errorf("the file is closed: %w", err)
	} else {
		err = merr
	}
	if err != nil {
		return nil, fmt.Errorf("mr: map_file %s: %w", f.Name(), err)
	}
	return track("map_file", mem, length, opt)
}

// checkLength refuses a length mmap cannot take.
func checkLength(op string, length int) error {
	if length <= 0 {
		return fmt.Errorf("mr: %s: length %d: a mapping needs at least one byte", op, length)
	}
	return nil
}

// track locks mem if asked and records it among the open mappings.
func track(op string, mem []byte, n int, opt MapOptions) (*Mapping, error) {
	if opt.Lock {
		if err := unix.Mlock(mem); err != nil {
			unix.Munmap(mem)
			return nil, fmt.Errorf("mr: %s: mlock %d bytes: %w (an unprivileged process may lock RLIMIT_MEMLOCK bytes, ulimit -l)",
				op, len(mem), err)
		}
	}
	m := &Mapping{mem: mem, n: n, regions: map[*MR]struct{}{}}
	mappings.mu.Lock()
	i, _ := slices.BinarySearchFunc(mappings.open, m.start(), func(o *Mapping, a uintptr) int {
		return cmp.Compare(o.start(), a)
	})
	mappings.open = slices.Insert(mappings.open, i, m)
	mappings.n.Store(int32(len(mappings.open)))
	mappings.mu.Unlock()
	return m, nil
}

func (m *Mapping) start() uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(m.mem))) }
func (m *Mapping) end() uintptr   { return m.start() + uintptr(len(m.mem)) }

// Bytes returns the mapped memory itself, Len bytes; nil once the mapping
// is closed.
func (m *Mapping) Bytes() []byte {
	if m.closed.Load() {
		return nil
	}
	return m.mem[:m.n:m.n]
}

// Len returns the mapping's length in bytes, as it was asked for.
func (m *Mapping) Len() int { return m.n }

// Sync writes a file mapping's pages back to its file and waits for the
// writes (msync MS_SYNC); for anonymous memory it does nothing. Another
// process reading the file sees what the mapping holds without it.
func (m *Mapping) Sync() error {
	if m.closed.Load() {
		return fmt.Errorf("mr: msync: %w", ErrUnmapped)
	}
	if err := unix.Msync(m.mem, unix.MS_SYNC); err != nil {
		return fmt.Errorf("mr: msync: %w", err)
	}
	return nil
}

// Close unmaps the memory (munmap), unless a region registered over it is
// still registered on an open device: then it fails with an error
// wrapping ErrInUse and the memory stays mapped. A region whose device is
// closed (its Dereg fails) does not hold the mapping: Close revokes it as
// Dereg would, waiting for an access in progress. A second Close fails
// with ErrUnmapped. Once Close returns, Bytes of the mapping and of every
// region over it must no longer be touched: the memory is gone.
func (m *Mapping) Close() error {
	mappings.mu.Lock()
	defer mappings.mu.Unlock()
	if m.closed.Load() {
		return fmt.Errorf("mr: munmap: %w", ErrUnmapped)
	}
	held := 0
	for r := range m.regions {
		if !r.pd.closed() {
			held++
		}
	}
	if held > 0 {
		return fmt.Errorf("mr: munmap: %d registered memory region(s) cover the mapping; deregister them first: %w",
			held, ErrInUse)
	}
	for r := range m.regions {
		r.mu.Lock()
		r.valid = false
		r.mu.Unlock()
		delete(m.regions, r)
	}
	mappings.open = slices.DeleteFunc(mappings.open, func(o *Mapping) bool { return o == m })
	mappings.n.Store(int32(len(mappings.open)))
	m.closed.Store(true)
	if err := unix.Munmap(m.mem); err != nil {
		return fmt.Errorf("mr: munmap: %w", err)
	}
	return nil
}

// attach records r in the mapping its buffer lies in, if any, so that the
// mapping's Close refuses while r is registered. RegisterIOVA calls it; a
// buffer that starts in a mapping and runs past its end is refused.
func attach(r *MR) error {
	if mappings.n.Load() == 0 {
		return nil
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(r.buf)))
	end := start + uintptr(len(r.buf))
	mappings.mu.Lock()
	defer mappings.mu.Unlock()
	// The first mapping that ends after the buffer's first byte.
	i, _ := slices.BinarySearchFunc(mappings.open, start, func(o *Mapping, a uintptr) int {
		if o.end() <= a {
			return -1
		}
		return 1
	})
	if i == len(mappings.open) || mappings.open[i].start() >= end {
		return nil // in no mapping: the Go heap, or memory mapped by other means
	}
	m := mappings.open[i]
	if start < m.start() || end > m.end() {
		return fmt.Errorf("mr: reg_mr: the buffer [%#x, %#x) is partly inside the mapping [%#x, %#x): %w",
			start, end, m.start(), m.end(), ErrBounds)
	}
	m.regions[r] = struct{}{}
	r.mapping = m
	return nil
}

// detach forgets r in its mapping, when Dereg runs.
func detach(r *MR) {
	if r.mapping == nil {
		return
	}
	mappings.mu.Lock()
	delete(r.mapping.regions, r)
	mappings.mu.Unlock()
}

// hugePageSize returns the default hugepage size from /proc/meminfo.
func hugePageSize() (int, error) {
	kb, err := meminfo("Hugepagesize")
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSuffix(kb, " kB"))
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("/proc/meminfo: Hugepagesize %q", kb)
	}
	return n << 10, nil
}

// freeHugePages returns HugePages_Free from /proc/meminfo, for messages.
func freeHugePages() string {
	v, err := meminfo("HugePages_Free")
	if err != nil {
		return "(unknown: " + err.Error() + ")"
	}
	return v
}

// meminfo returns the value of a field of /proc/meminfo.
func meminfo(field string) (string, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), ":"); ok && k == field {
			return strings.TrimSpace(v), nil
		}
	}
	if err := s.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("/proc/meminfo has no %s: the kernel has no hugetlb support", field)
}
