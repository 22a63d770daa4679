package endpoint

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hostQPNs returns the counter from which a device's QP numbers start
// (transport.Options.QPNs): one that every goroce process of the user
// shares, a word in a file of the stats directory mapped into each
// process, so that QP numbers go round the 24-bit space from one process
// to the next as they do on an rxe device (whose QPNs the kernel hands out
// cyclically from one pool). A fresh directory (a reboot empties
// XDG_RUNTIME_DIR) starts it at 0, the device's first QPN, as a new rxe
// device's first QP is 0x11. When the file cannot be used the process
// starts at a random point: QPNs then rarely repeat across processes,
// though not never.
func hostQPNs() func() uint32 {
	if ctr, err := mapCounter(filepath.Join(StatsDir(), "qpn")); err == nil {
		return func() uint32 { return ctr.Add(1) - 1 }
	}
	var local atomic.Uint32
	local.Store(rand.Uint32())
	return func() uint32 { return local.Add(1) - 1 }
}

// mapCounter maps the first word of path (created if absent, in a
// directory only this user can use) as a counter shared with every
// process that maps it. The mapping stays for the life of the process.
func mapCounter(path string) (*atomic.Uint32, error) {
	if err := ownDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the mapping outlives the descriptor
	const size = 8
	// Growing a file never shrinks it, and the bytes it adds read 0: two
	// processes that create it at once both see a zero counter, once.
	if fi, err := f.Stat(); err != nil {
		return nil, err
	} else if fi.Size() < size {
		if err := f.Truncate(size); err != nil {
			return nil, err
		}
	}
	b, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	return (*atomic.Uint32)(unsafe.Pointer(&b[0])), nil
}
