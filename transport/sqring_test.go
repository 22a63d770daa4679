package transport

import "testing"

// TestSQSlotsAcrossWrap: for send queues of depths that are and are not
// powers of two, any max_send_wr consecutive counts, including those that
// wrap past 2^32, fall on distinct slots, each with its own SGE and
// inline store. With the slot a count modulo the depth, counts 2^32-1 and
// 0 of a queue of 3 shared a slot, and a queue held full across the wrap
// overwrote a WQE in flight.
func TestSQSlotsAcrossWrap(t *testing.T) {
	for _, depth := range []uint32{1, 2, 3, 100, 1000} {
		q := &QP{cap: QPCap{MaxSendWR: depth, MaxSendSGE: 2, MaxInlineData: 16}}
		q.sqAlloc()
		n := uint32(len(q.sq))
		if len(q.sgeStore) != int(n*2) || len(q.inlineStore) != int(n*16) {
			t.Fatalf("depth %d: %d slots, %d SGEs, %d inline bytes", depth, n, len(q.sgeStore), len(q.inlineStore))
		}
		for first := uint32(1<<32 - uint64(depth) - 1); first != depth+1; first++ {
			seen := make(map[uint32]uint32, depth)
			for k := range depth {
				c := first + k
				s := q.sqSlot(c)
				if s >= n {
					t.Fatalf("depth %d: count %#x at slot %d of %d", depth, c, s, n)
				}
				if o, ok := seen[s]; ok {
					t.Fatalf("depth %d: counts %#x and %#x share slot %d", depth, o, c, s)
				}
				seen[s] = c
				if q.sqAt(c) != &q.sq[s] {
					t.Fatalf("depth %d: sqAt(%#x) is not slot %d", depth, c, s)
				}
			}
		}
	}
}
