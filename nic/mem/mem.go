// Package mem is the in-memory link: links attached to a Net by IP
// address exchange datagrams, with faults injected per direction from a
// seeded random source, so a failing run can be replayed. A datagram this
// process's engine sealed (nic.Frame.Sealed) that crosses untouched goes
// up decoded and Verified, as loopback's do: nothing is checked twice.
package mem

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/inet"
	"github.com/goroce/goroce/nic"
)

// Faults are what an in-memory path does to the packets crossing it in
// one direction. Probabilities are per packet, in [0, 1].
type Faults struct {
	Loss      float64       // dropped
	Duplicate float64       // delivered twice
	Reorder   float64       // held back behind later packets
	Corrupt   float64       // one random bit flipped
	Delay     time.Duration // added to every packet
	// ReorderDelay is how long a reordered packet is held back (default
	// 300 µs: long enough for the packets after it to overtake it).
	ReorderDelay time.Duration
}

// Draw is one packet's fate under Faults.
type Draw struct {
	Lose, Duplicate, Reorder, Corrupt bool // which faults fired
	Bit                               int  // the bit to flip if Corrupt, below 8 times the size drawn for
}

// Draw decides one packet's fate, n bytes long, from rng. A fault whose
// probability is zero draws nothing, so adding a fault to a path leaves
// the others' decisions as they were only when it is the last one set;
// the bit is always drawn.
func (f *Faults) Draw(rng *rand.Rand, n int) Draw {
	var d Draw
	d.Lose = f.Loss > 0 && rng.Float64() < f.Loss
	d.Duplicate = f.Duplicate > 0 && rng.Float64() < f.Duplicate
	d.Reorder = f.Reorder > 0 && rng.Float64() < f.Reorder
	d.Corrupt = f.Corrupt > 0 && rng.Float64() < f.Corrupt
	d.Bit = rng.IntN(max(n, 1) * 8)
	return d
}

// Net is an in-memory network: links attached to it by IP address
// exchange datagrams, with faults injected per direction from a seeded
// random source, so a failing run can be replayed.
type Net struct {
	seed  uint64
	mu    sync.Mutex
	links map[netip.Addr]*Link
	paths map[[2]netip.Addr]*memPath
}

type memPath struct {
	mu     sync.Mutex
	rng    *rand.Rand
	faults Faults
	filter Filter
	// clean is set while the path has no faults and no filter: a send
	// then delivers without the lock or a draw from rng (which draws
	// nothing else then, so a run stays the same function of the seed).
	clean atomic.Bool
}

// setClean updates clean (mu held).
func (p *memPath) setClean() { p.clean.Store(p.faults == Faults{} && p.filter == nil) }

// Verdict is what a Filter decides for one datagram.
type Verdict uint8

// Filter verdicts.
const (
	Pass      Verdict = iota // deliver (random faults still apply)
	Drop                     // lose it
	Duplicate                // deliver it twice
)

// Filter inspects each datagram on a path before the random faults and may
// drop or duplicate it: targeted misbehaviour ("lose the third READ
// response") for tests and for scripted interop runs.
type Filter func(datagram []byte) Verdict

// NewNet returns an empty in-memory network whose fault decisions come
// from seed.
func NewNet(seed uint64) *Net {
	return &Net{seed: seed, links: map[netip.Addr]*Link{}, paths: map[[2]netip.Addr]*memPath{}}
}

// Options configure an in-memory link.
type Options struct {
	MTU      int              // IP MTU; default 4500, which carries a 4096-byte IB MTU
	RxQueue  int              // packets the receive queue holds before dropping; default 8192
	Hardware net.HardwareAddr // the link's MAC (for the link-local GID); default one made from the address
	// BusyPoll is how long Recv keeps looking (yielding to other
	// goroutines) before it sleeps until a packet is queued, as
	// udp.Config.BusyPoll; 0 never busy-polls.
	BusyPoll time.Duration
	// RxQueues is how many receive queues the link has (nic.MultiQueue):
	// a packet goes to queue nic.QueueOf(its destination QPN), as the
	// udp link's steering does, so a device serves QPs on different
	// queues from different goroutines. 0 is 1; at most nic.MaxRxQueues.
	RxQueues int
}

// Attach creates a link with address addr on the network.
func (n *Net) Attach(addr netip.Addr, opt Options) (*Link, error) {
	addr = addr.Unmap()
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, dup := n.links[addr]; dup {
		return nil, fmt.Errorf("nic: address %v already attached", addr)
	}
	if opt.MTU == 0 {
		opt.MTU = 4500
	}
	if opt.RxQueue == 0 {
		opt.RxQueue = 8192
	}
	if opt.RxQueues < 0 || opt.RxQueues > nic.MaxRxQueues {
		return nil, fmt.Errorf("nic: %d receive queues: want 1 to %d", opt.RxQueues, nic.MaxRxQueues)
	}
	mac := opt.Hardware
	if mac == nil {
		// A locally administered MAC derived from the address, so the
		// link-local GID is stable from run to run.
		h := fnv.New32a()
		h.Write(addr.AsSlice())
		s := h.Sum32()
		mac = net.HardwareAddr{0x02, 0x00, byte(s >> 24), byte(s >> 16), byte(s >> 8), byte(s)}
	}
	l := &Link{net: n, addr: addr, mtu: opt.MTU, mac: mac, qmax: opt.RxQueue, busy: opt.BusyPoll}
	l.rx = make([]*rxQueue, max(opt.RxQueues, 1))
	for i := range l.rx {
		r := &rxQueue{}
		r.cond = sync.NewCond(&r.mu)
		l.rx[i] = r
	}
	n.links[addr] = l
	return l, nil
}

// SetFilter sets the filter of the path from one address to another (nil
// removes it).
func (n *Net) SetFilter(from, to netip.Addr, f Filter) {
	p := n.path(from.Unmap(), to.Unmap())
	p.mu.Lock()
	p.filter = f
	p.setClean()
	p.mu.Unlock()
}

// SetFaults sets the faults of the path from one address to another.
func (n *Net) SetFaults(from, to netip.Addr, f Faults) {
	p := n.path(from.Unmap(), to.Unmap())
	p.mu.Lock()
	p.faults = f
	p.setClean()
	p.mu.Unlock()
}

func (n *Net) path(from, to netip.Addr) *memPath {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := [2]netip.Addr{from, to}
	p := n.paths[k]
	if p == nil {
		h := fnv.New64a()
		h.Write(from.AsSlice())
		h.Write(to.AsSlice())
		s := h.Sum64()
		p = &memPath{rng: rand.New(rand.NewPCG(n.seed, s))}
		p.clean.Store(true)
		n.paths[k] = p
	}
	return p
}

func (n *Net) lookup(a netip.Addr) *Link {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.links[a]
}

func (n *Net) detach(l *Link) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.links[l.addr] == l {
		delete(n.links, l.addr)
	}
}

var memBufs = sync.Pool{New: func() any { return new([nic.MaxFrame]byte) }}

type memPacket struct {
	buf *[nic.MaxFrame]byte
	n   int
	// sealed: the sender's engine sealed these bytes (nic.Frame.Sealed)
	// and no fault or filter touched them, so they go up Verified.
	sealed bool
}

// Link is a link on a Net.
type Link struct {
	net  *Net
	addr netip.Addr
	mtu  int
	mac  net.HardwareAddr
	qmax int
	busy time.Duration // Options.BusyPoll

	rx   []*rxQueue  // the receive queues (Options.RxQueues)
	shut atomic.Bool // closed, for Send, which should not take a queue's mu (deliveries to l do)

	// routes holds the path and the link of each destination sent to
	// (netip.Addr to *route), so that a send takes no lock of the Net's,
	// which every link's sends share, and allocates nothing however the
	// destinations alternate. Paths live as long as the Net; a link found
	// closed, or none, is looked up again.
	routes sync.Map
	last   atomic.Pointer[route] // the route of the last send, looked at first: most links send to one peer

	txPackets, txBytes, rxPackets, rxBytes, txDropped, rxDropped atomic.Uint64
	injected                                                     [4]atomic.Uint64 // loss, dup, reorder, corrupt
}

// rxQueue is one receive queue of a link. Each has its own lock, so that
// deliveries to one queue and its receiver do not wait on another's.
type rxQueue struct {
	// hold is the queue's (nic.Poller), taken before mu.
	hold nic.QueueHold
	lent []memPacket // handed out to hold's holder (under hold)

	mu    sync.Mutex
	cond  *sync.Cond
	queue []memPacket
	// queued is len(queue), published (under mu) for what looks without
	// mu: a poll of an empty queue and a busy-polling receiver, which
	// would otherwise take mu on every look, the lock every delivery
	// needs.
	queued atomic.Int32
	closed bool
}

type route struct {
	dst  netip.Addr
	path *memPath
	peer *Link // nil: nobody at dst when it was looked up (looked up again at the next send)
}

// routeTo returns the route to dst, from l's cache while its link is open.
func (l *Link) routeTo(dst netip.Addr) *route {
	if r := l.last.Load(); r != nil && r.dst == dst && r.peer != nil && !r.peer.shut.Load() {
		return r
	}
	if v, ok := l.routes.Load(dst); ok {
		if r := v.(*route); r.peer != nil && !r.peer.shut.Load() {
			l.last.Store(r)
			return r
		}
	}
	r := &route{dst: dst, path: l.net.path(l.addr, dst), peer: l.net.lookup(dst)}
	l.routes.Store(dst, r)
	l.last.Store(r)
	return r
}

// Send implements nic.Link. Consecutive frames on a clean path to one
// peer are queued there together, under one hold of its lock: that lock
// is also the one its receiver takes them under, on another core.
func (l *Link) Send(frames []nic.Frame) (int, error) {
	if l.isClosed() {
		return 0, nic.ErrClosed
	}
	var run [sendRun]memPacket
	var to *Link
	k := 0
	var runBytes uint64
	// flush counts the run as sent and then delivers it: a packet is
	// counted before its receiver can see it, so a test that read n
	// packets never finds fewer than n counted.
	flush := func() {
		l.txPackets.Add(uint64(k))
		l.txBytes.Add(runBytes)
		l.deliver(to, run[:k])
		k, runBytes = 0, 0
	}
	for _, f := range frames {
		d := f.Datagram()
		if len(d) > l.mtu {
			l.txDropped.Add(1)
			continue
		}
		dst, ok := dstAddr(d)
		if !ok {
			l.txDropped.Add(1)
			continue
		}
		rt := l.routeTo(dst)
		clean := rt.path.clean.Load()
		if k > 0 && (rt.peer != to || k == len(run) || !clean) {
			flush()
		}
		if !clean {
			l.txPackets.Add(1)
			l.txBytes.Add(uint64(len(d)))
			l.transmit(rt, dst, d, f.Sealed)
			continue
		}
		to = rt.peer
		run[k] = memPacket{buf: memBufs.Get().(*[nic.MaxFrame]byte), n: len(d), sealed: f.Sealed}
		copy(run[k].buf[:], d)
		k++
		runBytes += uint64(len(d))
	}
	if k > 0 {
		flush()
	}
	return len(frames), nil
}

// sendRun is how many packets Send queues at a peer at once.
const sendRun = 32

// transmit applies the faults and filter of rt's path and delivers.
func (l *Link) transmit(rt *route, dst netip.Addr, d []byte, sealed bool) {
	p := rt.path
	p.mu.Lock()
	f := p.faults
	v := Pass
	if p.filter != nil {
		v = p.filter(d)
		sealed = false // the filter saw the bytes and may have changed them
	}
	dr := f.Draw(p.rng, len(d))
	p.mu.Unlock()
	lose, dup, reorder, corrupt, bit := v == Drop || dr.Lose, v == Duplicate || dr.Duplicate, dr.Reorder, dr.Corrupt, dr.Bit
	if lose {
		l.injected[0].Add(1)
		return
	}
	copies := 1
	if dup {
		l.injected[1].Add(1)
		copies = 2
	}
	for range copies {
		pk := memPacket{buf: memBufs.Get().(*[nic.MaxFrame]byte), n: len(d), sealed: sealed && !corrupt}
		copy(pk.buf[:], d)
		if corrupt {
			pk.buf[bit/8] ^= 1 << (bit % 8)
		}
		delay := f.Delay
		if reorder {
			rd := f.ReorderDelay
			if rd == 0 {
				rd = 300 * time.Microsecond
			}
			delay += rd
		}
		if delay > 0 {
			time.AfterFunc(delay, func() { l.deliver(l.net.lookup(dst), []memPacket{pk}) })
		} else {
			l.deliver(rt.peer, []memPacket{pk})
		}
	}
	if corrupt {
		l.injected[3].Add(1)
	}
	if reorder {
		l.injected[2].Add(1)
	}
}

// deliver queues pks on to, the link at their destination when they were
// sent (nil: none), as far as its queues have room: each run of packets
// bound for one queue under one hold of that queue's lock.
func (l *Link) deliver(to *Link, pks []memPacket) {
	if to == nil {
		l.txDropped.Add(uint64(len(pks)))
		putAll(pks)
		return
	}
	if len(to.rx) == 1 {
		to.rx[0].put(to, pks)
		return
	}
	for len(pks) > 0 {
		qi := to.queueOf(&pks[0])
		k := 1
		for k < len(pks) && to.queueOf(&pks[k]) == qi {
			k++
		}
		to.rx[qi].put(to, pks[:k])
		pks = pks[k:]
	}
}

// queueOf returns the receive queue of l that pk goes to: by its BTH's
// destination QPN (nic.QueueOf), queue 0 for what is too short to have
// one (the device counts and drops it).
func (l *Link) queueOf(pk *memPacket) int {
	d := pk.buf[:pk.n]
	off := 0
	switch {
	case len(d) >= inet.IPv4HeaderLen && d[0]>>4 == 4:
		off = int(d[0]&0xf) * 4
	case len(d) >= inet.IPv6HeaderLen && d[0]>>4 == 6:
		off = inet.IPv6HeaderLen
	}
	off += inet.UDPHeaderLen
	if off == inet.UDPHeaderLen || len(d) < off+bth.BTHLen {
		return 0
	}
	return nic.QueueOf(bth.BTH(d[off:off+bth.BTHLen]).DestQP(), len(l.rx))
}

// put queues pks on r, a queue of link l, as far as it has room.
func (r *rxQueue) put(l *Link, pks []memPacket) {
	r.mu.Lock()
	room := 0
	if !r.closed {
		room = min(len(pks), l.qmax-len(r.queue))
		r.queue = append(r.queue, pks[:room]...)
		r.queued.Store(int32(len(r.queue)))
	}
	r.mu.Unlock()
	if lost := pks[room:]; len(lost) > 0 {
		l.rxDropped.Add(uint64(len(lost)))
		putAll(lost)
	}
	if room > 0 {
		r.cond.Signal()
	}
}

func putAll(pks []memPacket) {
	for _, pk := range pks {
		memBufs.Put(pk.buf)
	}
}

// Recv implements nic.Link: RecvQueue(0, frames).
func (l *Link) Recv(frames []nic.Frame) (int, error) { return l.RecvQueue(0, frames) }

// RxQueues implements nic.MultiQueue (Options.RxQueues).
func (l *Link) RxQueues() int { return len(l.rx) }

// RecvQueue implements nic.MultiQueue. The receiver holds the queue's
// frames from its return to the next call (nic.Poller).
func (l *Link) RecvQueue(i int, frames []nic.Frame) (int, error) {
	if i < 0 || i >= len(l.rx) {
		return 0, fmt.Errorf("nic: mem: receive queue %d of %d", i, len(l.rx))
	}
	r := l.rx[i]
	if r.hold.ReceiverLetsGo() {
		r.release()
	}
	if len(frames) == 0 {
		return 0, nil
	}
	var since time.Time
	for {
		// Wait for a packet without the hold, so that a poller can take
		// it meanwhile; then take the hold and see whether one is left.
		r.mu.Lock()
		for len(r.queue) == 0 && !r.closed {
			if r.hold.PollersTook() {
				// Pollers took frames since the receiver's last return:
				// no frames, so that the caller can stand aside
				// (nic.Poller).
				r.mu.Unlock()
				r.hold.StandAside()
				return 0, nil
			}
			if l.busy > 0 {
				r.mu.Unlock()
				again := l.spin(r, &since)
				r.mu.Lock()
				if again {
					continue
				}
			}
			r.cond.Wait()
		}
		closed := r.closed
		r.mu.Unlock()
		if closed {
			return 0, nic.ErrClosed
		}
		r.hold.Lock()
		if n := l.take(r, frames); n > 0 {
			r.hold.ReceiverKeeps()
			return n, nil
		}
		r.hold.Unlock()
	}
}

// spin busy-polls queue r for the receiver, without its mu, until a
// packet is queued, the link closes or pollers take frames (it then
// reports true: look again), or the budget that began at since is spent
// (false: wait). It reads the clock every 64 looks, not at each: a look
// is a few nanoseconds, and the clock was 5% of a polling receiver's
// time.
func (l *Link) spin(r *rxQueue, since *time.Time) bool {
	if since.IsZero() {
		*since = time.Now()
	}
	for i := 1; ; i++ {
		if r.queued.Load() > 0 || l.shut.Load() || r.hold.PollersTook() {
			return true
		}
		if i%64 == 0 && time.Since(*since) >= l.busy {
			return false
		}
		runtime.Gosched()
	}
}

// PollQueue implements nic.Poller.
func (l *Link) PollQueue(i int, frames []nic.Frame) int {
	if i < 0 || i >= len(l.rx) {
		return 0
	}
	r := l.rx[i]
	// An empty queue answers without its locks, which deliveries need.
	if len(frames) == 0 || r.queued.Load() == 0 || !r.hold.TryLock() {
		return 0
	}
	n := l.take(r, frames)
	if n == 0 {
		r.hold.Unlock()
		return 0
	}
	r.hold.PollTook()
	return n
}

// EndPoll implements nic.Poller.
func (l *Link) EndPoll(i int) { l.rx[i].release() }

// EndRecv implements nic.Poller.
func (l *Link) EndRecv(i int) {
	if r := l.rx[i]; r.hold.ReceiverLetsGo() {
		r.release()
	}
}

// release returns the buffers lent to hold's holder and releases hold.
func (r *rxQueue) release() {
	for i, pk := range r.lent {
		memBufs.Put(pk.buf)
		r.lent[i] = memPacket{}
	}
	r.lent = r.lent[:0]
	r.hold.Unlock()
}

// take hands out up to len(frames) packets queued on r (under its hold).
// It holds r's mu, which every delivery to the queue needs, only to move
// the packets to lent: a sender on another core waits on it meanwhile.
func (l *Link) take(r *rxQueue, frames []nic.Frame) int {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return 0
	}
	n := min(len(frames), len(r.queue))
	first := len(r.lent)
	r.lent = append(r.lent, r.queue[:n]...)
	rest := copy(r.queue, r.queue[n:])
	clear(r.queue[rest:])
	r.queue = r.queue[:rest]
	r.queued.Store(int32(rest))
	r.mu.Unlock()
	var bytes uint64
	for i, pk := range r.lent[first : first+n] {
		frames[i] = nic.Frame{B: pk.buf[:pk.n], Off: 0}
		if pk.sealed {
			// Decoded here, the one time, without the checks the sealer
			// made true (nic.Frame.Sealed).
			if f, err := bth.DecodeSealed(frames[i].B); err == nil {
				frames[i].Verified, frames[i].Decoded = true, f
			}
		}
		bytes += uint64(pk.n)
	}
	l.rxPackets.Add(uint64(n))
	l.rxBytes.Add(bytes)
	return n
}

// Info implements nic.Link.
func (l *Link) Info() nic.Info {
	return nic.Info{Name: "mem " + l.addr.String(), MTU: l.mtu, Addrs: []netip.Addr{l.addr}, MAC: l.mac, DirectSend: true, PollNoSyscall: true,
		// Sealed frames come up Verified (nic.Frame.Sealed).
		Offload: nic.OffloadRxVerify}
}

// SrcPort implements nic.Link: the hash HCAs use.
func (l *Link) SrcPort(qpn uint32) uint16 { return nic.RoCEv2SrcPort(qpn) }

// Stats implements nic.Link.
func (l *Link) Stats() nic.Stats {
	return nic.Stats{TxPackets: l.txPackets.Load(), TxBytes: l.txBytes.Load(),
		RxPackets: l.rxPackets.Load(), RxBytes: l.rxBytes.Load(),
		TxDropped: l.txDropped.Load(), RxDropped: l.rxDropped.Load()}
}

// Injected returns how many packets this link's sends lost, duplicated,
// reordered and corrupted by injection.
func (l *Link) Injected() (loss, dup, reorder, corrupt uint64) {
	return l.injected[0].Load(), l.injected[1].Load(), l.injected[2].Load(), l.injected[3].Load()
}

// Close implements nic.Link.
func (l *Link) Close() error {
	if l.shut.Swap(true) {
		return nil
	}
	for _, r := range l.rx {
		r.mu.Lock()
		r.closed = true
		for _, pk := range r.queue {
			memBufs.Put(pk.buf)
		}
		r.queue = nil
		r.queued.Store(0)
		r.mu.Unlock()
		r.cond.Broadcast()
	}
	l.net.detach(l)
	return nil
}

func (l *Link) isClosed() bool { return l.shut.Load() }

// dstAddr reads the destination address of an IP datagram.
func dstAddr(d []byte) (netip.Addr, bool) {
	switch {
	case len(d) >= inet.IPv4HeaderLen && d[0]>>4 == 4:
		return inet.IPv4(d).Dst(), true
	case len(d) >= inet.IPv6HeaderLen && d[0]>>4 == 6:
		return inet.IPv6(d).Dst().Unmap(), true
	}
	return netip.Addr{}, false
}
