package transport_test

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/manualclock"
	"github.com/goroce/goroce/internal/rawpeer"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/transport"
)

// The QP's own test harness: one QP with no device around it. What the
// QP sends is captured as it leaves; what it receives is built here and
// handed to its receive path the way the device hands it a burst of one
// packet; its timers run on a fake clock that moves only when a test
// says; and work it defers (Schedule) runs when the test calls run. So a
// test plays the peer packet by packet and sees every reaction, with no
// goroutine, socket or real time between the two.

type qpEnv = transport.QPEnv

var (
	newKeys  = transport.NewKeys
	newCQ    = transport.NewCQ
	newQP    = transport.NewQP
	runQP    = transport.RunQP
	receive  = transport.ReceiveQP
	endBurst = transport.EndBurstQP
)

var (
	localAddr = netip.MustParseAddr("10.7.0.1")
	peerAddr  = netip.MustParseAddr("10.7.0.2")
)

const (
	localQPN = 0x11
	peerQPN  = 0x42
)

// capLink is the harness's link: it keeps a copy of every datagram sent,
// and how many each call to Send handed it.
type capLink struct {
	mu     sync.Mutex
	sent   [][]byte
	calls  []int
	closed chan struct{}
	gate   func() // if set before the QP's first send, Send calls it first
}

func (l *capLink) Send(frames []nic.Frame) (int, error) {
	if l.gate != nil {
		l.gate()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, len(frames))
	for _, f := range frames {
		l.sent = append(l.sent, append([]byte(nil), f.Datagram()...))
	}
	return len(frames), nil
}

func (l *capLink) Recv([]nic.Frame) (int, error) {
	<-l.closed
	return 0, nic.ErrClosed
}

func (l *capLink) Info() nic.Info {
	return nic.Info{Name: "qp harness", MTU: 4500, Addrs: []netip.Addr{localAddr}}
}
func (l *capLink) SrcPort(uint32) uint16 { return 0xc000 }
func (l *capLink) Stats() nic.Stats      { return nic.Stats{} }
func (l *capLink) Close() error          { close(l.closed); return nil }

// harness is one connected QP and what a test needs to play its peer.
type harness struct {
	t        *testing.T
	clock    *manualclock.Clock
	link     *capLink
	ctr      *transport.Counters
	q        *transport.QP
	scq, rcq *transport.CQ
	buf      []byte
	mr       *transport.MR

	mu        sync.Mutex
	scheduled bool
	died      []error // what the QP's environment was told of its death (Died)
}

type harnessOpts struct {
	typ                 transport.QPType
	timeout, retry, rnr uint8 // RTS attributes; 0: 14, 7, 7
	minRNR              uint8 // RTR's min RNR timer code; 0 means 12
	sendPSN, recvPSN    uint32
	sqDepth             uint32 // max_send_wr; 0 means 16
}

func newHarness(t *testing.T, o harnessOpts) *harness {
	t.Helper()
	if o.typ == 0 {
		o.typ = transport.RC
	}
	if o.sqDepth == 0 {
		o.sqDepth = 16
	}
	for _, d := range []struct {
		p *uint8
		v uint8
	}{{&o.timeout, 14}, {&o.retry, 7}, {&o.rnr, 7}, {&o.minRNR, 12}} {
		if *d.p == 0 {
			*d.p = d.v
		}
	}
	h := &harness{t: t, clock: manualclock.New(), link: &capLink{closed: make(chan struct{})}, ctr: new(transport.Counters)}
	env := &qpEnv{
		Link: h.link, Counters: h.ctr,
		GID: func(i uint8) (bth.GID, bool) {
			if i == 0 {
				return bth.GIDFromAddr(localAddr), true
			}
			return bth.GID{}, false
		},
		// Called with the QP's lock held: the work runs when the test
		// calls run, as the device's worker would run it later.
		Schedule: func(*transport.QP) { h.mu.Lock(); h.scheduled = true; h.mu.Unlock() },
		Died:     func(_ *transport.QP, why error) { h.mu.Lock(); h.died = append(h.died, why); h.mu.Unlock() },
		Atomic:   &sync.Mutex{}, MaxMTU: transport.MTU4096, Clock: h.clock,
	}
	allocPD, _, closeKeys := newKeys()
	t.Cleanup(closeKeys)
	pd := allocPD()
	h.scq, h.rcq = newCQ(64, nil), newCQ(64, nil)
	h.buf = make([]byte, 64<<10)
	var err error
	if h.mr, err = pd.Register(h.buf, transport.LocalWrite|transport.RemoteWrite|transport.RemoteRead); err != nil {
		t.Fatal(err)
	}
	if h.q, err = newQP(env, pd, localQPN, transport.QPInitAttr{Type: o.typ, SendCQ: h.scq, RecvCQ: h.rcq,
		Cap: transport.QPCap{MaxSendWR: o.sqDepth, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	init := transport.QPAttr{State: transport.Init, PortNum: 1, AccessFlags: transport.RemoteWrite | transport.RemoteRead}
	rtr := transport.QPAttr{State: transport.RTR, PathMTU: transport.MTU1024, DestQPN: peerQPN, RQPSN: o.recvPSN,
		MaxDestRdAtomic: 4, MinRNRTimer: o.minRNR, AH: transport.AHAttr{DGID: bth.GIDFromAddr(peerAddr), PortNum: 1}}
	rts := transport.QPAttr{State: transport.RTS, SQPSN: o.sendPSN, Timeout: o.timeout, RetryCnt: o.retry, RNRRetry: o.rnr, MaxRdAtomic: 4}
	rtrMask := transport.AttrState | transport.AttrAV | transport.AttrPathMTU | transport.AttrDestQPN | transport.AttrRQPSN
	rtsMask := transport.AttrState | transport.AttrSQPSN
	if o.typ == transport.RC {
		rtrMask |= transport.AttrMaxDestRdAtomic | transport.AttrMinRNRTimer
		rtsMask |= transport.AttrTimeout | transport.AttrRetryCnt | transport.AttrRNRRetry | transport.AttrMaxQPRdAtomic
	}
	for _, s := range []struct {
		a *transport.QPAttr
		m transport.QPAttrMask
	}{
		{&init, transport.AttrState | transport.AttrPKeyIndex | transport.AttrPort | transport.AttrAccessFlags},
		{&rtr, rtrMask},
		{&rts, rtsMask},
	} {
		if err := h.q.Modify(s.a, s.m); err != nil {
			t.Fatalf("to %v: %v", s.a.State, err)
		}
	}
	return h
}

// deliver hands the QP one packet from its peer, op with psn and payload
// (each hdr fills an extended header), as a burst of one.
func (h *harness) deliver(op bth.OpCode, psn uint32, payload []byte, hs ...func(p []byte, info *bth.Info)) {
	h.t.Helper()
	f, p := h.packet(op, psn, payload, hs...)
	if receive(h.q, p, f) {
		endBurst(h.q)
	}
}

// packet builds a packet from the peer as deliver does, for a test that
// hands it over itself (a burst left open).
func (h *harness) packet(op bth.OpCode, psn uint32, payload []byte, hs ...func(p []byte, info *bth.Info)) (bth.Frame, bth.Packet) {
	h.t.Helper()
	// The scripted raw peer's builder; no link: the packet goes straight
	// to the QP's receive path.
	peer := rawpeer.Peer{Src: peerAddr, Dst: localAddr, SrcPort: 0xc123}
	b := peer.Build(rawpeer.Packet{Op: op, DestQP: h.q.QPN(), PSN: psn, AckReq: true, Payload: payload, Headers: hs})
	f, err := bth.DecodeIP(b[nic.Headroom:])
	if err != nil {
		h.t.Fatal(err)
	}
	p, err := bth.Parse(f.RoCE())
	if err != nil {
		h.t.Fatal(err)
	}
	return f, p
}

// sent returns the packets the QP sent since the last call.
func (h *harness) sent() []bth.Packet {
	h.t.Helper()
	h.link.mu.Lock()
	dgs := h.link.sent
	h.link.sent = nil
	h.link.mu.Unlock()
	var ps []bth.Packet
	for _, dg := range dgs {
		f, err := bth.DecodeIP(dg)
		if err != nil || !f.VerifyICRC() {
			h.t.Fatalf("the QP sent a bad datagram (%v)", err)
		}
		p, err := bth.Parse(f.RoCE())
		if err != nil {
			h.t.Fatal(err)
		}
		if got := p.BTH().DestQP(); got != peerQPN {
			h.t.Fatalf("sent to QP %#x, not the peer's", got)
		}
		ps = append(ps, p)
	}
	return ps
}

// sendCalls returns how many frames each call to the link's Send carried
// since the last call.
func (h *harness) sendCalls() []int {
	h.link.mu.Lock()
	defer h.link.mu.Unlock()
	c := h.link.calls
	h.link.calls = nil
	return c
}

// run does the work the QP deferred, as the device's worker would.
func (h *harness) run() {
	h.mu.Lock()
	s := h.scheduled
	h.scheduled = false
	h.mu.Unlock()
	if s {
		runQP(h.q)
	}
}

// advance moves the fake clock on, firing the QP's timers, and runs the
// work they deferred.
func (h *harness) advance(d time.Duration) {
	h.clock.Advance(d)
	h.run()
}

// ack checks that ps is one acknowledgement of psn with syndrome s.
func (h *harness) ack(ps []bth.Packet, s bth.Syndrome, psn uint32) {
	h.t.Helper()
	// An ACK's credit field is the QP's to fill (goroce sends "invalid":
	// no end-to-end credits); the class, and a NAK's code, must match.
	same := func(got bth.Syndrome) bool {
		if s.IsACK() {
			return got.IsACK()
		}
		return got == s
	}
	if len(ps) != 1 || ps[0].OpCode() != bth.RCAcknowledge || !same(ps[0].AETH().Syndrome()) || uint32(ps[0].BTH().PSN()) != psn {
		h.t.Fatalf("sent %v; want one ACK %v for PSN %#x", describe(ps), s, psn)
	}
}

// describe gives the packets in the one packet format (roced decode's
// line).
func describe(ps []bth.Packet) []string {
	var d []string
	for _, p := range ps {
		d = append(d, p.Summary())
	}
	return d
}

// postRecv posts a receive of the first n bytes of the buffer.
func (h *harness) postRecv(n int) {
	h.t.Helper()
	if err := h.q.PostRecv(&transport.RecvWR{WRID: 7, SGL: []transport.SGE{h.mr.SGE(0, n)}}); err != nil {
		h.t.Fatal(err)
	}
}

// polls returns the completions waiting on c.
func polls(c *transport.CQ) []transport.WC {
	wc := make([]transport.WC, 16)
	n, _ := c.Poll(wc)
	return wc[:n]
}
