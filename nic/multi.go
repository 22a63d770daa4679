package nic

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"
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
//
// Multi is a Poller: a poll of queue i takes what its links' queues hold
// (those of links that are Pollers, through their own PollQueue) or a
// batch its receive goroutines already received, and one goroutine at a
// time holds each queue, as the nic.Poller contract asks; so a device in
// poll mode can answer on every address of its GID table. Its receive
// goroutines stand aside while pollers take frames, as a device's does.
type Multi struct {
	links  []Link
	bySrc  map[netip.Addr]int // source address (no zone): index in links
	info   Info
	queues []multiQueue
	quit   chan struct{}  // closed by Close: the receivers stop
	wg     sync.WaitGroup // the receivers
	once   sync.Once
	begin  sync.Once // starts the receivers, at the first receive or poll
	recvs  []func()  // the receivers to start

	held func() // OnHeld's: called after a receiver hands a batch over (set before start)

	dropped uint64 // frames of no link's source address (under mu)
	mu      sync.Mutex
}

// multiQueue is one receive queue of the joined link.
type multiQueue struct {
	in chan *multiBatch // batches the links' receivers hand over

	hold  QueueHold   // the queue's (Poller)
	cur   *multiBatch // the batch being handed out (under hold)
	pend  *multiBatch // a batch the receiver took while a poller held cur (under hold)
	inner int         // the polls entry whose link queue a poller holds (under hold); -1: none
	srcs  []pollSrc   // the link queues that feed this queue and can be polled
	next  int         // where the next poll starts in srcs (under hold)
}

// pollSrc is one link queue a Multi queue polls.
type pollSrc struct {
	p Poller
	i int
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
	m.info.DirectSend = true
	m.info.PollNoSyscall = true
	m.info.Offload = ^Offload(0)
	for _, l := range links {
		m.info.DirectSend = m.info.DirectSend && l.Info().DirectSend
		m.info.PollNoSyscall = m.info.PollNoSyscall && l.Info().PollNoSyscall
		// What every link does: the engine cannot tell which one a
		// packet goes through.
		m.info.Offload &= l.Info().Offload
	}
	m.queues = make([]multiQueue, nq)
	for i := range m.queues {
		// One batch of room: a receiver's batch is there for a
		// poll to take before the receiver reports it (OnHeld).
		m.queues[i].in = make(chan *multiBatch, 1)
		m.queues[i].inner = -1
	}
	// A receiver per receive queue of each link, so that none is left
	// unread: queue i of each link feeds queue i, or all feed the one.
	// They start with the first receive or poll, so that the links are
	// not in use before the device asks them to leave the network
	// poller (NetpollLeaver), which it does when it opens.
	for _, l := range links {
		p, canPoll := l.(Poller)
		mq, ok := l.(MultiQueue)
		if !ok || mq.RxQueues() <= 1 {
			var end func()
			if canPoll {
				m.queues[0].srcs = append(m.queues[0].srcs, pollSrc{p, 0})
				end = func() { p.EndRecv(0) }
			}
			m.recvs = append(m.recvs, func() { m.receive(l.Recv, end, &m.queues[0]) })
			continue
		}
		for i := range mq.RxQueues() {
			var end func()
			if canPoll {
				m.queues[i%nq].srcs = append(m.queues[i%nq].srcs, pollSrc{p, i})
				end = func() { p.EndRecv(i) }
			}
			m.recvs = append(m.recvs, func() {
				m.receive(func(f []Frame) (int, error) { return mq.RecvQueue(i, f) }, end, &m.queues[i%nq])
			})
		}
	}
	return m, nil
}

// start starts the receivers, unless Close came first.
func (m *Multi) start() {
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.quit:
		return
	default:
	}
	for _, r := range m.recvs {
		m.wg.Add(1)
		go r()
	}
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

// multiAside is how long a Multi's receive goroutine stands aside once
// pollers took frames from its queue, as a device's receive goroutine
// does in poll mode (the device's pollActive).
const multiAside = 200 * time.Microsecond

// receive hands the batches recv returns to queue q, one at a time,
// until recv fails or the link closes. While pollers take frames from q
// it stands aside, its link queue let go (endRecv, for a link that can
// be polled): a receiver woken for each packet, only to find it taken
// or to take it from the pollers, would cost the cores they spin on, and
// one the scheduler left waiting while it held its link queue would
// stall them.
func (m *Multi) receive(recv func([]Frame) (int, error), endRecv func(), q *multiQueue) {
	defer m.wg.Done()
	buf := make([]Frame, multiBatchLen)
	b := &multiBatch{done: make(chan struct{}, 1)}
	var seen uint64
	var aside *time.Timer
	for {
		if p := q.hold.Polls(); p != seen {
			seen = p
			if endRecv != nil {
				endRecv()
			}
			if aside == nil {
				aside = time.NewTimer(multiAside)
			} else {
				aside.Reset(multiAside)
			}
			select {
			case <-aside.C:
			case <-m.quit:
				return
			}
			continue
		}
		n, err := recv(buf)
		if n == 0 && err == nil {
			continue // pollers took what came (Poller): receive again
		}
		b.frames, b.off, b.err = buf[:n], 0, err
		select {
		case q.in <- b:
		case <-m.quit:
			return
		}
		if m.held != nil {
			m.held()
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
	src, ok := f.Src()
	if !ok {
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
// previous call's frames are given back to their link first. It returns
// none, rather than wait, when pollers took frames since its last return
// and none is left (Poller).
func (m *Multi) RecvQueue(i int, frames []Frame) (int, error) {
	q := &m.queues[i]
	if q.hold.ReceiverLetsGo() {
		q.release()
	}
	if len(frames) == 0 {
		return 0, nil
	}
	m.begin.Do(m.start)
	for {
		q.hold.Lock()
		if q.cur != nil {
			if b := q.cur; b.off >= len(b.frames) && b.err != nil {
				q.hold.Unlock()
				return 0, b.err
			}
			n := q.take(frames)
			q.hold.ReceiverKeeps()
			return n, nil
		}
		q.hold.Unlock()
		// Wait for a batch without the hold, so that pollers may take
		// what comes meanwhile.
		if q.hold.PollersTook() {
			q.hold.StandAside()
			return 0, nil
		}
		select {
		case b := <-q.in:
			// A poller may have taken another batch meanwhile: this
			// one waits behind it (batches of different link queues,
			// whose order does not matter).
			q.hold.Lock()
			if q.cur == nil {
				q.cur = b
			} else {
				q.pend = b
			}
			q.hold.Unlock()
		case <-m.quit:
			return 0, ErrClosed
		}
	}
}

// take hands out frames of cur, which holds some or an error (under hold).
func (q *multiQueue) take(frames []Frame) int {
	b := q.cur
	n := copy(frames, b.frames[b.off:])
	b.off += n
	return n
}

// release gives back what the holder took and releases hold: an emptied
// batch to its link's receiver, a link queue to its link.
func (q *multiQueue) release() {
	if b := q.cur; b != nil && b.off >= len(b.frames) && b.err == nil {
		q.cur, q.pend = q.pend, nil
		b.done <- struct{}{}
	}
	if q.inner >= 0 {
		s := q.srcs[q.inner]
		q.inner = -1
		s.p.EndPoll(s.i)
	}
	q.hold.Unlock()
}

// PollQueue implements Poller: the rest of the batch being handed out,
// or a batch a link's receiver has ready, or what a link queue that can
// be polled holds, taking the link queues in turn.
func (m *Multi) PollQueue(i int, frames []Frame) int {
	if i < 0 || i >= len(m.queues) || len(frames) == 0 {
		return 0
	}
	m.begin.Do(m.start)
	q := &m.queues[i]
	if !q.hold.TryLock() {
		return 0
	}
	if q.cur == nil {
		select {
		case b := <-q.in:
			q.cur = b
		default:
		}
	}
	n := 0
	switch {
	case q.cur != nil && q.cur.off < len(q.cur.frames):
		n = q.take(frames)
	case q.cur != nil: // an error: the receiver's to report
	default:
		for k := range q.srcs {
			j := (q.next + k) % len(q.srcs)
			s := q.srcs[j]
			if n = s.p.PollQueue(s.i, frames); n > 0 {
				q.inner, q.next = j, j+1
				break
			}
		}
	}
	if n == 0 {
		q.hold.Unlock()
		return 0
	}
	q.hold.PollTook()
	return n
}

// EndPoll implements Poller.
func (m *Multi) EndPoll(i int) { m.queues[i].release() }

// EndRecv implements Poller.
func (m *Multi) EndRecv(i int) {
	if q := &m.queues[i]; q.hold.ReceiverLetsGo() {
		q.release()
	}
}

// PollFDs implements FDPoller: every link's descriptors, or nil unless
// every link gives its own.
func (m *Multi) PollFDs() []int {
	var fds []int
	for _, l := range m.links {
		p, ok := l.(FDPoller)
		if !ok {
			return nil
		}
		f := p.PollFDs()
		if f == nil {
			return nil
		}
		fds = append(fds, f...)
	}
	return fds
}

// OnHeld implements FDPoller: the batches the receivers hand over sit in
// memory no descriptor shows until a Recv or a poll takes them.
func (m *Multi) OnHeld(f func()) { m.held = f }

// LeaveNetpoll implements NetpollLeaver: each link that can leaves.
func (m *Multi) LeaveNetpoll() error {
	for _, l := range m.links {
		if nl, ok := l.(NetpollLeaver); ok {
			if err := nl.LeaveNetpoll(); err != nil {
				return fmt.Errorf("%s: %w", l.Info().Name, err)
			}
		}
	}
	return nil
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
		m.mu.Lock() // start sees quit closed, or has added its receivers
		close(m.quit)
		m.mu.Unlock()
		for _, l := range m.links {
			if e := l.Close(); e != nil && err == nil {
				err = e
			}
		}
		m.wg.Wait()
	})
	return err
}
