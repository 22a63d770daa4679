package transport

import (
	"errors"
	"testing"
)

func recvWR(id uint64) *RecvWR {
	return &RecvWR{WRID: id, SGL: []SGE{{Addr: 0x1000 * id, Length: uint32(id%7 + 1), LKey: uint32(id)}}}
}

func mustPut(t *testing.T, r *recvRing, id uint64) {
	t.Helper()
	wr := recvWR(id)
	total, err := r.check(wr, "receive queue")
	if err != nil {
		t.Fatalf("WR %d: %v", id, err)
	}
	r.put(wr, total)
}

// popWant pops one WQE and checks it is WR id, SGL and length whole, its
// SGL copied into into.
func popWant(t *testing.T, r *recvRing, id uint64, into []SGE) {
	t.Helper()
	w, ok := r.pop(into)
	want := recvWR(id)
	if !ok || w.wrID != id || len(w.sgl) != 1 || w.sgl[0] != want.SGL[0] || w.length != want.SGL[0].Length {
		t.Fatalf("popped %v %+v, want WR %d %+v", ok, w, id, want.SGL[0])
	}
	if &w.sgl[0] != &into[0] {
		t.Fatal("the popped SGL is not in the caller's array")
	}
}

// TestRecvRingAcrossWrap holds a full queue of a depth that is not a
// power of two while its counts wrap past 2^32: every WQE comes out once,
// in order, with its own SGL. With the slot taken as the count modulo the
// depth, the WQEs posted at counts 2^32-1 and 0 shared a slot and one of
// them was lost (rc_pingpong's default rx_depth is 500, held full).
func TestRecvRingAcrossWrap(t *testing.T) {
	for _, depth := range []uint32{1, 3, 5, 500} {
		r := newRecvRing(depth, 1)
		start := uint32(1<<32 - uint64(depth) - 2)
		r.head, r.tail = start, start
		into := make([]SGE, 1)
		next, want := uint64(0), uint64(0)
		for range depth {
			mustPut(t, &r, next)
			next++
		}
		for range 3 * depth {
			popWant(t, &r, want, into)
			want++
			mustPut(t, &r, next)
			next++
		}
		for r.len() > 0 {
			popWant(t, &r, want, into)
			want++
		}
		if want != next || r.head == start {
			t.Fatalf("depth %d: %d of %d out; head %#x", depth, want, next, r.head)
		}
	}
}

func TestRecvRingChecks(t *testing.T) {
	r := newRecvRing(3, 2)
	if r.ring != nil || r.sges != nil { // an idle QP's ring holds nothing
		t.Fatalf("ring %d, sges %d before the first put", len(r.ring), len(r.sges))
	}
	for id := range uint64(3) {
		mustPut(t, &r, id)
	}
	if len(r.ring) != 4 || len(r.sges) != 8 {
		t.Fatalf("ring %d, sges %d", len(r.ring), len(r.sges))
	}
	if _, err := r.check(recvWR(3), "SRQ"); !errors.Is(err, ErrNoMem) || err.Error() != "qp: queue full: SRQ holds 3 WRs" {
		t.Fatalf("a fourth WR in a queue of 3: %v", err)
	}
	r.pop(nil)
	three := &RecvWR{SGL: make([]SGE, 3)}
	if _, err := r.check(three, "receive queue"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("3 SGEs, max 2: %v", err)
	}
	big := &RecvWR{SGL: []SGE{{Length: 1 << 31}, {Length: 1 << 31}}}
	if _, err := r.check(big, "receive queue"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("4 GiB of buffers: %v", err)
	}
	var none recvRing
	if _, err := none.check(recvWR(1), "receive queue"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("no receive queue: %v", err)
	}
	if w, ok := none.pop(nil); ok {
		t.Fatalf("popped %+v from no queue", w)
	}
}

// TestRecvRingResize: the WQEs held, across the wrap, keep their order
// and SGLs through growing and shrinking, and the new depth is the limit.
func TestRecvRingResize(t *testing.T) {
	r := newRecvRing(3, 1)
	r.head, r.tail = 1<<32-1, 1<<32-1
	for id := range uint64(3) {
		mustPut(t, &r, id)
	}
	r.resize(6)
	if r.depth != 6 || len(r.ring) != 8 || r.len() != 3 {
		t.Fatalf("after resize to 6: depth %d ring %d held %d", r.depth, len(r.ring), r.len())
	}
	for id := uint64(3); id < 6; id++ {
		mustPut(t, &r, id)
	}
	if _, err := r.check(recvWR(6), "SRQ"); !errors.Is(err, ErrNoMem) {
		t.Fatalf("a seventh WR: %v", err)
	}
	into := make([]SGE, 1)
	for id := range uint64(4) {
		popWant(t, &r, id, into)
	}
	r.resize(2)
	for id := uint64(4); id < 6; id++ {
		popWant(t, &r, id, into)
	}
	if _, ok := r.pop(into); ok {
		t.Fatal("a WQE left after all were taken")
	}
}

func TestRingLen(t *testing.T) {
	for depth, want := range map[uint32]uint32{0: 0, 1: 1, 2: 2, 3: 4, 4: 4, 5: 8, 500: 512, 1 << 15: 1 << 15, 1<<15 + 1: 1 << 16} {
		if got := ringLen(depth); got != want {
			t.Errorf("ringLen(%d) = %d, want %d", depth, got, want)
		}
	}
}
