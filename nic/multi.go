package nic

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"

	"github.com/goroce/goroce/inet"
)

// Multi is one link over several, each holding some of a device's local
// addresses: what a device whose GID table lists several addresses (the
// IPv4 and the IPv6 ones of a netdev, on each of which rxe answers) needs
// from links that bind one address each, as the UDP link does. Send hands
// each frame to the link holding its source address. When every link has
// the same number of receive queues, the joined link has that many too
// (MultiQueue): queue i returns what queue i of any link received, so a
// QP's packets stay on the one queue QueueOf gives, whichever address
// they came to. Otherwise it has one queue that returns what any queue of
// any link received. Each queue hands out one link queue's batch at a time.
type Multi struct {
	links  []Link
	bySrc  map[netip.Addr]int // source address (no zone): index in links
	info   Info
	queues []multiQueue
	quit   chan struct{}  // closed by Close: the receivers stop
	wg     sync.WaitGroup // the receivers
	once   sync.Once

	dropped uint64 // frames of no link's source address (under mu)
	mu      sync.Mutex
}

// multiQueue is one receive queue of the joined link.
type multiQueue struct {
	in  chan *multiBatch // batches the links' receivers hand over
	cur *multiBatch      // the batch being handed out (one Recv at a time)
}

// multiBatch is what one Recv of a link returned. Its frames stay valid
// until Recv signals done: the link's receiver waits for that before it
// receives again, and then reuses the batch (nothing is allocated per
// batch).
type multiBatch struct {
	frames []Frame
	off    int
	err    error
	done   chan struct{} // capacity 1: Recv's signal never waits
}

// multiBatchLen is how many frames each link's receiver asks for at once.
const multiBatchLen = 64

// NewMulti joins links (at least one) into one link. Every local address
// of every link must be distinct. The first link's SrcPort answers for
// all: links of one kind opened alike (the UDP link binds the same
// source ports on each address it can) send from the same ports.
func NewMulti(links ...Link) (*Multi, error) {
	if len(links) == 0 {
		return nil, errors.New("nic: a multi link needs at least one link")
	}
	m := &Multi{links: links, bySrc: map[netip.Addr]int{}, quit: make(chan struct{})}
	var names []string
	for i, l := range links {
		inf := l.Info()
		names = append(names, inf.Name)
		for _, a := range inf.Addrs {
			a = a.WithZone("").Unmap()
			if _, dup := m.bySrc[a]; dup {
				return nil, fmt.Errorf("nic: multi link: address %v is on two links", a)
			}
			m.bySrc[a] = i
		}
		m.info.Addrs = append(m.info.Addrs, inf.Addrs...)
		if m.info.MTU == 0 || inf.MTU < m.info.MTU {
			m.info.MTU = inf.MTU
		}
		if m.info.MAC == nil {
			m.info.MAC = inf.MAC
		}
	}
	m.info.Name = strings.Join(names, " + ")
	nq := commonQueues(links)
	m.queues = make([]multiQueue, nq)
	for i := range m.queues {
		m.queues[i].in = make(chan *multiBatch)
	}
	// A receiver per receive queue of each link, so that none is left
	// unread: queue i of each link feeds queue i, or all feed the one.
	for _, l := range links {
		mq, ok := l.(MultiQueue)
		if !ok || mq.RxQueues() <= 1 {
			m.wg.Add(1)
			go m.receive(l.Recv, &m.queues[0])
			continue
		}
		for i := range mq.RxQueues() {
			m.wg.Add(1)
			go m.receive(func(f []Frame) (int, error) { return mq.RecvQueue(i, f) }, &m.queues[i%nq])
		}
	}
	return m, nil
}

// commonQueues is the number of receive queues every link has, or 1 when
// they differ: only then does QueueOf put a QP's packets on the same
// queue of every link.
func commonQueues(links []Link) int {
	n := 0
	for _, l := range links {
		q := 1
		if mq, ok := l.(MultiQueue); ok {
			q = max(1, mq.RxQueues())
		}
		if n != 0 && q != n {
			return 1
		}
		n = q
	}
	return n
}

// receive hands the batches recv returns to queue q, one at a time,
// until recv fails or the link closes.
func (m *Multi) receive(recv func([]Frame) (int, error), q *multiQueue) {
	defer m.wg.Done()
	buf := make([]Frame, multiBatchLen)
	b := &multiBatch{done: make(chan struct{}, 1)}
	for {
		n, err := recv(buf)
		b.frames, b.off, b.err = buf[:n], 0, err
		select {
		case q.in <- b:
		case <-m.quit:
			return
		}
		if err != nil {
			return
		}
		select {
		case <-b.done:
		case <-m.quit:
			return
		}
	}
}

// Send hands each run of frames with one source address to the link
// holding it, in order. A frame whose source no link holds is counted
// (TxDropped) and dropped.
func (m *Multi) Send(frames []Frame) (int, error) {
	sent := 0
	for i := 0; i < len(frames); {
		li, ok := m.linkOf(frames[i])
		j := i + 1
		for j < len(frames) {
			lj, okj := m.linkOf(frames[j])
			if okj != ok || lj != li {
				break
			}
			j++
		}
		if !ok {
			m.mu.Lock()
			m.dropped += uint64(j - i)
			m.mu.Unlock()
			sent += j - i
			i = j
			continue
		}
		n, err := m.links[li].Send(frames[i:j])
		sent += n
		if err != nil || n < j-i {
			return sent, err
		}
		i = j
	}
	return sent, nil
}

// linkOf finds the link holding the frame's source address.
func (m *Multi) linkOf(f Frame) (int, bool) {
	dg := f.Datagram()
	var src netip.Addr
	switch {
	case len(dg) >= inet.IPv4HeaderLen && inet.IPv4(dg).Version() == 4:
		src = inet.IPv4(dg).Src()
	case len(dg) >= inet.IPv6HeaderLen && inet.IPv6(dg).Version() == 6:
		src = inet.IPv6(dg).Src().Unmap()
	default:
		return 0, false
	}
	i, ok := m.bySrc[src]
	return i, ok
}

// Recv is RecvQueue(0, frames).
func (m *Multi) Recv(frames []Frame) (int, error) { return m.RecvQueue(0, frames) }

// RxQueues returns how many receive queues the joined link has.
func (m *Multi) RxQueues() int { return len(m.queues) }

// RecvQueue returns frames of one link queue's batch from queue i; the
// previous call's frames are given back to their link first.
func (m *Multi) RecvQueue(i int, frames []Frame) (int, error) {
	if len(frames) == 0 {
		return 0, nil
	}
	q := &m.queues[i]
	if b := q.cur; b != nil && b.off >= len(b.frames) {
		b.done <- struct{}{}
		q.cur = nil
	}
	if q.cur == nil {
		select {
		case b := <-q.in:
			q.cur = b
		case <-m.quit:
			return 0, ErrClosed
		}
	}
	b := q.cur
	if b.off >= len(b.frames) && b.err != nil {
		return 0, b.err
	}
	n := copy(frames, b.frames[b.off:])
	b.off += n
	return n, nil
}

// Info describes the joined link: every link's addresses, in the order
// of the links, and the smallest MTU.
func (m *Multi) Info() Info { return m.info }

// SrcPort is the first link's.
func (m *Multi) SrcPort(qpn uint32) uint16 { return m.links[0].SrcPort(qpn) }

// Stats adds up the links' counters.
func (m *Multi) Stats() Stats {
	var s Stats
	for _, l := range m.links {
		s.add(l.Stats())
	}
	m.mu.Lock()
	s.TxDropped += m.dropped
	m.mu.Unlock()
	return s
}

// Close closes every link and waits for their receivers.
func (m *Multi) Close() error {
	var err error
	m.once.Do(func() {
		close(m.quit)
		for _, l := range m.links {
			if e := l.Close(); e != nil && err == nil {
				err = e
			}
		}
		m.wg.Wait()
	})
	return err
}
