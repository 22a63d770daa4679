package afxdp

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// xskRing is one of an AF_XDP socket's four single-producer,
// single-consumer rings, shared with the kernel through mmap: a producer
// and a consumer index (free-running u32) and a power-of-two array of
// entries (u64 UMEM addresses for the fill and completion rings, xdp_desc
// for the rx and tx rings). Index loads and stores are atomic so that the
// entries written before a producer store are visible after the load on
// the other side.
type xskRing struct {
	mem   []byte
	prod  *uint32
	cons  *uint32
	descs unsafe.Pointer
	mask  uint32
	size  uint32
}

func mapRing(fd int, off int64, o unix.XDPRingOffset, size uint32, entry uintptr) (xskRing, error) {
	n := int(o.Desc) + int(size)*int(entry)
	mem, err := unix.Mmap(fd, off, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return xskRing{}, err
	}
	base := unsafe.Pointer(&mem[0])
	return xskRing{
		mem:   mem,
		prod:  (*uint32)(unsafe.Add(base, o.Producer)),
		cons:  (*uint32)(unsafe.Add(base, o.Consumer)),
		descs: unsafe.Add(base, o.Desc),
		mask:  size - 1,
		size:  size,
	}, nil
}

func (r *xskRing) unmap() {
	if r.mem != nil {
		unix.Munmap(r.mem)
		r.mem = nil
	}
}

func (r *xskRing) addr(i uint32) *uint64 {
	return (*uint64)(unsafe.Add(r.descs, uintptr(i&r.mask)*8))
}

func (r *xskRing) desc(i uint32) *unix.XDPDesc {
	return (*unix.XDPDesc)(unsafe.Add(r.descs, uintptr(i&r.mask)*unsafe.Sizeof(unix.XDPDesc{})))
}

// For rings we produce into (fill, tx): free slots and publishing.
func (r *xskRing) free() uint32     { return r.size - (*r.prod - atomic.LoadUint32(r.cons)) }
func (r *xskRing) produce(n uint32) { atomic.StoreUint32(r.prod, *r.prod+n) }

// For rings we consume from (rx, completion): available entries and release.
func (r *xskRing) avail() uint32    { return atomic.LoadUint32(r.prod) - *r.cons }
func (r *xskRing) release(n uint32) { atomic.StoreUint32(r.cons, *r.cons+n) }

// pending reports whether a ring we consume from has entries, for a
// reader that is not its consumer (both indexes loaded atomically).
func (r *xskRing) pending() bool { return atomic.LoadUint32(r.prod) != atomic.LoadUint32(r.cons) }
