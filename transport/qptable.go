package transport

import (
	"sync/atomic"

	"github.com/goroce/goroce/bth"
)

// qpTable maps QP numbers to QPs. A QPN is 24 bits: the table is a
// directory of 4096 chunks of 4096 slots, a chunk allocated when its first
// QP arrives. The receive path reads it with two atomic loads and no lock;
// creating and destroying a QP write one slot (the device's qpMu orders
// the writers), so each costs O(1) whatever the number of QPs, where a
// copy-on-write map cost O(n) per change and O(n^2) to reach n QPs.
type qpTable struct {
	dir  [qpChunks]atomic.Pointer[qpChunk]
	n    int    // live QPs (writers only)
	next uint32 // where the search for a free QPN starts (writers only)
	// lo and hi bound the QPNs the table hands out when hi is not 0: the
	// block of a port several processes share (Options.Share).
	lo, hi uint32
}

// bounds returns the lowest and highest QPN the table hands out.
func (t *qpTable) bounds() (uint32, uint32) {
	if t.hi == 0 {
		return firstQPN, lastQPN
	}
	return t.lo, t.hi
}

const (
	qpChunkBits = 12
	qpChunks    = 1 << (24 - qpChunkBits)
)

type qpChunk [1 << qpChunkBits]atomic.Pointer[QP]

// QPNs 0 and 1 are the SMI and GSI QPs (QP1 carries the connection
// manager); like rxe, the first QP a program creates is 0x11.
const firstQPN = 0x11

// lastQPN is the highest QPN a QP gets: 0xffffff is the multicast QPN.
const lastQPN = bth.PSNMask - 1

func (t *qpTable) get(qpn uint32) *QP {
	if qpn > bth.PSNMask { // not a QPN: one is 24 bits
		return nil
	}
	c := t.dir[qpn>>qpChunkBits].Load()
	if c == nil {
		return nil
	}
	return c[qpn%(1<<qpChunkBits)].Load()
}

// free returns the next unused QPN at or after t.next, wrapping to
// firstQPN, as rxe hands them out: numbers are not reused until the space
// wraps, so a late packet for a destroyed QP finds no new owner soon.
func (t *qpTable) free() (uint32, bool) {
	lo, hi := t.bounds()
	if t.n >= int(hi-lo+1) {
		return 0, false
	}
	qpn := t.next
	if qpn < lo || qpn > hi {
		qpn = lo
	}
	for t.get(qpn) != nil {
		if qpn++; qpn > hi {
			qpn = lo
		}
	}
	return qpn, true
}

// put installs q at qpn, which free returned, and moves the search on.
func (t *qpTable) put(qpn uint32, q *QP) {
	slot := &t.dir[qpn>>qpChunkBits]
	c := slot.Load()
	if c == nil {
		c = new(qpChunk)
		slot.Store(c)
	}
	c[qpn%(1<<qpChunkBits)].Store(q)
	t.n++
	t.next = qpn + 1
}

// remove empties qpn's slot if it holds q, and reports whether it did.
// Chunks stay: a device that once held many QPs keeps 32 KiB per 4096.
func (t *qpTable) remove(qpn uint32, q *QP) bool {
	if qpn > bth.PSNMask {
		return false
	}
	c := t.dir[qpn>>qpChunkBits].Load()
	if c == nil {
		return false
	}
	if !c[qpn%(1<<qpChunkBits)].CompareAndSwap(q, nil) {
		return false
	}
	t.n--
	return true
}

// each calls fn for every QP in the table, in QPN order.
func (t *qpTable) each(fn func(*QP)) {
	for i := range t.dir {
		c := t.dir[i].Load()
		if c == nil {
			continue
		}
		for j := range c {
			if q := c[j].Load(); q != nil {
				fn(q)
			}
		}
	}
}
