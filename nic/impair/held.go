package impair

// heldPacket is a packet waiting for its release time.
type heldPacket struct {
	due    int64  // nanoseconds since the direction started
	seq    uint64 // arrival order: equal due times leave first-in first-out
	buf    []byte
	n      int
	copies uint8
}

// heldQueue is a binary min-heap of held packets by (due, seq), written
// out rather than through container/heap, whose interface boxes every
// element it moves.
type heldQueue struct {
	items []heldPacket
}

func (q *heldQueue) less(i, j int) bool {
	a, b := &q.items[i], &q.items[j]
	return a.due < b.due || a.due == b.due && a.seq < b.seq
}

func (q *heldQueue) push(h heldPacket) {
	q.items = append(q.items, h)
	for i := len(q.items) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q.items[i], q.items[p] = q.items[p], q.items[i]
		i = p
	}
}

func (q *heldQueue) pop() heldPacket {
	top := q.items[0]
	last := len(q.items) - 1
	q.items[0] = q.items[last]
	q.items[last] = heldPacket{}
	q.items = q.items[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < last && q.less(l, m) {
			m = l
		}
		if r < last && q.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		q.items[i], q.items[m] = q.items[m], q.items[i]
		i = m
	}
	return top
}
