package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/internal/spin"
)

// Status is a work completion status, with the values of enum ibv_wc_status.
type WCStatus uint8

// Completion statuses.
const (
	Success        WCStatus = 0
	LocLenErr      WCStatus = 1
	LocQPOpErr     WCStatus = 2
	LocEECOpErr    WCStatus = 3
	LocProtErr     WCStatus = 4
	WRFlushErr     WCStatus = 5
	MWBindErr      WCStatus = 6
	BadRespErr     WCStatus = 7
	LocAccessErr   WCStatus = 8
	RemInvReqErr   WCStatus = 9
	RemAccessErr   WCStatus = 10
	RemOpErr       WCStatus = 11
	RetryExcErr    WCStatus = 12
	RNRRetryExcErr WCStatus = 13
	LocRDDViolErr  WCStatus = 14
	RemInvRDReqErr WCStatus = 15
	RemAbortErr    WCStatus = 16
	InvEECNErr     WCStatus = 17
	InvEECStateErr WCStatus = 18
	FatalErr       WCStatus = 19
	RespTimeoutErr WCStatus = 20
	GeneralErr     WCStatus = 21
)

// statusNames are the strings ibv_wc_status_str returns.
var statusNames = [...]string{
	"success", "local length error", "local QP operation error", "local EE context operation error",
	"local protection error", "Work Request Flushed Error", "memory management operation error",
	"bad response error", "local access error", "remote invalid request error", "remote access error",
	"remote operation error", "transport retry counter exceeded", "RNR retry counter exceeded",
	"local RDD violation error", "remote invalid RD request", "operation aborted",
	"invalid EE context number", "invalid EE context state", "fatal error", "response timeout error",
	"general error",
}

// String returns the text ibv_wc_status_str gives for the status.
func (s WCStatus) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("unknown status %d", uint8(s))
}

// Opcode is the operation a completion reports, with the values of enum ibv_wc_opcode.
type WCOpcode uint8

// Completion opcodes.
const (
	OpSend            WCOpcode = 0
	OpRDMAWrite       WCOpcode = 1
	OpRDMARead        WCOpcode = 2
	OpCompSwap        WCOpcode = 3
	OpFetchAdd        WCOpcode = 4
	OpBindMW          WCOpcode = 5
	OpLocalInv        WCOpcode = 6
	OpRegMR           WCOpcode = 8 // a fast registration (WRRegMR): the kernel's IB_WC_REG_MR, libibverbs has none
	OpRecv            WCOpcode = 128
	OpRecvRDMAWithImm WCOpcode = 129
)

// String returns the opcode's name without the IBV_WC_ prefix.
func (o WCOpcode) String() string {
	switch o {
	case OpSend:
		return "SEND"
	case OpRDMAWrite:
		return "RDMA_WRITE"
	case OpRDMARead:
		return "RDMA_READ"
	case OpCompSwap:
		return "COMP_SWAP"
	case OpFetchAdd:
		return "FETCH_ADD"
	case OpBindMW:
		return "BIND_MW"
	case OpLocalInv:
		return "LOCAL_INV"
	case OpRegMR:
		return "REG_MR"
	case OpRecv:
		return "RECV"
	case OpRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return fmt.Sprintf("opcode(%d)", uint8(o))
}

// Flags qualify a completion, with the bit values of enum ibv_wc_flags.
type WCFlags uint8

// Completion flags.
const (
	WithGRH WCFlags = 1 << 0 // a UD receive: the first 40 bytes hold the GRH
	WithImm WCFlags = 1 << 1 // ImmData is valid
	WithInv WCFlags = 1 << 3 // InvalidatedRKey is valid
)

// WC is a work completion, as struct ibv_wc.
type WC struct {
	WRID            uint64   // the work request's WRID
	Status          WCStatus // success, or why the work request failed
	Opcode          WCOpcode // the operation that completed
	VendorErr       uint32   // a provider-specific error detail, 0 if none
	ByteLen         uint32   // receives and READs: the bytes placed (UD: with the 40-byte GRH)
	ImmData         uint32   // in the byte order it had on the wire
	InvalidatedRKey uint32   // the rkey a SEND with Invalidate invalidated (WithInv)
	QPNum           uint32   // the local QP the work request was posted to
	SrcQP           uint32   // UD receives: the sender's QP number
	Flags           WCFlags  // WithGRH, WithImm, WithInv
	PKeyIndex       uint16   // the P_Key index the packet matched (always 0)
	SLID            uint16   // the sender's LID: 0 on RoCE
	SL              uint8    // 0 on RoCE, but a UD receive's: its packet type (SLRoCEv2IPv4, SLRoCEv2IPv6)
	DLIDPathBits    uint8    // 0 on RoCE
}

// The SL of a UD receive completion: RoCE has no service level, and an
// mlx5 HCA reports in its place the packet type of its CQE (bit 3: the
// frame had a UDP header, RoCE v2; bits 2:0: the L3 header, 1 IPv6, 2
// IPv4), which ibv_wc.sl carries. UCX (1.11 to 1.17, Debian's 1.13
// among them) reads it to find where the destination address lies in
// the receive buffer's 40 bytes (an IPv4 header fills only the last 20)
// and, by default (UD_VERBS_ETH_DGID_CHECK), drops a packet whose address
// is not its own: with rxe's 0 it reads an IPv4 packet as IPv6 and drops
// every one (UCX's PR 10209 names such drivers). So goroce reports what
// mlx5 does (docs/departures-from-rxe.md).
const (
	SLRoCEv2IPv4 uint8 = 0x8 | 0x2
	SLRoCEv2IPv6 uint8 = 0x8 | 0x1
)

// Vendor errors (WC.VendorErr) of the send completions a NAK or the
// retry limit ended, with the values mlx5 puts in an error CQE's
// vendor_err_synd, so that a program logging vendor_err reads from goroce
// what it reads from a ConnectX HCA. NVIDIA publishes no table of them:
// these are the values mlx5 CQEs carry in public logs of those errors
// (UCX's "synd 0x13 vend 0x88", "synd 0x14 vend 0x89", "synd 0x15 vend
// 0x81"; a CQE dump with syndrome 0x12 and vendor_err_synd 0x8a). The
// status alone names the NAK's code; VendorErr says a NAK from the
// responder, not a local check, produced it. Other completions carry 0.
const (
	VendorRetryExceeded     uint32 = 0x81 // RetryExcErr: no response after retry_cnt retries (mlx5 syndrome 0x15)
	VendorNAKRemoteAccess   uint32 = 0x88 // RemAccessErr: NAK remote access error (mlx5 syndrome 0x13)
	VendorNAKRemoteOp       uint32 = 0x89 // RemOpErr: NAK remote operational error (mlx5 syndrome 0x14)
	VendorNAKInvalidRequest uint32 = 0x8a // RemInvReqErr: NAK invalid request (mlx5 syndrome 0x12)
)

// ErrOverrun is reported when a completion finds the queue full: the
// completion is lost, as on an HCA, and the queue enters the error state;
// the loss is reported, never silent.
var ErrOverrun = errors.New("cq: completion queue overrun")

// ErrTooShallow is returned by Resize for a depth below the queue's fill.
var ErrTooShallow = errors.New("cq: depth below the number of completions held")

// CQ is a completion queue of fixed depth. It is safe for concurrent use.
type CQ struct {
	mu      sync.Mutex
	ring    []WC
	head    int // oldest
	n       int
	err     error
	lost    uint64
	wake    chan struct{} // signalled when entries arrive; capacity 1
	armed   bool
	solOnly bool
	events  chan struct{} // completion events for ReqNotify; capacity 1
	// eventHook, when set (SetEventHook), is called for each event in
	// place of the send on events.
	eventHook func()
	onError   func(*CQ, error)
	closed    bool // shutdown: err holds the device's closed error
	// mirror, when set (MirrorCQ, for libgoroce), is kept equal to n, or
	// to ^0 once err is set, so that a C poller can see an empty queue
	// without calling into Go.
	mirror *uint32
	// ready is n, or ^0 with err set, as mirrorN publishes it: a Poll
	// reads it before it takes mu, so that polling an empty queue in a
	// loop takes no lock, which would otherwise bounce between the
	// poller's core and the core of the device pushing the completion
	// the poller waits for.
	ready atomic.Uint32
	// waiting counts the goroutines in Wait, asleep or about to be, so
	// that a push signals wake only when one may be waiting: a channel
	// send takes the channel's own lock, a cost every completion paid.
	waiting int
	// pushed, when set (the device's), counts the completions pushed: a
	// receive goroutine whose batch completed work lets the program
	// polling or waiting for it run before it ends its burst
	// (Device.rxLoop).
	pushed *atomic.Uint64
	// progress, when set (the device's poll mode), is what an empty Poll
	// calls to receive and handle what has arrived on the caller's own
	// goroutine; set before the queue is handed out, then only read.
	progress func(queues uint64) bool
	// queues has a bit for each receive queue of the device that packets
	// completing work on this CQ arrive on (nic.QueueOf of its QPs'
	// numbers; 0: none known yet, every queue). In poll mode its empty
	// Poll receives on those queues only, as an HCA's completion vector
	// serves its own queues: two QPs on two queues, each polled by its
	// own thread, then never take each other's packets, and a queue no
	// poller serves stays with its receive goroutine.
	queues atomic.Uint64
	// yieldEvery is how many empty polls a busy-polling loop makes per
	// yield (Yield; internal/spin): set with progress; 0 or 1, each poll.
	yieldEvery int
	// notified mirrors armed for Poll, which reads it without mu: a
	// queue armed for an event does not drive the device (progress) for
	// its first armedIdlePolls empty polls (armedPolls). Its
	// program is about to sleep on the event, and the device's receive
	// goroutine must deliver it: onArm, set with progress, tells the
	// device to hand it the receiving at once rather than wait out the
	// pollers' last polls.
	notified atomic.Bool
	onArm    func()
	// armedPolls counts the empty polls since the queue was armed: a
	// program that arms a queue to sleep polls it once or twice more
	// first, but one that keeps polling it is a poller all the same
	// (UCX's UD transport arms its receive queue for solicited events
	// only, for its progress thread, and polls it all along): after
	// armedIdlePolls such polls an armed queue drives the device again.
	armedPolls atomic.Uint32
}

// armedIdlePolls is how many empty polls of an armed queue drive nothing
// (CQ.armedPolls).
const armedIdlePolls = 4

// newCQ returns a completion queue holding up to depth completions.
// onError, if not nil, is called once when the queue overruns (the device
// turns it into an asynchronous event).
func newCQ(depth int, onError func(*CQ, error)) *CQ {
	if depth < 1 {
		depth = 1
	}
	return &CQ{ring: make([]WC, depth), wake: make(chan struct{}, 1),
		events: make(chan struct{}, 1), onError: onError}
}

// Depth returns the number of completions the queue holds at most.
func (c *CQ) Depth() int { return len(c.ring) }

// push adds a completion. It is called by the engine; solicited marks a
// completion that should wake a ReqNotify(true) waiter. It returns false if
// the queue overran. wc is taken by value: qp calls push through a
// function value, which would make a pointer argument escape, and so
// allocate every completion on the heap.
func (c *CQ) push(wc WC, solicited bool) bool {
	c.mu.Lock()
	if c.err != nil {
		c.lost++
		c.mu.Unlock()
		return false
	}
	if c.n == len(c.ring) {
		c.err = ErrOverrun
		c.lost++
		c.mirrorN()
		cb := c.onError
		c.mu.Unlock()
		if cb != nil {
			cb(c, ErrOverrun)
		}
		return false
	}
	c.ring[c.at(c.n)] = wc
	c.n++
	c.mirrorN()
	if c.pushed != nil {
		c.pushed.Add(1)
	}
	notify := c.armed && (!c.solOnly || solicited || wc.Status != Success)
	if notify {
		c.armed = false
		c.notified.Store(false)
	}
	// Signalled under the lock, which shutdown holds to close the channels
	// and Wait holds to count itself in before it sleeps.
	if c.waiting > 0 {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	if notify {
		if c.eventHook != nil {
			c.eventHook()
		} else {
			select {
			case c.events <- struct{}{}:
			default:
			}
		}
	}
	c.mu.Unlock()
	return true
}

// shutdown ends the queue when its device closes; err wraps
// ErrClosed. Completions already held stay: Poll returns them,
// oldest first, as libibverbs lets a CQ be drained until it is destroyed,
// and then err. Every Wait and PollWait returns, and Events is closed, so
// a completion-channel reader wakes too. Later completions are lost.
func (c *CQ) shutdown(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	c.err = err
	c.mirrorN()
	close(c.wake)
	close(c.events)
}

// Poll moves up to len(wc) completions, oldest first, into wc and returns
// how many. It never blocks. After an overrun it returns the completions
// held and then ErrOverrun; after its device closed, the completions held
// and then an error wrapping ErrClosed. On a device in poll mode
// (Options.PollProgress) a Poll that finds the queue empty first
// receives and handles what has arrived, on the calling goroutine.
func (c *CQ) Poll(wc []WC) (int, error) {
	if c.ready.Load() == 0 { // empty: a push after this load is the next Poll's
		if len(wc) == 0 || c.progress == nil || c.sleepsArmed() || !c.progress(c.queues.Load()) {
			return 0, nil
		}
	}
	return c.take(wc)
}

// onQueue records that packets completing work on c arrive on receive
// queue i (CQ.queues); queues past the mask's 64 leave it at every queue.
func (c *CQ) onQueue(i int) {
	if c == nil {
		return
	}
	bit := uint64(1) << i
	if i >= 64 {
		bit = ^uint64(0)
	}
	if c.queues.Load()&bit != bit { // a load first: the line stays shared
		c.queues.Or(bit)
	}
}

// sleepsArmed reports whether an empty Poll should leave the device to
// its receive goroutine: the queue is armed, and its program has not
// polled it more than armedIdlePolls times since (armedPolls).
func (c *CQ) sleepsArmed() bool {
	// Loads first: a queue its program keeps polling armed (UCX's) is
	// past its idle polls at every poll, and pays no read-modify-write.
	if !c.notified.Load() || c.armedPolls.Load() >= armedIdlePolls {
		return false
	}
	c.armedPolls.Add(1)
	return true
}

// setProgress sets what an empty Poll calls, the yield period of the
// loops that poll it, and what arming it calls (before the queue is used).
func (c *CQ) setProgress(f func(queues uint64) bool, yieldEvery int, onArm func()) {
	c.progress, c.yieldEvery, c.onArm = f, yieldEvery, onArm
}

// Yield gives the processor back as a loop busy-polling this queue
// should after its i-th empty poll (i counting up by one a poll): at every
// poll, as runtime.Gosched, except on a device in poll mode whose link is
// polled without a system call (the afxdp and in-memory links) in a
// process whose clock reads are system calls (a virtual machine's HPET),
// where it yields once in 64 polls: there the scheduler's clock read at
// each yield cost more than the polls.
func (c *CQ) Yield(i int) { spin.Yield(i, c.yieldEvery) }

// take moves up to len(wc) completions into wc.
func (c *CQ) take(wc []WC) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := min(len(wc), c.n)
	for i := range k {
		wc[i] = c.ring[c.head]
		c.head = c.at(1)
	}
	c.n -= k
	c.mirrorN()
	if k == 0 && c.err != nil {
		return 0, c.err
	}
	return k, nil
}

// at returns the ring index i entries after head (i <= len(ring)): a
// compare rather than a division, which costs more than the rest of a
// push.
func (c *CQ) at(i int) int {
	j := c.head + i
	if j >= len(c.ring) {
		j -= len(c.ring)
	}
	return j
}

// mirrorN publishes n (or, with an error set, a value a poller never
// takes for empty, so that it comes for the error) to ready and to the
// mirror. Called with mu held.
func (c *CQ) mirrorN() {
	v := uint32(c.n)
	if c.err != nil {
		v = ^uint32(0)
	}
	c.ready.Store(v)
	if c.mirror != nil {
		atomic.StoreUint32(c.mirror, v)
	}
}

// SetMirror starts (p set) or stops (nil) mirroring the queue's length
// into *p, which must stay valid until it is stopped.
func (c *CQ) SetMirror(p *uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mirror = p
	c.mirrorN()
}

// Len returns the number of completions waiting.
func (c *CQ) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// Lost returns how many completions were lost to an overrun.
func (c *CQ) Lost() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lost
}

// Wait blocks until the queue holds a completion, the queue is in error
// (overrun, or its device closed), or ctx is done. A completion that is
// in the queue when ctx ends wins: a wait ended by a connection's end
// still sees what came before it (the flushes its QP's move to ERR put
// in, or the last message).
func (c *CQ) Wait(ctx context.Context) error {
	for {
		c.mu.Lock()
		n, err := c.n, c.err
		if n == 0 && err == nil {
			c.waiting++
		}
		c.mu.Unlock()
		if n > 0 {
			return nil
		}
		if err != nil {
			return err
		}
		woke := true
		select {
		case <-c.wake:
		case <-ctx.Done():
			woke = false
		}
		c.mu.Lock()
		c.waiting--
		n = c.n
		c.mu.Unlock()
		if !woke && n == 0 {
			return ctx.Err()
		}
	}
}

// pollSpin is how long PollWait on a device in poll mode goes on polling
// an empty queue, each poll handling what has arrived, before it sleeps
// until the device's receive goroutine delivers a completion: longer than
// the round trips poll mode serves, short enough that an idle program
// gives its core back.
const pollSpin = 200 * time.Microsecond

// PollWait polls, waiting while the queue is empty. On a device in poll
// mode it polls in a loop for up to 200 µs of finding nothing, and then
// sleeps.
func (c *CQ) PollWait(ctx context.Context, wc []WC) (int, error) {
	var since time.Time
	for empty := 0; ; empty++ {
		n, err := c.Poll(wc)
		if n > 0 || err != nil {
			return n, err
		}
		if c.progress == nil {
			if err := c.Wait(ctx); err != nil {
				return 0, err
			}
			continue
		}
		if err := ctx.Err(); err != nil {
			// What came in since the poll above still wins (as in Wait).
			if n, perr := c.Poll(wc); n > 0 || perr != nil {
				return n, perr
			}
			return 0, err
		}
		// The clock is read at the first empty poll and at every 16th
		// after it, not at each: a read costs more than an empty poll,
		// and was 4% of a busy poller's time. After the first, time.Since
		// reads the monotonic clock alone (time.Now reads the wall clock
		// too): where a read is a system call, one instead of two.
		if empty%pollClock == 0 {
			if since.IsZero() {
				since = time.Now()
			} else if time.Since(since) >= pollSpin {
				if err := c.Wait(ctx); err != nil {
					return 0, err
				}
				since, empty = time.Time{}, -1 // spin again once woken
				continue
			}
		}
		c.Yield(empty)
	}
}

// pollClock is how many empty polls PollWait makes per clock read.
const pollClock = 16

// ReqNotify arms the queue, as ibv_req_notify_cq: the next completion (or,
// with solicitedOnly, the next solicited or error completion) sends one
// event on Events.
//
// On a device in poll mode an armed queue's first armedIdlePolls empty
// Polls do not receive for the device: a program arms a queue to sleep on
// its event, and the event can come only from the device's receive
// goroutine, which arming wakes.
func (c *CQ) ReqNotify(solicitedOnly bool) {
	c.mu.Lock()
	c.armed = true
	c.solOnly = solicitedOnly
	c.armedPolls.Store(0)
	c.notified.Store(true)
	c.mu.Unlock()
	if c.onArm != nil {
		c.onArm()
	}
}

// Events delivers one value per completion event requested with ReqNotify
// (the completion channel of libibverbs).
func (c *CQ) Events() <-chan struct{} { return c.events }

// SetEventHook has f called for each event, on the goroutine that pushed
// the completion and under the CQ's lock, instead of a send on Events; f
// must not call the CQ. A completion channel that is a file descriptor
// (libgoroce.so's) is written from there, rather than by a goroutine
// woken for each event: a wake-up at each end of an event-driven round
// trip. SetEventHook(nil) returns once no call of the hook it replaces
// is in progress.
func (c *CQ) SetEventHook(f func()) {
	c.mu.Lock()
	c.eventHook = f
	c.mu.Unlock()
}

// Resize changes the depth, keeping the completions held.
func (c *CQ) Resize(depth int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.err
	}
	if depth < c.n || depth < 1 {
		return ErrTooShallow
	}
	ring := make([]WC, depth)
	for i := range c.n {
		ring[i] = c.ring[c.at(i)]
	}
	c.ring, c.head = ring, 0
	return nil
}
