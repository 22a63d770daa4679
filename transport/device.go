package transport

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/internal/closed"
	"github.com/goroce/goroce/internal/spin"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/netdev"
)

// Options configure a device.
type Options struct {
	// Window bounds the unacknowledged packets each RC QP keeps in flight
	// (default DefaultWindow).
	Window int
	// GIDs replaces the GID table built from the link's addresses.
	GIDs []bth.GID
	// Trace, if set, is called with every RoCEv2 datagram sent (out) or
	// received (in, after its ICRC verified).
	Trace func(out bool, datagram []byte)
	// Events is the depth of the asynchronous event queue (default 256).
	Events int
	// Share, if set, is the port this device shares with other processes
	// of the host (package share's Member): its QPs are numbered in the
	// block the port's server gave this process, so that the server can
	// hand each process the packets of its own QPs, and the connection
	// manager (package cm) numbers its connections in the same block.
	Share Sharer
	// Died, if set, is called when a QP of the device enters ERR, with
	// why (Death): on the goroutine that moved it there, under the
	// QP's lock, so it must not call the QP's methods. The device keeps
	// the last few deaths whether or not it is set (Deaths).
	Died func(*Death)
	// Clock drives the QPs' timers and poll mode's (default
	// clock.Real); tests pass one they advance by hand.
	Clock clock.Clock
	// PollProgress is poll mode: a CQ.Poll that finds its queue empty
	// receives and handles what has arrived itself, on the polling
	// goroutine, as an HCA driver's poll mode makes the poller drive the
	// device. A packet that completes a request is then handled on the
	// core that waits for it, instead of waking the device's receive
	// goroutine, which would wake the poller in turn (run to completion).
	// CQ.PollWait polls for up to 200 µs before it sleeps. The receive
	// goroutine stands aside while pollers are active and handles what
	// arrives once none has polled for 200 µs. An acknowledgement of a
	// packet a poller handled leaves with the application's next post on
	// the QP, or at the next poll, or when a runtime timer set for 200 µs
	// fires (about a millisecond later on an idle process). It
	// needs a link that can be polled (nic.Poller: the udp, afpacket,
	// afxdp and in-memory links); the link's own BusyPoll is not needed.
	// On cores the host oversubscribes a spinning poller slows
	// everything else down, as any busy polling.
	PollProgress bool
	// LeaveNetpoll, in poll mode, has Open take the link's sockets out
	// of the Go runtime's network poller (nic.NetpollLeaver: the udp
	// link). It is for pollers the runtime does not schedule, a C
	// program's threads through libgoroce.so: between their polls the
	// runtime's Ps sit idle, a thread of its waits in the network
	// poller, and that thread wakes for every packet the pollers take
	// (ib_send_lat 3x slower). Goroutines that poll keep the Ps busy and
	// nothing waits there, so the sockets stay: out of it, a receive
	// that must wait blocks its thread in the kernel, which in the lab's
	// emulated guest made roced's send_lat up to 1.7x slower and its 99th
	// percentile 2-5x longer.
	LeaveNetpoll bool
	// Congestion sets up DCQCN congestion control (congestion.go); the
	// zero value is on, as an mlx5 port's.
	Congestion CongestionOptions
	// QPNs, if set and the device does not share its port or owns it,
	// says where the search for each new QP's number starts: a counter the
	// host's goroce processes share (package qpnum), so that QP numbers go
	// round the space across processes as they do on an rxe or mlx5
	// device. Without it every process numbers its QPs from 0x11, and a
	// process started just after another reuses its QPNs, which a peer's
	// connection manager still holds in time-wait: Linux's CM rejects
	// such a REQ as a stale connection (cm_insert_remote_qpn), which
	// back-to-back qperf clients met. It returns any 32-bit value; the
	// device takes it modulo the range of QP numbers.
	QPNs func() uint32
}

// Device is an open RDMA device over a link. Its methods are safe for
// concurrent use.
type Device struct {
	link nic.Link
	// The device's key table, which names the regions of its PDs: what
	// the device does with it (mr keeps the table itself unexported).
	allocPD   func() *PD
	ownsPD    func(*PD) bool
	closeKeys func()
	counters  Counters
	env       env
	gids      []bth.GID
	mtu       MTU
	trace     func(bool, []byte)
	qpns      func() uint32 // Options.QPNs

	qpMu sync.Mutex // orders the writers of qps
	qps  qpTable    // the receive path reads it without a lock

	runqs        []runQueue             // one per receive queue of the link: a QP's deferred work runs on its queue's worker
	poller       nic.Poller             // the link, in poll mode (Options.PollProgress); else nil
	pollFDs      []int                  // the link's descriptors, in poll mode over a nic.FDPoller
	busy         atomic.Pointer[uint32] // SetPollBusy's word; nil: none
	polls        []pollState            // one per receive queue, used by whoever polls it
	armGen       atomic.Uint64          // counts CQ arms in poll mode (armed): a receive goroutine takes over after one
	pushed       atomic.Uint64          // counts its CQs' completions (CQ.pushed): a receive goroutine lets their programs reply first
	yieldToWoken func()                 // how a receive goroutine lets the programs its batch completed work for run: runtime.Gosched (tests replace it)
	endAtOnce    bool                   // a poll ends its burst before it returns: the link's sends are calls (nic.Info.DirectSend)
	blockingRecv bool                   // the link's receives block in the kernel (poll mode, Options.LeaveNetpoll)
	yieldEvery   int                    // empty polls per yield of a loop polling its CQs (CQ.Yield; nic.Info.PollNoSyscall)
	evMu         sync.RWMutex           // held shared to post an event, exclusively to close events
	events       chan Event
	evClosed     bool // under evMu
	eventsLost   atomic.Uint64
	atomicMu     sync.Mutex

	cqMu      sync.Mutex
	cqs       map[*CQ]int // every live CQ the device created (to end on Close, to refuse another device's), with how many QP queues complete on it
	cqsClosed bool

	gsi gsi // QP1: the connection manager's MADs

	deaths deaths // the last QPs that entered ERR, and why

	share Sharer // Options.Share

	xrc xrcSRQs // XRC SRQs by number (xrc.go)

	closeOnce sync.Once
	fatalOnce sync.Once // the link failing is reported once
	done      chan struct{}
	wg        sync.WaitGroup
}

// ErrClosed is what every call on a closed device or on an object it
// created returns, wrapped (errors.Is(err, ErrClosed)).
var ErrClosed = closed.Err

// Open opens a device over link and starts its receive loop and worker.
// The device owns the link and closes it on Close.
func Open(link nic.Link, opt Options) (*Device, error) {
	info := link.Info()
	d := &Device{link: link, trace: opt.Trace, done: make(chan struct{}), yieldToWoken: runtime.Gosched}
	d.allocPD, d.ownsPD, d.closeKeys = newKeys()
	d.gids = opt.GIDs
	if d.gids == nil {
		d.gids = gidTable(info)
	}
	if !hasGID(d.gids) {
		return nil, fmt.Errorf("device: link %s has no address to make a GID from", info.Name)
	}
	v6only := true
	for _, a := range info.Addrs {
		if a.Unmap().Is4() {
			v6only = false
		}
	}
	d.mtu = MTUFor(info.MTU, v6only)
	n := opt.Events
	if n <= 0 {
		n = 256
	}
	d.events = make(chan Event, n)
	// One receive goroutine and one worker per receive queue of the link.
	// The link hands every packet of a QP to one queue (nic.QueueOf) and
	// the QP's deferred work runs on the same queue's worker, so QPs on
	// different queues proceed on different cores and never meet but in
	// the device's shared tables.
	nq := 1
	if mq, ok := link.(nic.MultiQueue); ok {
		nq = max(1, mq.RxQueues())
	}
	if opt.PollProgress {
		p, ok := link.(nic.Poller)
		if !ok {
			return nil, fmt.Errorf("device: poll mode needs a link that can be polled (the udp, afpacket, afxdp or in-memory link, not wrapped in a tap or faults); %s cannot", info.Name)
		}
		// Its sockets leave the network poller, whose thread would
		// otherwise wake for each packet pollers the runtime does not
		// schedule take (Options.LeaveNetpoll).
		if nl, ok := link.(nic.NetpollLeaver); ok && opt.LeaveNetpoll {
			if err := nl.LeaveNetpoll(); err != nil {
				return nil, fmt.Errorf("device: poll mode: %w", err)
			}
			d.blockingRecv = true
		}
		d.poller = p
		if fp, ok := p.(nic.FDPoller); ok {
			d.pollFDs = fp.PollFDs()
			fp.OnHeld(d.ringBusy)
		}
		d.polls = make([]pollState, nq)
		for i := range d.polls {
			d.polls[i].wake = make(chan struct{}, 1)
		}
		d.endAtOnce = info.DirectSend
		d.yieldEvery = spin.Every(info.PollNoSyscall)
		// The device's clock, as the QPs' timers: a test decides when
		// late fires.
		var clock clock.Clock = clock.Real{}
		if opt.Clock != nil {
			clock = opt.Clock
		}
		for i := range d.polls {
			s := &d.polls[i]
			s.frames = make([]nic.Frame, 64)
			s.late = clock.AfterFunc(time.Hour, func() { lateFired(s) })
			s.late.Stop()
		}
	}
	d.runqs = make([]runQueue, nq)
	for i := range d.runqs {
		d.runqs[i].wake = make(chan struct{}, 1)
	}
	d.deaths.notify = opt.Died
	d.qpns = opt.QPNs
	if s := opt.Share; s != nil {
		b := s.Block()
		if b >= qpChunks {
			return nil, fmt.Errorf("device: shared port block %d: want 0 to %d", b, qpChunks-1)
		}
		d.share = s
		if b == 0 {
			// The port's owner: the numbers below the members'.
			d.qps.lo, d.qps.hi = firstQPN, nic.MemberQPNBase-1
		} else {
			// The block's QPN 0 is left out: no QP is numbered 0.
			d.qps.lo, d.qps.hi = b<<qpChunkBits|1, b<<qpChunkBits|(1<<qpChunkBits-1)
		}
	}
	d.env = env{
		Link: link, Counters: &d.counters, GID: d.GID,
		Schedule: d.schedule, Event: d.qpEvent, Died: d.deaths.add, Atomic: &d.atomicMu,
		MaxMTU: d.mtu, Window: opt.Window, Trace: opt.Trace, Clock: opt.Clock,
		ECT: !opt.Congestion.NoECT, CC: opt.Congestion.envParams(), RxQueues: nq,
	}
	d.wg.Add(2 * nq)
	for i := range nq {
		go d.rxLoop(i)
		go d.worker(&d.runqs[i])
	}
	return d, nil
}

// schedule queues a QP's deferred work on its receive queue's worker.
func (d *Device) schedule(q *QP) {
	d.runqs[nic.QueueOf(q.QPN(), len(d.runqs))].push(q)
}

// gidTable builds the GID table of a link from its MAC and addresses, in
// the order Linux rxe fills one (netdev.GIDTableFrom): the link-local GID made
// from the MAC (an all-zero entry where the MAC makes none), then the IPv4
// addresses IPv4-mapped, then the IPv6 ones. On rxe over one IPv4 address
// this makes index 1 the IPv4 GID, which is why the tools are run with
// -g 1 / -x 1.
func gidTable(info nic.Info) []bth.GID {
	var v4, v6 []netip.Addr
	for _, a := range info.Addrs {
		if a.Unmap().Is4() {
			v4 = append(v4, a.Unmap())
		} else {
			v6 = append(v6, a)
		}
	}
	var t []bth.GID
	for _, g := range netdev.GIDTableFrom(info.Name, info.MAC, v4, v6) {
		t = append(t, bth.GID(g.GID))
	}
	return t
}

// Close closes the device, as ibv_close_device after destroying what it
// holds. Every outstanding work request of every QP completes with
// WRFlushErr, as when a QP enters ERR (IBA 10.3.1.7); receives posted to
// an SRQ are not flushed (they belong to no QP, as libibverbs, which never
// flushes an SRQ). Then every CQ wakes its Wait, PollWait and completion
// channel readers; Poll returns the completions held, flush completions
// included, and then an error wrapping ErrClosed. Events is closed once
// the last event is queued. From then on every call that creates, posts,
// modifies, registers, destroys or waits returns an error wrapping
// ErrClosed; queries (State, Query, Stats, GID) still answer. AllocPD and
// CreateCQ, which return no error, return a PD whose Register fails and a
// CQ whose Poll fails. Close is idempotent.
func (d *Device) Close() error {
	d.closeOnce.Do(func() {
		d.qpMu.Lock() // no CreateQP after this
		close(d.done)
		d.closeKeys()
		d.qpMu.Unlock()
		d.link.Close()
		d.wg.Wait()                // the receive path and the worker have stopped
		d.qps.each((*QP).shutdown) // no writer: done is closed
		d.cqMu.Lock()
		d.cqsClosed = true
		for c := range d.cqs {
			c.shutdown(errDeviceClosed("poll_cq"))
		}
		d.cqMu.Unlock()
		d.evMu.Lock()
		d.evClosed = true
		close(d.events)
		d.evMu.Unlock()
	})
	return nil
}

// PollMode reports whether the device is in poll mode (Options.PollProgress).
func (d *Device) PollMode() bool { return d.poller != nil }

// closedNow reports whether Close has begun.
func (d *Device) closedNow() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// errClosed wraps ErrClosed for call op.
func errDeviceClosed(op string) error { return fmt.Errorf("device: %s: %w", op, ErrClosed) }

// Link returns the device's link.
func (d *Device) Link() nic.Link { return d.link }

// GID returns the GID at index i of the GID table (ibv_query_gid); false
// beyond the table and for an empty slot.
func (d *Device) GID(i uint8) (bth.GID, bool) {
	if int(i) >= len(d.gids) || d.gids[i].IsZero() {
		return bth.GID{}, false
	}
	return d.gids[i], true
}

// hasGID reports whether a table holds a GID besides empty slots.
func hasGID(t []bth.GID) bool {
	for _, g := range t {
		if !g.IsZero() {
			return true
		}
	}
	return false
}

// GIDs returns the GID table.
func (d *Device) GIDs() []bth.GID { return append([]bth.GID(nil), d.gids...) }

// GIDIndex returns the index of the GID of addr.
func (d *Device) GIDIndex(addr netip.Addr) (uint8, bool) {
	g := bth.GIDFromAddr(addr)
	for i, x := range d.gids {
		if x == g && !x.IsZero() {
			return uint8(i), true
		}
	}
	return 0, false
}

// ActiveMTU returns the port's active MTU: the largest path MTU QPs may use.
func (d *Device) ActiveMTU() MTU { return d.mtu }

// Counters returns the protocol counters.
func (d *Device) Counters() *Counters { return &d.counters }

// Events delivers asynchronous events (ibv_get_async_event). If nobody
// reads them, the oldest are kept and newer ones counted as lost.
func (d *Device) Events() <-chan Event { return d.events }

// EventsLost returns how many events found the queue full.
func (d *Device) EventsLost() uint64 { return d.eventsLost.Load() }

// qpEvent reports an event a QP raised.
func (d *Device) qpEvent(q *QP, e EventType, err error) {
	d.post(Event{Type: e, QP: q, Err: err})
}

// srqLimitReached reports an SRQ's limit event.
func (d *Device) srqLimitReached(s *SRQ) {
	d.post(Event{Type: EventSRQLimitReached, SRQ: s})
}

func (d *Device) post(e Event) {
	d.evMu.RLock()
	defer d.evMu.RUnlock()
	if d.evClosed {
		return // Close closed the channel
	}
	select {
	case d.events <- e:
	default:
		d.eventsLost.Add(1)
	}
}

// PollFDs returns, in poll mode over a link whose arrivals show on
// file descriptors (nic.FDPoller), those descriptors; else nil. With
// SetPollBusy they let a poller outside Go answer an empty poll itself.
func (d *Device) PollFDs() []int { return slices.Clone(d.pollFDs) }

// SetPollBusy starts (p set) or stops (nil) keeping *p, a word outside
// Go's memory (libgoroce.so's C), non-zero whenever an empty CQ.Poll may
// find work that none of PollFDs shows readable: frames a poll or the
// receive goroutine left in the link, a joined link's receivers' batches
// (nic.FDPoller's OnHeld), bursts a poll left open (their ends wait for
// the next poll). A poller that reads *p as 0 (atomically) with the CQ's
// mirror at 0 and no descriptor readable may answer "empty" without
// calling Poll: nothing is lost, as a poll that finds everything empty
// clears *p before it looks and anything that arrives after the look
// sets it again or shows on a descriptor. p must stay valid until it is
// stopped.
func (d *Device) SetPollBusy(p *uint32) {
	if p != nil {
		atomic.StoreUint32(p, 1) // the next poll looks
	}
	d.busy.Store(p)
}

// ringBusy marks work an empty poll must come into Go for (SetPollBusy).
func (d *Device) ringBusy() {
	if p := d.busy.Load(); p != nil {
		atomic.StoreUint32(p, 1)
	}
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (d *Device) AllocPD() *PD { return d.allocPD() }

// CreateCQ creates a completion queue of the given depth (ibv_create_cq).
// An overrun is reported as an EventCQErr.
func (d *Device) CreateCQ(depth int) *CQ {
	c := newCQ(depth, func(c *CQ, err error) {
		d.post(Event{Type: EventCQErr, CQ: c, Err: err})
	})
	c.pushed = &d.pushed
	if d.poller != nil {
		c.setProgress(d.progress, d.yieldEvery, d.armed)
	}
	d.cqMu.Lock()
	defer d.cqMu.Unlock()
	if d.cqsClosed {
		c.shutdown(errDeviceClosed("poll_cq"))
		return c
	}
	if d.cqs == nil {
		d.cqs = make(map[*CQ]int)
	}
	d.cqs[c] = 0
	return c
}

// DestroyCQ destroys a completion queue (ibv_destroy_cq): the device
// forgets it, and its Poll and waits end with an error wrapping
// ErrInvalid. A CQ that a QP's send or receive queue still completes on
// is refused with an error wrapping ErrBusy (libibverbs' EBUSY): destroy
// the QPs first. A CQ destroyed already, or another device's, is refused
// with ErrInvalid.
func (d *Device) DestroyCQ(c *CQ) error {
	if d.closedNow() {
		return errDeviceClosed("destroy_cq")
	}
	d.cqMu.Lock()
	n, ok := d.cqs[c]
	if c == nil || !ok {
		d.cqMu.Unlock()
		return fmt.Errorf("device: destroy_cq: not a CQ of this device, or destroyed already: %w", ErrInvalid)
	}
	if n > 0 {
		d.cqMu.Unlock()
		return fmt.Errorf("device: destroy_cq: %d QP queues still complete on it: %w", n, ErrBusy)
	}
	delete(d.cqs, c)
	d.cqMu.Unlock()
	c.shutdown(fmt.Errorf("device: poll_cq: the CQ was destroyed: %w", ErrInvalid))
	return nil
}

// useCQs counts a QP's two queues on their CQs (n = 1), or uncounts them
// (n = -1); with n = 1 it fails if either CQ is not this device's or was
// destroyed, checked and counted under one lock so that DestroyCQ cannot
// come in between.
func (d *Device) useCQs(op string, n int, cqs ...*CQ) error {
	d.cqMu.Lock()
	defer d.cqMu.Unlock()
	if n > 0 {
		for _, c := range cqs {
			if _, ok := d.cqs[c]; c != nil && !ok {
				return fmt.Errorf("device: %s: completion queue belongs to another device, or was destroyed: %w", op, ErrInvalid)
			}
		}
	}
	for _, c := range cqs {
		if _, ok := d.cqs[c]; ok {
			d.cqs[c] += n
		}
	}
	return nil
}

// foreign refuses a PD or CQ that another device created, for call op: a
// QP over another device's PD would check its SGEs against the wrong key
// table and fail only when a work request runs (a READ completing with a
// local protection error), and another device's CQ would be flushed by
// the wrong Close. libibverbs cannot even express the mix (a PD and a CQ
// carry their ibv_context); here it is EINVAL at creation.
func (d *Device) foreign(op string, pd *PD, cqs ...*CQ) error {
	if pd == nil {
		return fmt.Errorf("device: %s: no protection domain: %w", op, ErrInvalid)
	}
	if !d.ownsPD(pd) {
		return fmt.Errorf("device: %s: %v belongs to another device: %w", op, pd, ErrInvalid)
	}
	if len(cqs) > 0 {
		return d.useCQs(op, 0, cqs...)
	}
	return nil
}

// CreateQP creates a queue pair in RESET (ibv_create_qp). pd and the
// CQs must be this device's (an error wrapping ErrInvalid otherwise).
// An XRC target QP (XRCTgt) takes no pd (nil), only ia.XRCD.
func (d *Device) CreateQP(pd *PD, ia QPInitAttr) (*QP, error) {
	d.qpMu.Lock()
	defer d.qpMu.Unlock()
	if d.closedNow() {
		return nil, errDeviceClosed("create_qp")
	}
	if ia.Type == XRCTgt && pd != nil {
		return nil, fmt.Errorf("device: create_qp: an XRC target QP has no protection domain (its XRC SRQs have): %w", ErrInvalid)
	}
	if ia.Type != XRCTgt {
		if err := d.foreign("create_qp", pd); err != nil {
			return nil, err
		}
	}
	if err := d.useCQs("create_qp", 1, ia.SendCQ, ia.RecvCQ); err != nil {
		return nil, err
	}
	// A port's owner (block 0) numbers as an unshared device does, within
	// the numbers below the members' blocks.
	if (d.share == nil || d.share.Block() == 0) && d.qpns != nil {
		lo, hi := d.qps.bounds()
		d.qps.next = lo + d.qpns()%(hi-lo+1)
	}
	qpn, ok := d.qps.free()
	if !ok {
		d.useCQs("create_qp", -1, ia.SendCQ, ia.RecvCQ)
		return nil, fmt.Errorf("%w: out of QP numbers", ErrNoMem)
	}
	q, err := newQP(&d.env, pd, qpn, ia)
	if err != nil {
		d.useCQs("create_qp", -1, ia.SendCQ, ia.RecvCQ)
		return nil, err
	}
	// Its completions come from packets on its queue: the ACKs of its
	// requests, the requests it responds to (CQ.queues).
	ia.SendCQ.onQueue(q.rxQueue())
	ia.RecvCQ.onQueue(q.rxQueue())
	d.qps.put(qpn, q)
	return q, nil
}

// DestroyQP destroys a queue pair (ibv_destroy_qp): LookupQP no longer
// finds it. A QP destroyed already, or another device's, is refused
// (an error wrapping ErrInvalid).
func (d *Device) DestroyQP(q *QP) error {
	if q != nil {
		// Before qpMu, which what the drain handles may need; a QP that
		// turns out not to be this device's costs a poll of a queue.
		d.drain(q.rxQueue())
	}
	d.qpMu.Lock()
	if d.closedNow() {
		d.qpMu.Unlock()
		return errDeviceClosed("destroy_qp")
	}
	if q == nil || !d.qps.remove(q.QPN(), q) {
		d.qpMu.Unlock()
		return fmt.Errorf("device: destroy_qp: %v is not a QP of this device, or was destroyed already: %w", q, ErrInvalid)
	}
	d.qpMu.Unlock()
	_, ia := q.Query()
	d.useCQs("destroy_qp", -1, ia.SendCQ, ia.RecvCQ)
	return q.destroy()
}

// LookupQP returns the QP with number qpn.
func (d *Device) LookupQP(qpn uint32) *QP { return d.qps.get(qpn) }

// CreateSRQ creates a shared receive queue (ibv_create_srq) in pd, which
// must be this device's.
func (d *Device) CreateSRQ(pd *PD, attr SRQAttr) (*SRQ, error) {
	if d.closedNow() {
		return nil, errDeviceClosed("create_srq")
	}
	if err := d.foreign("create_srq", pd); err != nil {
		return nil, err
	}
	return newSRQ(pd, attr, d.srqLimitReached)
}

// CreateAH creates an address handle for UD sends (ibv_create_ah) in pd,
// which must be this device's.
func (d *Device) CreateAH(pd *PD, attr AHAttr) (*AH, error) {
	if d.closedNow() {
		return nil, errDeviceClosed("create_ah")
	}
	if err := d.foreign("create_ah", pd); err != nil {
		return nil, err
	}
	return newAH(&d.env, pd, attr)
}

// rxLoop receives bursts of packets from receive queue i and dispatches
// them.
func (d *Device) rxLoop(i int) {
	defer d.wg.Done()
	frames := make([]nic.Frame, 64)
	recv := d.link.Recv
	if len(d.runqs) > 1 {
		mq := d.link.(nic.MultiQueue)
		recv = func(f []nic.Frame) (int, error) { return mq.RecvQueue(i, f) }
	}
	var b burst
	var aside *time.Timer
	var armSeen uint64 // armGen at the last look
	for {
		// In poll mode the receive goroutine stands aside while pollers
		// are active (one polled since it last looked): the packets are
		// theirs, and waking for each one only to find it taken, or to
		// take it from them, costs the cores they spin on. It looks again
		// pollActive later, and takes over once none has polled since: at
		// most twice pollActive after the last poll. (A flag rather than
		// the time of each poll: a poll reads no clock, which in an
		// emulated guest costs more than the poll.)
		if d.poller != nil {
			if g := d.armGen.Load(); g != armSeen {
				// A CQ was armed since the last look: its program
				// sleeps on the event, which only this goroutine's
				// receiving can bring; the polls before the arming do
				// not hold it back.
				armSeen = g
				d.polls[i].polled.Store(false)
			} else if d.polls[i].polled.Swap(false) {
				// The queue is the receiver's from its last Recv to the
				// next: let go of it, or no poller could take it.
				d.poller.EndRecv(i)
				// What it left in the link is the pollers' now.
				d.ringBusy()
				if aside == nil {
					aside = time.NewTimer(pollActive)
				} else {
					aside.Reset(pollActive)
				}
				select {
				case <-d.done:
					return
				case <-aside.C:
				case <-d.polls[i].wake: // a CQ was armed (armGen)
				}
				continue
			}
		}
		n, err := recv(frames)
		if err != nil {
			select {
			case <-d.done:
				return
			default:
			}
			if errors.Is(err, nic.ErrClosed) {
				// One event for the device, whichever queue saw it first.
				d.fatalOnce.Do(func() { d.post(Event{Type: EventDeviceFatal, Err: err}) })
				return
			}
			d.counters.Malformed.Add(1)
			continue
		}
		pushed := d.pushed.Load()
		for i := range n {
			d.input(frames[i], &b)
		}
		if len(b.qps) > 0 && !d.endAtOnce && d.pushed.Load() != pushed {
			// The batch completed work that a program polls or waits
			// for (a goroutine spinning on Poll, or woken from Wait or
			// Events; a C thread polling libgoroce's mirror). Let it
			// run before the burst ends: a reply posted then takes the
			// acknowledgements still queued along, in one batch, as in
			// poll mode (progress), where ending the burst first would
			// send the ACK in a system call of its own and make the
			// reply wait for it, and a woken goroutine, which the
			// runtime runs on this P, wait for this one to block.
			// (roced send_lat 64 B on loopback: t_typical 15.6 µs
			// before, 9.5 after; yielding after the burst's end, 13.9.)
			// One yield, not a wait: where the program's goroutines keep
			// every P busy the ACK waits a scheduling turn, as it would
			// for a preemption.
			d.yieldToWoken()
		}
		b.flush()
		if d.blockingRecv {
			// The next receive blocks in the kernel holding this P,
			// and what the batch readied (a CQ's event on its way to
			// a completion channel: libgoroce's forwarder) would wait
			// in the P's queue until another thread steals it or
			// sysmon takes the P back, in an idle process up to 10 ms
			// later. Let it run first.
			runtime.Gosched()
		}
	}
}

// pollActive is how long the receive goroutine of a device in poll mode
// leaves the packets to the pollers once it saw a poll (a variable for
// tests only).
var pollActive = 200 * time.Microsecond

// armed is a CQ's onArm in poll mode: a program arms a CQ to sleep on its
// event, so each receive goroutine standing aside for the pollers takes
// the receiving back at once (CQ.ReqNotify).
func (d *Device) armed() {
	d.armGen.Add(1)
	for i := range d.polls {
		select {
		case d.polls[i].wake <- struct{}{}:
		default:
		}
	}
}

// pollState is what a goroutine polling a receive queue uses: the link
// lets one at a time hold the queue (nic.Poller), and so this state.
type pollState struct {
	frames []nic.Frame
	b      burst
	polled atomic.Bool   // polled since the queue's receive goroutine last looked
	wake   chan struct{} // rung when a CQ is armed, to wake a receive goroutine standing aside (armed)

	// The QPs whose burst a poller left open: their ends wait for the
	// next poll, or for late, should no poll come (endMu, which endOpen
	// holds while it takes the QPs' locks; pending says some are).
	endMu   sync.Mutex
	ends    []*QP
	pending atomic.Bool
	late    clock.Timer
	// late is set when a poll leaves bursts open while it is not set
	// (lateSet), not at each such poll: setting a timer reads the clock,
	// a system call in the lab's TCG guests (a Reset took 1.6-1.9 µs
	// there), and a ping-pong leaves a burst open at every message it
	// receives. So late may find bursts left after it was set (opens
	// counts the times some were left, lateAt is opens when it was set),
	// and gives them pollActive more: a burst ends at the next poll, or
	// between pollActive and twice that after it was left. (endMu.)
	lateSet       bool
	opens, lateAt uint64
}

// leaveOpen records that a poll left the bursts of qps open.
func (s *pollState) leaveOpen(qps []*QP) {
	s.endMu.Lock()
	s.ends = append(s.ends, qps...)
	if !s.pending.Swap(true) {
		s.opens++
		if !s.lateSet {
			s.lateSet, s.lateAt = true, s.opens
			s.late.Reset(pollActive)
		}
	}
	s.endMu.Unlock()
}

// lateFired is late's function: it ends the bursts left open since before
// late was set, or gives younger ones their time.
func lateFired(s *pollState) {
	s.endMu.Lock()
	if s.pending.Load() && s.opens != s.lateAt {
		s.lateAt = s.opens
		s.late.Reset(pollActive)
		s.endMu.Unlock()
		return
	}
	s.lateSet = false
	s.endMu.Unlock()
	endOpen(s)
}

// endOpen ends the bursts pollers left open on s: it sends the
// acknowledgements the application did not take along.
func endOpen(s *pollState) {
	if !s.pending.Load() {
		return
	}
	s.endMu.Lock()
	for i, q := range s.ends {
		q.endBurst()
		s.ends[i] = nil
	}
	s.ends = s.ends[:0]
	s.pending.Store(false)
	s.endMu.Unlock()
}

// progress is poll mode (Options.PollProgress): an empty CQ.Poll receives
// and handles what has arrived on each receive queue that nobody else is
// handling, as the receive goroutine would, and reports whether anything
// came.
func (d *Device) progress(queues uint64) bool {
	if d.closedNow() {
		return false
	}
	all := queues == 0 || len(d.polls) > 64
	// Cleared before the look: what comes after it sets the word again
	// or shows on a descriptor (SetPollBusy).
	busy := d.busy.Load()
	if busy != nil {
		atomic.StoreUint32(busy, 0)
	}
	got, open := false, false
	for i := range d.polls {
		s := &d.polls[i]
		if !all && queues&(1<<i) == 0 {
			// Another queue's: its own pollers, or its receive goroutine,
			// serve it. What it left open keeps the busy word set.
			open = open || s.pending.Load()
			continue
		}
		if !s.polled.Load() { // no store while it is set: the line stays shared
			s.polled.Store(true)
		}
		// Bursts the last poll left open: the application has had its
		// chance to take their acknowledgements along.
		endOpen(s)
		if d.pollQueue(i, s) == 0 {
			open = open || s.pending.Load()
			continue
		}
		// The burst is left open rather than ended here: the completions
		// reach the poller first, and an acknowledgement still queued
		// when the application posts its reply leaves with the reply, in
		// one batch (one sendmmsg, one recvmmsg at the peer). The next
		// poll ends it, sending what the application did not take along,
		// or, should none come, the timer late does, pollActive to twice
		// that later. Over a link whose send is a function call a batch
		// saves nothing, and the peer would wait for the reply to learn of
		// its delivery: the burst ends here.
		if d.endAtOnce {
			s.b.flush()
		} else if len(s.b.qps) > 0 {
			s.leaveOpen(s.b.qps)
			clear(s.b.qps)
			s.b.qps = s.b.qps[:0]
		}
		d.poller.EndPoll(i) // s is the next holder's from here
		got = true
	}
	// Frames may be left in the link after a poll that took some, and
	// open bursts wait for the next poll: it must come into Go.
	if busy != nil && (got || open) {
		atomic.StoreUint32(busy, 1)
	}
	return got
}

// drain is poll mode's look at receive queue i before a QP on it is
// destroyed: what has arrived is handled and acknowledged at once, as an
// HCA would have on arrival. A program that stopped polling to destroy
// its QPs leaves its packets to the receive goroutine only pollActive
// later, and a request that came in that gap, unanswered, would be
// retransmitted to a QP that is gone: rxe retries such a request for
// ever when the retry count is 7, as ibv_srq_pingpong sets it, and its
// client's teardown hangs. The receive goroutine's standing aside is
// left as it was. Nothing in poll mode, or the queue held elsewhere
// (that holder handles what came): nothing to do.
func (d *Device) drain(i int) {
	if d.poller == nil || i >= len(d.polls) || d.closedNow() {
		return
	}
	s := &d.polls[i]
	endOpen(s)
	// What came before the destroy, not a stream that keeps coming.
	for range 4 {
		n := d.pollQueue(i, s)
		if n == 0 {
			return
		}
		s.b.flush()
		d.poller.EndPoll(i)
		if n < len(s.frames) {
			return
		}
	}
}

// pollQueue receives what has arrived on queue i into s and hands it to
// the QPs, into s's burst, and returns how many packets came; when any
// did, the caller holds the queue until it ends the burst and calls
// EndPoll (nic.Poller).
func (d *Device) pollQueue(i int, s *pollState) int {
	n := d.poller.PollQueue(i, s.frames)
	if n == 0 {
		return 0
	}
	d.counters.PolledPkts.Add(uint64(n))
	for j := range n {
		d.input(s.frames[j], &s.b)
	}
	return n
}

// burst collects the QPs a burst of received packets reached, so that each
// sends one coalesced acknowledgement and one batch of frames at the end
// of the burst rather than one per packet.
type burst struct {
	qps []*QP
}

// flush ends the burst.
func (b *burst) flush() {
	for i, q := range b.qps {
		q.endBurst()
		b.qps[i] = nil
	}
	b.qps = b.qps[:0]
}

// input validates one datagram, unless its link did (fr.Verified), and
// hands it to its QP.
func (d *Device) input(fr nic.Frame, b *burst) {
	c := &d.counters
	c.RcvdPkts.Add(1)
	dg := fr.Datagram()
	f := fr.Decoded
	if !fr.Verified {
		var err error
		if f, err = bth.DecodeIP(dg); err != nil {
			c.Malformed.Add(1)
			return
		}
		if !f.VerifyICRC() {
			c.ICRCErr.Add(1) // dropped silently, as rxe and HCAs do
			return
		}
	}
	p, err := bth.Parse(f.RoCE())
	if err != nil {
		c.Malformed.Add(1)
		return
	}
	if d.trace != nil {
		d.trace(false, dg)
	}
	if p.IsCNP() {
		d.inputCNP(p.BTH().DestQP())
		return
	}
	if p.BTH().DestQP() == GSIQPN {
		d.gsiInput(p, f)
		return
	}
	q := d.qps.get(p.BTH().DestQP())
	if q == nil {
		c.UnknownQP.Add(1)
		return
	}
	if q.receive(p, f) {
		b.qps = append(b.qps, q)
	}
}

// worker runs the QPs of one receive queue that asked for more time.
func (d *Device) worker(r *runQueue) {
	defer d.wg.Done()
	var batch []*QP
	for {
		select {
		case <-d.done:
			return
		case <-r.wake:
		}
		for {
			batch = r.take(batch[:0])
			if len(batch) == 0 {
				break
			}
			for i, q := range batch {
				q.runScheduled()
				batch[i] = nil
			}
		}
	}
}

// runQueue is an unbounded queue of QPs with work, so that Schedule never
// blocks while its caller holds a QP lock.
type runQueue struct {
	mu   sync.Mutex
	q    []*QP
	wake chan struct{}
}

func (r *runQueue) push(q *QP) {
	r.mu.Lock()
	r.q = append(r.q, q)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *runQueue) take(into []*QP) []*QP {
	r.mu.Lock()
	into = append(into, r.q...)
	clear(r.q)
	r.q = r.q[:0]
	r.mu.Unlock()
	return into
}
