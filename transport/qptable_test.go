package transport

import (
	"testing"
)

// TestQPTable: numbers from 0x11 upwards, never a used one, not reused
// until the space wraps, 0xffffff (multicast) never handed out, and a
// slot emptied only by the QP that holds it.
func TestQPTable(t *testing.T) {
	var tb qpTable
	qs := make([]*QP, 4)
	for i := range qs {
		qs[i] = new(QP)
	}
	n, ok := tb.free()
	if !ok || n != firstQPN {
		t.Fatalf("first QPN %#x %v", n, ok)
	}
	tb.put(n, qs[0])
	if n, _ := tb.free(); n != firstQPN+1 {
		t.Fatalf("second QPN %#x", n)
	}
	if tb.get(firstQPN) != qs[0] || tb.get(firstQPN+1) != nil || tb.get(0xffffff) != nil || tb.get(1<<24+firstQPN) != nil {
		t.Fatal("lookups")
	}
	if tb.remove(firstQPN, qs[1]) || tb.get(firstQPN) != qs[0] {
		t.Fatal("another QP emptied the slot")
	}
	tb.put(firstQPN+1, qs[1])
	if !tb.remove(firstQPN, qs[0]) || tb.get(firstQPN) != nil || tb.remove(firstQPN, qs[0]) {
		t.Fatal("remove")
	}
	// Not reused before the wrap: the next number is after the last given.
	if n, _ := tb.free(); n != firstQPN+2 {
		t.Fatalf("after a destroy: %#x", n)
	}
	// At the top of the space: 0xfffffe, then the wrap to 0x11 (free
	// again), skipping 0x12 (in use).
	tb.next = lastQPN
	if n, _ := tb.free(); n != 0xfffffe {
		t.Fatalf("top %#x", n)
	}
	tb.put(lastQPN, qs[2])
	if n, _ := tb.free(); n != firstQPN {
		t.Fatalf("wrap %#x", n)
	}
	tb.put(firstQPN, qs[3])
	if n, _ := tb.free(); n != firstQPN+2 {
		t.Fatalf("skip a used one: %#x", n)
	}
	var seen []*QP
	tb.each(func(q *QP) { seen = append(seen, q) })
	if len(seen) != 3 || seen[0] != qs[3] || seen[1] != qs[1] || seen[2] != qs[2] {
		t.Fatalf("each: %v", seen)
	}
	// A full space says so instead of searching for ever.
	tb.n = lastQPN - firstQPN + 1
	if _, ok := tb.free(); ok {
		t.Fatal("a full table found a free QPN")
	}
}
