package transport_test

import (
	"errors"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/manualclock"
	"github.com/goroce/goroce/internal/testharness"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/nic/udp"
	"github.com/goroce/goroce/transport"
)

// sendLog is an in-memory link that records how many frames each Send
// carried. Its sends, as the udp link's, are not function calls
// (nic.Info.DirectSend off) unless direct.
type sendLog struct {
	*mem.Link
	direct bool // keep the in-memory link's DirectSend

	mu    sync.Mutex
	sends []int
}

func (l *sendLog) Send(frames []nic.Frame) (int, error) {
	l.mu.Lock()
	l.sends = append(l.sends, len(frames))
	l.mu.Unlock()
	return l.Link.Send(frames)
}

// sent returns the frame counts of the Sends so far and forgets them.
func (l *sendLog) sent() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sends
	l.sends = nil
	return s
}

// Info is the in-memory link's, but for DirectSend unless direct:
// sendLog stands for a link whose sends cost a system call, as the udp
// link's do.
func (l *sendLog) Info() nic.Info {
	inf := l.Link.Info()
	inf.DirectSend = l.direct
	return inf
}

// pollOnly is a sendLog whose receive goroutine never gets a frame:
// everything reaches its device through the device's pollers.
type pollOnly struct {
	*sendLog
	once   sync.Once
	closed chan struct{}
}

func newPollOnly(l *mem.Link) nic.Link {
	return &pollOnly{sendLog: &sendLog{Link: l}, closed: make(chan struct{})}
}

func (l *pollOnly) Recv([]nic.Frame) (int, error) {
	<-l.closed
	return 0, nic.ErrClosed
}

func (l *pollOnly) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Link.Close()
}

// progressLoop polls an empty CQ of d until the test ends: a progress
// thread, which in poll mode receives and handles what arrives.
func progressLoop(t *testing.T, d *transport.Device) {
	c := d.CreateCQ(1)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wc [1]transport.WC
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.Poll(wc[:]); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

// TestPollMode runs every RC operation, at every size, the atomics and a
// burst of mixed operations, on devices in poll mode: alone (the receive
// goroutines get nothing, so every packet is a poller's), sharing the
// in-memory link's queue with the receive goroutine, and over the udp
// link on loopback, opened in the network poller (where the sockets stay,
// or which they leave when the device is asked to: Options.LeaveNetpoll,
// nic.NetpollLeaver) or out of it (NoNetpoll), and over two udp links
// joined by nic.Multi.
func TestPollMode(t *testing.T) {
	o := testharness.Options{PollProgress: true}
	pairWith := func(t *testing.T, o testharness.Options, a, b nic.Link, aa, ba string) (*testharness.Peer, *testharness.Peer) {
		pa := testharness.NewPeer(t, a, netip.MustParseAddr(aa), o)
		pb := testharness.NewPeer(t, b, netip.MustParseAddr(ba), o)
		testharness.ConnectQP(t, pa, pb, pa.Opt, pa.Opt.PSN, pb.Opt.PSN)
		testharness.ConnectQP(t, pb, pa, pb.Opt, pb.Opt.PSN, pa.Opt.PSN)
		progressLoop(t, pa.Dev)
		progressLoop(t, pb.Dev)
		return pa, pb
	}
	pair := func(t *testing.T, a, b nic.Link, aa, ba string) (*testharness.Peer, *testharness.Peer) {
		return pairWith(t, o, a, b, aa, ba)
	}
	memPair := func(t *testing.T, wrap func(*mem.Link) nic.Link) (*testharness.Peer, *testharness.Peer) {
		n := mem.NewNet(1)
		link := func(addr string) nic.Link {
			l, err := n.Attach(netip.MustParseAddr(addr), mem.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return wrap(l)
		}
		return pair(t, link("10.0.0.1"), link("10.0.0.2"), "10.0.0.1", "10.0.0.2")
	}
	report := func(t *testing.T, ps ...*testharness.Peer) {
		for _, p := range ps {
			c := p.Dev.Counters()
			t.Logf("%v: %d of %d packets handled by pollers", p.Addr, c.PolledPkts.Load(), c.RcvdPkts.Load())
		}
	}
	t.Run("alone", func(t *testing.T) {
		a, b := memPair(t, newPollOnly)
		testharness.CheckRC(t, a, b)
		for _, p := range []*testharness.Peer{a, b} {
			c := p.Dev.Counters()
			if polled, rcvd := c.PolledPkts.Load(), c.RcvdPkts.Load(); polled != rcvd || rcvd == 0 {
				t.Errorf("%v: %d packets received, %d of them by pollers; want all", p.Addr, rcvd, polled)
			}
		}
	})
	t.Run("shared", func(t *testing.T) {
		a, b := memPair(t, func(l *mem.Link) nic.Link { return l })
		testharness.CheckRC(t, a, b)
		report(t, a, b)
	})
	for _, c := range []struct {
		name             string
		noNetpoll, leave bool
		asks             int32 // the device's requests to leave the network poller
	}{{"udp", false, false, 0}, {"udp-leave", false, true, 1}, {"udp-nonetpoll", true, false, 0}} {
		t.Run(c.name, func(t *testing.T) {
			var links []*leaveCounter
			link := func(addr string) nic.Link {
				l, err := udp.Open(udp.Config{Addr: netip.MustParseAddr(addr), NoNetpoll: c.noNetpoll})
				if err != nil {
					t.Fatal(err)
				}
				links = append(links, &leaveCounter{Link: l})
				return links[len(links)-1]
			}
			lo := o
			lo.LeaveNetpoll = c.leave
			a, b := pairWith(t, lo, link("127.0.21.1"), link("127.0.21.2"), "127.0.21.1", "127.0.21.2")
			for _, l := range links {
				if l.n.Load() != c.asks {
					t.Fatalf("%s: the device in poll mode asked its link to leave the network poller %d times, want %d", l.Info().Name, l.n.Load(), c.asks)
				}
			}
			testharness.CheckRC(t, a, b)
			report(t, a, b)
		})
	}
	// A device on two addresses, a udp link each joined by nic.Multi (as
	// libgoroce.so binds every GID): the Multi's poll polls them.
	t.Run("udp-multi", func(t *testing.T) {
		link := func(addrs ...string) nic.Link {
			var ls []nic.Link
			for _, a := range addrs {
				l, err := udp.Open(udp.Config{Addr: netip.MustParseAddr(a)})
				if err != nil {
					t.Fatal(err)
				}
				ls = append(ls, l)
			}
			m, err := nic.NewMulti(ls...)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		a, b := pair(t, link("127.0.24.1", "127.0.24.3"), link("127.0.24.2", "127.0.24.4"), "127.0.24.1", "127.0.24.2")
		testharness.CheckRC(t, a, b)
		report(t, a, b)
	})
	// Across a veth pair over AF_XDP (a poll reads the rx ring, no system
	// call) and over AF_PACKET (a recvmmsg a poll).
	for _, k := range []testharness.Kind{testharness.AFXDPGeneric, testharness.AFPacket} {
		t.Run(k.String(), func(t *testing.T) {
			n := testharness.NewNet(t, testharness.Config{MTU: testharness.VethMTU(transport.MTU1024)})
			a, b := testharness.Pair(t, n, k, testharness.IPv4, o)
			progressLoop(t, a.Dev)
			progressLoop(t, b.Dev)
			testharness.CheckRC(t, a, b)
			report(t, a, b)
		})
	}
}

// TestPollModeAckWithoutPoller checks that a poller leaves its burst
// open, and that the burst ends all the same when the application stops
// polling: the responder polls until its receive completes, and then
// never again. Its ACK waits (no poll, no post, and the device's clock,
// which the test moves, has not moved), and leaves when the clock passes
// the 200 µs the device gives the application; the requester's SEND then
// completes. The clock moves no further, so no timer resends the SEND.
func TestPollModeAckWithoutPoller(t *testing.T) {
	clock := manualclock.New()
	a, b, bl := sendPolled(t, clock, false, false)
	// b polls no more.
	if n, s := b.Dev.Counters().SentACKs.Load(), bl.sent(); n != 0 || len(s) != 0 {
		t.Fatalf("with the burst open and the clock still, the responder sent %d ACKs (sends %v)", n, s)
	}
	clock.Advance(200 * time.Microsecond)
	if wc := spinPoll(t, a.SCQ); wc.Status != transport.Success || wc.WRID != 2 {
		t.Fatalf("send: %+v", wc)
	}
	if n := a.Dev.Counters().RetransmittedPkts.Load(); n != 0 {
		t.Fatalf("%d packets sent again", n)
	}
	if n, s := b.Dev.Counters().SentACKs.Load(), bl.sent(); n != 1 || !slices.Equal(s, []int{1}) {
		t.Fatalf("the responder sent %d ACKs in sends of %v frames, want 1 in one", n, s)
	}
}

// TestPollModeLateSetOnce: the timer that ends bursts no poll ends is set
// when a poll leaves one open while it is idle, not at each such poll
// (setting it reads the clock); a burst left while it is set is judged
// when it fires and given pollActive more. The responder's first burst
// sets the timer at 0 and its next poll ends it; a second SEND's burst,
// left at 150 µs, is not ended at 200 µs, when the timer fires, but at
// 400, and not before.
func TestPollModeLateSetOnce(t *testing.T) {
	clock := manualclock.New()
	a, b, bl := sendPolled(t, clock, false, false)
	var wc [1]transport.WC
	if n, err := b.RCQ.Poll(wc[:]); n != 0 || err != nil { // ends the first burst
		t.Fatalf("b's empty poll: %d, %v", n, err)
	}
	if n := b.Dev.Counters().SentACKs.Load(); n != 1 {
		t.Fatalf("after b's next poll, %d ACKs, want 1", n)
	}
	if wc := spinPoll(t, a.SCQ); wc.Status != transport.Success || wc.WRID != 2 {
		t.Fatalf("first send: %+v", wc)
	}
	clock.Advance(150 * time.Microsecond)
	if err := b.QP.PostRecv(&transport.RecvWR{WRID: 3, SGL: []transport.SGE{b.MR.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.QP.PostSend(&transport.SendWR{WRID: 4, Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{a.MR.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if wc := spinPoll(t, b.RCQ); wc.Status != transport.Success || wc.WRID != 3 {
		t.Fatalf("second receive: %+v", wc)
	}
	bl.sent()
	for _, step := range []struct {
		by   time.Duration
		acks uint64
	}{{50 * time.Microsecond, 1}, {199 * time.Microsecond, 1}, {time.Microsecond, 2}} {
		clock.Advance(step.by)
		if n := b.Dev.Counters().SentACKs.Load(); n != step.acks {
			t.Fatalf("%v later: %d ACKs, want %d (sends %v)", step.by, n, step.acks, bl.sent())
		}
	}
	if s := bl.sent(); !slices.Equal(s, []int{1}) {
		t.Fatalf("the late ACK went in sends of %v frames, want one of one", s)
	}
	if wc := spinPoll(t, a.SCQ); wc.Status != transport.Success || wc.WRID != 4 {
		t.Fatalf("second send: %+v", wc)
	}
}

// TestPollModeAckRidesWithReply checks the point of leaving the burst
// open: the application posts its reply before the next poll, and the
// ACK still queued leaves with it, in one Send of the link (one sendmmsg
// on the udp link), as the reply's only companion; and the next poll of
// an empty queue ends a burst left open. The clock never moves.
func TestPollModeAckRidesWithReply(t *testing.T) {
	a, b, bl := sendPolled(t, manualclock.New(), true, false)
	if err := b.QP.PostSend(&transport.SendWR{WRID: 3, Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{b.MR.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if s := bl.sent(); !slices.Equal(s, []int{2}) {
		t.Fatalf("the responder's sends carried %v frames, want the ACK and the reply in one", s)
	}
	if n := b.Dev.Counters().SentACKs.Load(); n != 1 {
		t.Fatalf("the responder sent %d ACKs, want 1", n)
	}
	for _, c := range []struct {
		cq   *transport.CQ
		wrID uint64
	}{{a.SCQ, 2}, {a.RCQ, 1}} {
		if wc := spinPoll(t, c.cq); wc.Status != transport.Success || wc.WRID != c.wrID {
			t.Fatalf("completion %d: %+v", c.wrID, wc)
		}
	}
	// a's poll that received the reply left its ACK open too; a's next
	// poll, of an empty queue, ends it, and b's SEND completes.
	var wc [1]transport.WC
	if n, err := a.RCQ.Poll(wc[:]); n != 0 || err != nil {
		t.Fatalf("a's empty poll: %d, %v", n, err)
	}
	if wc := spinPoll(t, b.SCQ); wc.Status != transport.Success || wc.WRID != 3 {
		t.Fatalf("reply's completion: %+v", wc)
	}
}

// TestPollModeAckAtOnceOverDirectSend: over a link whose sends are
// function calls (nic.Info.DirectSend, the in-memory link's) a poll ends
// its burst before it returns. The responder's ACK has left, alone, by
// the time its receive completes, before the application replies or
// polls again; the clock never moves.
func TestPollModeAckAtOnceOverDirectSend(t *testing.T) {
	a, b, bl := sendPolled(t, manualclock.New(), false, true)
	if n, s := b.Dev.Counters().SentACKs.Load(), bl.sent(); n != 1 || !slices.Equal(s, []int{1}) {
		t.Fatalf("after the poll that received the SEND the responder had sent %d ACKs (sends %v), want 1 in one", n, s)
	}
	if wc := spinPoll(t, a.SCQ); wc.Status != transport.Success || wc.WRID != 2 {
		t.Fatalf("send: %+v", wc)
	}
}

// TestPollModeReceiverTakesOver: once the application stops polling, the
// receive goroutine, which stands aside while polls come, handles what
// arrives: a device whose only poll found nothing still receives the
// SENDs its application waits for without polling (CQ.Wait), over the
// in-memory link and over the udp link with two receive queues, on QPs
// of each queue. No poller handles any of them.
func TestPollModeReceiverTakesOver(t *testing.T) {
	o := testharness.Options{PollProgress: true}
	for _, link := range []string{"mem", "udp"} {
		t.Run(link, func(t *testing.T) {
			var a, b *testharness.Peer
			if link == "mem" {
				a, b, _ = testharness.MemPair(t, o)
			} else {
				open := func(addr string) *testharness.Peer {
					l, err := udp.Open(udp.Config{Addr: netip.MustParseAddr(addr), RxQueues: 2})
					if err != nil {
						t.Fatal(err)
					}
					return testharness.NewPeer(t, l, netip.MustParseAddr(addr), o)
				}
				a, b = open("127.0.22.1"), open("127.0.22.2")
				testharness.Connect(t, a, b)
			}
			pairs := [][2]*testharness.Peer{{a, b}}
			if link == "udp" { // a second pair, on b's other queue
				x, y := a.NewQP(t), b.NewQP(t)
				for nic.QueueOf(y.QP.QPN(), 2) == nic.QueueOf(b.QP.QPN(), 2) {
					x, y = a.NewQP(t), b.NewQP(t)
				}
				testharness.Connect(t, x, y)
				pairs = append(pairs, [2]*testharness.Peer{x, y})
			}
			var wc [1]transport.WC
			if n, err := b.RCQ.Poll(wc[:]); n != 0 || err != nil {
				t.Fatalf("b's first poll: %d, %v", n, err)
			}
			// Three messages one after the other on each pair: after
			// each, the receive goroutine looks whether pollers are
			// active, and must find them gone.
			for i, p := range pairs {
				s, r := p[0], p[1]
				for k := range uint64(3) {
					if err := r.QP.PostRecv(&transport.RecvWR{WRID: k, SGL: []transport.SGE{r.MR.SGE(0, 64)}}); err != nil {
						t.Fatal(err)
					}
					if err := s.QP.PostSend(&transport.SendWR{WRID: k, Opcode: transport.WRSend, SGL: []transport.SGE{s.MR.SGE(0, 64)}}); err != nil {
						t.Fatal(err)
					}
					if err := r.RCQ.Wait(t.Context()); err != nil {
						t.Fatal(err)
					}
					n, err := r.RCQ.Poll(wc[:])
					if n != 1 || err != nil || wc[0].Status != transport.Success || wc[0].WRID != k {
						t.Fatalf("pair %d, message %d: the receive: %d, %v, %+v", i, k, n, err, wc[0])
					}
				}
			}
			if n := b.Dev.Counters().PolledPkts.Load(); n != 0 {
				t.Fatalf("pollers handled %d of b's packets, want none", n)
			}
		})
	}
}

// TestPollModeArmedTakesOver: a program that polled and then arms its CQ
// to sleep on the event gets the event from the receive goroutine at
// once, not after the goroutine has stood aside for the last polls: here
// it would stand aside for an hour (SetPollActive). The armed queue's own
// polls drive nothing (no packet is polled).
func TestPollModeArmedTakesOver(t *testing.T) {
	transport.SetPollActive(t, time.Hour)
	a, b, _ := testharness.MemPair(t, testharness.Options{PollProgress: true})
	var wc [1]transport.WC
	for range 3 { // the receive goroutine sees these polls and stands aside
		if n, err := b.RCQ.Poll(wc[:]); n != 0 || err != nil {
			t.Fatalf("b's poll: %d, %v", n, err)
		}
	}
	testharness.Must(t, b.QP.PostRecv(&transport.RecvWR{WRID: 7, SGL: []transport.SGE{b.MR.SGE(0, 64)}}))
	b.RCQ.ReqNotify(false)
	if n, _ := b.RCQ.Poll(wc[:]); n != 0 { // armed: drives nothing
		t.Fatal("a completion before the SEND")
	}
	testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: 1, Opcode: transport.WRSend, SGL: []transport.SGE{a.MR.SGE(0, 64)}}))
	select {
	case <-b.RCQ.Events():
	case <-time.After(timeoutShort):
		t.Fatalf("no event %v after the SEND: the receive goroutine still stands aside", timeoutShort)
	}
	if n, err := b.RCQ.Poll(wc[:]); n != 1 || err != nil || wc[0].WRID != 7 || wc[0].Status != transport.Success {
		t.Fatalf("the receive: %d, %v, %+v", n, err, wc[0])
	}
	if n := b.Dev.Counters().PolledPkts.Load(); n != 0 {
		t.Fatalf("pollers handled %d of b's packets, want none: the armed queue's polls drive nothing", n)
	}
}

// sendPolled connects two devices in poll mode over pollOnly links on
// clock, posts a receive on b (and on a, with replies), and sends one
// SEND from a, which b's poll receives (b's link's sends forgotten
// before): the start of the open burst tests.
func sendPolled(t *testing.T, clock *manualclock.Clock, replies, direct bool) (a, b *testharness.Peer, bl *pollOnly) {
	t.Helper()
	wrap := func(l *mem.Link) nic.Link {
		p := newPollOnly(l).(*pollOnly)
		p.direct = direct
		bl = p // the second link made is b's
		return p
	}
	a, b, _ = testharness.MemPair(t, testharness.Options{PollProgress: true, Wrap: wrap, Clock: clock})
	recv := []*testharness.Peer{b}
	if replies {
		recv = append(recv, a)
	}
	for _, p := range recv {
		if err := p.QP.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{p.MR.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	bl.sent()
	if err := a.QP.PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{a.MR.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if wc := spinPoll(t, b.RCQ); wc.Status != transport.Success || wc.WRID != 1 {
		t.Fatalf("receive: %+v", wc)
	}
	return a, b, bl
}

// spinPoll polls c until it returns a completion: in poll mode the polls
// receive and handle what arrives.
func spinPoll(t *testing.T, c *transport.CQ) transport.WC {
	t.Helper()
	var wc [1]transport.WC
	for {
		n, err := c.Poll(wc[:])
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return wc[0]
		}
	}
}

// TestPollModeClose closes a device in poll mode while a goroutine polls
// it and traffic flows: the poll ends with the device's closed error, and
// nothing races (under -race) or panics.
func TestPollModeClose(t *testing.T) {
	a, b, _ := testharness.MemPair(t, testharness.Options{PollProgress: true})
	polled := make(chan error, 1)
	go func() {
		var wc [4]transport.WC
		for {
			if _, err := a.SCQ.Poll(wc[:]); err != nil {
				polled <- err
				return
			}
		}
	}()
	for i := range 64 {
		if err := a.QP.PostSend(&transport.SendWR{WRID: uint64(i), Opcode: transport.WRRDMAWrite, SGL: []transport.SGE{a.MR.SGE(0, 4096)},
			RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey(), Flags: transport.Signaled}); err != nil {
			t.Fatal(err)
		}
	}
	b.Dev.Close()
	a.Dev.Close()
	if err := <-polled; !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("poll after Close: %v", err)
	}
}

// leaveCounter is a udp link that counts the device's requests to leave
// the network poller (nic.NetpollLeaver).
type leaveCounter struct {
	*udp.Link
	n atomic.Int32
}

func (l *leaveCounter) LeaveNetpoll() error {
	l.n.Add(1)
	return l.Link.LeaveNetpoll()
}

// queueLog is an in-memory link that counts the polls of each receive
// queue.
type queueLog struct {
	*mem.Link
	polls [2]atomic.Int64
}

func (l *queueLog) PollQueue(i int, frames []nic.Frame) int {
	l.polls[i].Add(1)
	return l.Link.PollQueue(i, frames)
}

// take returns the polls of each queue since the last take.
func (l *queueLog) take() [2]int64 {
	return [2]int64{l.polls[0].Swap(0), l.polls[1].Swap(0)}
}

// TestPollHomeQueues: in poll mode an empty poll of a CQ receives on the
// queues its QPs' packets arrive on and no other, so two QPs on two
// queues polled by two threads never take each other's packets, and a
// queue nobody polls stays with its receive goroutine, even while another
// queue's CQ is polled without pause. A CQ with no QP yet polls every
// queue.
func TestPollHomeQueues(t *testing.T) {
	var logs []*queueLog
	o := testharness.Options{PollProgress: true, RxQueues: 2, Wrap: func(l *mem.Link) nic.Link {
		q := &queueLog{Link: l}
		logs = append(logs, q)
		return q
	}}
	a, b, _ := testharness.MemPair(t, o)
	blog := logs[1]
	// A second pair, on b's other queue.
	a2, b2 := a.NewQP(t), b.NewQP(t)
	for nic.QueueOf(b2.QP.QPN(), 2) == nic.QueueOf(b.QP.QPN(), 2) {
		a2, b2 = a.NewQP(t), b.NewQP(t)
	}
	testharness.ConnectQP(t, a2, b2, o, 0, 0)
	testharness.ConnectQP(t, b2, a2, o, 0, 0)
	k := nic.QueueOf(b.QP.QPN(), 2)
	for _, c := range []struct {
		name string
		cq   *transport.CQ
		want uint64
	}{{"b's send CQ", b.SCQ, 1 << k}, {"b's receive CQ", b.RCQ, 1 << k}, {"b2's receive CQ", b2.RCQ, 1 << (1 - k)}} {
		if got := transport.CQQueues(c.cq); got != c.want {
			t.Errorf("%s: queues %b, want %b", c.name, got, c.want)
		}
	}

	var wc [1]transport.WC
	blog.take()
	if n, err := b.RCQ.Poll(wc[:]); n != 0 || err != nil {
		t.Fatalf("b's poll: %d, %v", n, err)
	}
	if got := blog.take(); got[k] != 1 || got[1-k] != 0 {
		t.Fatalf("a poll of b's CQ polled the queues %v times, want once queue %d only", got, k)
	}
	if n, err := b.Dev.CreateCQ(1).Poll(wc[:]); n != 0 || err != nil {
		t.Fatalf("a new CQ's poll: %d, %v", n, err)
	}
	if got := blog.take(); got != [2]int64{1, 1} {
		t.Fatalf("a poll of a CQ with no QP polled the queues %v times, want each once", got)
	}

	// b's CQ polled without pause while a2 sends to b2: the SEND is the
	// receive goroutine's of b2's queue, which no poll stands aside.
	stop, done, first := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		var wc [1]transport.WC
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			b.RCQ.Poll(wc[:])
			if i == 0 {
				close(first)
			}
		}
	}()
	<-first
	if err := b2.QP.PostRecv(&transport.RecvWR{WRID: 7, SGL: []transport.SGE{b2.MR.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := a2.QP.PostSend(&transport.SendWR{WRID: 8, Opcode: transport.WRSend, SGL: []transport.SGE{a2.MR.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	err := b2.RCQ.Wait(t.Context())
	close(stop)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if n, err := b2.RCQ.Poll(wc[:]); n != 1 || err != nil || wc[0].WRID != 7 || wc[0].Status != transport.Success {
		t.Fatalf("b2's receive: %d, %v, %+v", n, err, wc[0])
	}
	if n := b.Dev.Counters().PolledPkts.Load(); n != 0 {
		t.Fatalf("b's pollers handled %d packets, want none: the SEND came on a queue they do not serve", n)
	}
}

// TestPollModeDestroyAnswers: a SEND that arrived while nobody polled is
// received and acknowledged when its QP is destroyed, as an HCA would
// have on arrival; the program stopped polling to destroy its QPs, and
// the receive goroutine (here: never given a frame) stands aside for a
// while after the last poll. Unanswered, the request would be sent again
// to a QP that is gone (rxe, with retry count 7, for ever).
func TestPollModeDestroyAnswers(t *testing.T) {
	clock := manualclock.New() // no timer fires: no retransmission, no late burst end
	a, b, _ := testharness.MemPair(t, testharness.Options{PollProgress: true, Wrap: newPollOnly, Clock: clock})
	if err := b.QP.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{b.MR.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.QP.PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{a.MR.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if n := b.Dev.Counters().RcvdPkts.Load(); n != 0 {
		t.Fatalf("b received %d packets before any poll or destroy", n)
	}
	if err := b.Dev.DestroyQP(b.QP); err != nil {
		t.Fatal(err)
	}
	c := b.Dev.Counters()
	if r, acks := c.RcvdPkts.Load(), c.SentACKs.Load(); r != 1 || acks != 1 {
		t.Fatalf("destroy left the SEND that had arrived unanswered: %d packets received, %d ACKs sent; want 1 and 1", r, acks)
	}
	var wc [1]transport.WC
	if n, err := b.RCQ.Poll(wc[:]); n != 1 || err != nil || wc[0].WRID != 1 || wc[0].Status != transport.Success {
		t.Fatalf("b's receive: %d, %v, %+v", n, err, wc[0])
	}
	if wc := spinPoll(t, a.SCQ); wc.Status != transport.Success || wc.WRID != 2 {
		t.Fatalf("a's send: %+v", wc)
	}
}
