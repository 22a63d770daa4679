package transport

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestMappingCloseWhileRegistered: Close refuses while any region over the
// mapping (the whole of it, or a part) is registered, and unmaps once the
// last is deregistered; a region over the Go heap holds no mapping.
func TestMappingCloseWhileRegistered(t *testing.T) {
	pd := newPD(newTable())
	m, err := MapAnonymous(4*os.Getpagesize(), MapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	whole, err := pd.Register(m.Bytes(), LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	part, err := pd.Register(m.Bytes()[100:200], LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	heap, err := pd.Register(make([]byte, 64), LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if heap.mapping != nil {
		t.Error("a heap buffer was taken for the mapping's")
	}
	for _, r := range []*MR{whole, part} {
		err := m.Close()
		if !errors.Is(err, ErrInUse) || m.Bytes() == nil {
			t.Fatalf("Close with regions registered: %v, Bytes %d", err, len(m.Bytes()))
		}
		m.Bytes()[0] = 1 // still mapped
		if err := r.Dereg(); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Close(); err != nil {
		t.Fatalf("Close after Dereg: %v", err)
	}
	if m.Bytes() != nil || m.Len() != 4*os.Getpagesize() {
		t.Errorf("after Close: Bytes %d bytes, Len %d", len(m.Bytes()), m.Len())
	}
	if err := m.Close(); !errors.Is(err, ErrUnmapped) {
		t.Errorf("second Close: %v", err)
	}
	if err := m.Sync(); !errors.Is(err, ErrUnmapped) {
		t.Errorf("Sync after Close: %v", err)
	}
	if err := heap.Dereg(); err != nil {
		t.Fatal(err)
	}
	if err := pd.Dealloc(); err != nil {
		t.Errorf("dealloc: %v", err)
	}
}

// TestMappingStraddle: a buffer that starts in a mapping and runs past it,
// or starts before one and runs into it, is refused (the engine would
// reach memory the mapping does not keep alive). Neither buffer's bytes
// are touched.
func TestMappingStraddle(t *testing.T) {
	ps := os.Getpagesize()
	pd := newPD(newTable())
	m, err := MapAnonymous(2*ps, MapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	base := unsafe.Pointer(unsafe.SliceData(m.Bytes()))
	for name, buf := range map[string][]byte{
		"past the end":     unsafe.Slice((*byte)(unsafe.Add(base, ps)), 2*ps),
		"before the start": unsafe.Slice((*byte)(unsafe.Add(base, -ps)), 2*ps),
	} {
		if r, err := pd.Register(buf, LocalWrite); !errors.Is(err, ErrBounds) || !strings.Contains(err.Error(), "partly inside the mapping") {
			t.Errorf("%s: %v %v", name, r, err)
		}
	}
	if err := pd.Dealloc(); err != nil {
		t.Errorf("a refused registration left the PD held: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("a refused registration left the mapping held: %v", err)
	}
}

// TestMappingAfterDeviceClose: a region whose device is closed (its Dereg
// fails) does not hold the mapping; Close revokes it, so an access that
// still came would fail instead of touching unmapped memory.
func TestMappingAfterDeviceClose(t *testing.T) {
	tab := newTable()
	pd := newPD(tab)
	m, err := MapAnonymous(4096, MapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := pd.Register(m.Bytes(), LocalWrite|RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); !errors.Is(err, ErrInUse) {
		t.Fatalf("Close with the device open: %v", err)
	}
	tab.close() // what Device.Close does
	if err := r.Dereg(); err == nil {
		t.Fatal("Dereg on a closed device succeeded")
	}
	if err := m.Close(); err != nil {
		t.Fatalf("Close after the device closed: %v", err)
	}
	if _, _, err := pd.remote(nil, r.RKey(), r.Addr(), 8, RemoteWrite); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("access after the mapping closed: %v", err)
	}
}

func TestMappingBadInput(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, make([]byte, 2*os.Getpagesize()), 0o600); err != nil {
		t.Fatal(err)
	}
	rw, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	ro, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	closed, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	ps := os.Getpagesize()
	for _, c := range []struct {
		name string
		call func() (*Mapping, error)
		want string
	}{
		{"anonymous, zero length", func() (*Mapping, error) { return MapAnonymous(0, MapOptions{}) }, "length 0: a mapping needs at least one byte"},
		{"anonymous, negative length", func() (*Mapping, error) { return MapAnonymous(-1, MapOptions{}) }, "length -1"},
		{"hugepages, zero length", func() (*Mapping, error) { return MapHugePages(0, MapOptions{}) }, "length 0"},
		{"file, zero length", func() (*Mapping, error) { return MapFile(rw, 0, 0, MapOptions{}) }, "length 0"},
		{"no file", func() (*Mapping, error) { return MapFile(nil, 0, ps, MapOptions{}) }, "map_file: no file"},
		{"negative offset", func() (*Mapping, error) { return MapFile(rw, -int64(ps), ps, MapOptions{}) }, "offset -" + strconv.Itoa(ps) + " is negative"},
		{"unaligned offset", func() (*Mapping, error) { return MapFile(rw, 100, ps, MapOptions{}) }, "offset 100 is not a multiple of the page size " + strconv.Itoa(ps)},
		{"past the end of the file", func() (*Mapping, error) { return MapFile(rw, int64(ps), 2*ps, MapOptions{}) }, "reach past the end of the file (" + strconv.Itoa(2*ps) + " bytes)"},
		{"offset past the end", func() (*Mapping, error) { return MapFile(rw, int64(4*ps), 1, MapOptions{}) }, "reach past the end of the file"},
		{"read-only file", func() (*Mapping, error) { return MapFile(ro, 0, ps, MapOptions{}) }, "must be open for reading and writing"},
		{"closed file", func() (*Mapping, error) { return MapFile(closed, 0, ps, MapOptions{}) }, "the file is closed"},
	} {
		m, err := c.call()
		if err == nil {
			m.Close()
			t.Errorf("%s: mapped", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want it to say %q", c.name, err, c.want)
		}
	}
}

// TestMapFileShares: a file mapping's bytes are the file's, both ways, at
// the offset asked for, and stay mapped after the file is closed.
func TestMapFileShares(t *testing.T) {
	ps := os.Getpagesize()
	path := filepath.Join(t.TempDir(), "f")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("on disk"), int64(ps)); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(int64(3 * ps)); err != nil {
		t.Fatal(err)
	}
	m, err := MapFile(f, int64(ps), ps, MapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got := string(m.Bytes()[:7]); got != "on disk" {
		t.Fatalf("mapping at offset %d reads %q", ps, got)
	}
	copy(m.Bytes()[ps-6:], "mapped")
	if err := m.Sync(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b[2*ps-6 : 2*ps]); got != "mapped" {
		t.Fatalf("file holds %q where the mapping was written", got)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

// resident counts the pages of b in memory (mincore(2)).
func resident(t *testing.T, b []byte) int {
	t.Helper()
	vec := make([]byte, (len(b)+os.Getpagesize()-1)/os.Getpagesize())
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)),
		uintptr(unsafe.Pointer(unsafe.SliceData(vec))))
	if errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// TestMapLock: an anonymous mapping has no page in memory until touched;
// with Lock every page is in memory at once (and counted in VmLck).
func TestMapLock(t *testing.T) {
	const pages = 16
	length := pages * os.Getpagesize()
	plain, err := MapAnonymous(length, MapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if n := resident(t, plain.Bytes()); n != 0 {
		t.Errorf("untouched mapping: %d pages resident", n)
	}
	plain.Bytes()[0] = 1
	if n := resident(t, plain.Bytes()); n < 1 || n == pages {
		t.Errorf("one byte touched: %d of %d pages resident", n, pages)
	}

	before := vmLck(t)
	locked, err := MapAnonymous(length, MapOptions{Lock: true})
	if err != nil {
		t.Fatal(err) // root in CI; RLIMIT_MEMLOCK (8 MiB by default) covers 64 KiB anyway
	}
	if n := resident(t, locked.Bytes()); n != pages {
		t.Errorf("locked mapping: %d of %d pages resident", n, pages)
	}
	if got := vmLck(t) - before; got < length>>10 {
		t.Errorf("VmLck grew by %d kB, want %d", got, length>>10)
	}
	if err := locked.Close(); err != nil {
		t.Fatal(err)
	}
	if got := vmLck(t); got != before {
		t.Errorf("VmLck %d kB after Close, %d before", got, before)
	}
}

// vmLck returns the process's locked memory in kB (/proc/self/status).
func vmLck(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmLck:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatal(l)
			}
			return n
		}
	}
	t.Fatal("/proc/self/status has no VmLck")
	return 0
}

// TestMapHugePages sets the hugepage pool itself (as root, through
// /proc/sys/vm/nr_hugepages, restored after): with no free hugepage
// MapHugePages says how to reserve some; with some it maps them, rounded
// up to whole hugepages, and they come out of the pool.
func TestMapHugePages(t *testing.T) {
	const nr = "/proc/sys/vm/nr_hugepages"
	orig, err := os.ReadFile(nr)
	if err != nil {
		t.Skipf("no hugetlb support: %v", err)
	}
	set := func(n int) error { return os.WriteFile(nr, []byte(strconv.Itoa(n)), 0) }
	t.Cleanup(func() {
		if err := os.WriteFile(nr, orig, 0); err != nil {
			t.Errorf("restoring %s to %s: %v", nr, strings.TrimSpace(string(orig)), err)
		}
	})
	field := func(name string) int {
		v, err := meminfo(name)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("%s: %q", name, v)
		}
		return n
	}
	size, err := hugePageSize()
	if err != nil {
		t.Fatal(err)
	}
	// No free hugepage: keep only those in use (the kernel keeps the ones
	// other mappings reserved, HugePages_Rsvd, which no one else may take).
	inUse := field("HugePages_Total") - field("HugePages_Free")
	if err := set(inUse); err != nil {
		t.Skipf("cannot set the hugepage pool (needs root and a writable /proc/sys): %v", err)
	}
	if avail := field("HugePages_Free") - field("HugePages_Rsvd"); avail != 0 {
		t.Fatalf("%s set to the %d pages in use, %d still free and unreserved", nr, inUse, avail)
	}
	_, err = MapHugePages(size, MapOptions{})
	if !errors.Is(err, ErrNoHugePages) || !strings.Contains(err.Error(), "writing a count to "+nr) {
		t.Fatalf("no free hugepage: %v", err)
	}
	t.Log(err)

	if err := set(inUse + 4); err != nil {
		t.Fatal(err)
	}
	if avail := field("HugePages_Free") - field("HugePages_Rsvd"); avail < 2 {
		t.Skipf("asked %s for 4 more hugepages, the kernel found %d (memory too fragmented for %d KiB pages)", nr, avail, size>>10)
	}
	free := field("HugePages_Free")
	length := size + size/2 // rounded up to two pages
	m, err := MapHugePages(length, MapOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m.Len() != length || len(m.Bytes()) != length {
		t.Errorf("Len %d, Bytes %d, want %d", m.Len(), len(m.Bytes()), length)
	}
	for i := range m.Bytes() {
		m.Bytes()[i] = byte(i)
	}
	if got := free - field("HugePages_Free"); got != 2 {
		t.Errorf("touching %d bytes took %d hugepages from the pool, want 2", length, got)
	}
	pd := newPD(newTable())
	r, err := pd.Register(m.Bytes(), LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); !errors.Is(err, ErrInUse) {
		t.Errorf("Close while registered: %v", err)
	}
	if err := r.Dereg(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if got := field("HugePages_Free"); got != free {
		t.Errorf("after Close HugePages_Free %d, was %d", got, free)
	}
}
