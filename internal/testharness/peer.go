package testharness

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

// Options describe a peer's device and queue pair. The zero values are
// defaults, which differ for in-memory peers (MemDefaults).
type Options struct {
	Type    transport.QPType // RC when zero
	MTU     transport.MTU    // path MTU; 0: the device's active MTU
	BufSize int              // registered memory; 0: 4 MiB
	SQDepth uint32           // 0: 256
	RQDepth uint32           // 0: 256
	CQDepth int              // 0: 1024
	// Timeout is the local ACK timeout exponent (0: 14, 67 ms, as
	// perftest's default); Retry and RNRRetry 0 mean 7.
	Timeout, Retry, RNRRetry uint8
	// NoRNRRetry makes RNRRetry really 0 (0 otherwise means the default).
	NoRNRRetry bool
	// MinRNR is the minimum RNR NAK timer the QPs ask for; 0 means 1
	// (0.01 ms) rather than the default 12: RNR tests wait for retries on
	// the real clock.
	MinRNR   uint8
	RdAtomic uint8            // max_rd_atomic both ways; 0: 16
	Window   int              // RC packets in flight; 0: the engine's default
	Inline   uint32           // the QP's max_inline_data
	Access   transport.Access // what the memory and the QPs allow; 0: Access
	// PSN is the first send PSN; 0 means 0xfffff0 so that every exchange
	// crosses the 24-bit wrap. In-memory peers take it as given, 0
	// included, and MemPair starts B at PSNB.
	PSN, PSNB uint32
	// Clock, if set, drives the device's timers (transport.Options.Clock).
	Clock clock.Clock
	// Trace, if set, makes the trace hook of the device at address who
	// (transport.Options.Trace).
	Trace func(who string) func(out bool, datagram []byte)
	// PollProgress puts the devices in poll mode
	// (transport.Options.PollProgress).
	PollProgress bool
	// LeaveNetpoll is transport.Options.LeaveNetpoll.
	LeaveNetpoll bool
	// Congestion is transport.Options.Congestion.
	Congestion transport.CongestionOptions

	// What only in-memory peers (NewMemPeer, MemPair) have.

	Seed      uint64        // MemPair's net's seed
	NoConnect bool          // MemPair leaves the QPs in RESET
	BusyPoll  time.Duration // how long the in-memory links busy-poll (mem.Options)
	RxQueues  int           // the in-memory links' receive queues (mem.Options); 0 is 1
	// Wrap, if set, puts a link between the device and its in-memory link.
	Wrap func(*mem.Link) nic.Link
}

// linkDefaults are the defaults of peers over real links; memDefaults
// those of in-memory peers, what the engine's tests (transport) have always
// run with: MTU 1024, 1 MiB of memory, queues of 128 and CQs of 512, the
// PSNs as given, and timeout 18.
var (
	linkDefaults = Options{BufSize: 4 << 20, SQDepth: 256, RQDepth: 256, CQDepth: 1024, Timeout: 14, PSN: 0xfffff0}
	memDefaults  = Options{MTU: transport.MTU1024, BufSize: 1 << 20, SQDepth: 128, RQDepth: 128, CQDepth: 512,
		// 1.07 s: the in-memory link loses nothing unless a test says so,
		// and at 16.8 ms a machine too busy to run a receive path for
		// eight timeouts in a row failed a lossless test with retry
		// exceeded. Tests that lose packets set their own.
		Timeout: 18}
)

func (o *Options) defaults() { o.fill(&linkDefaults) }

// MemDefaults fills in the defaults of in-memory peers (memDefaults).
func (o *Options) MemDefaults() { o.fill(&memDefaults) }

// fill sets the fields left zero to d's, and to what every peer shares.
func (o *Options) fill(d *Options) {
	def(&o.MTU, d.MTU)
	def(&o.BufSize, d.BufSize)
	def(&o.SQDepth, d.SQDepth)
	def(&o.RQDepth, d.RQDepth)
	def(&o.CQDepth, d.CQDepth)
	def(&o.Timeout, d.Timeout)
	def(&o.PSN, d.PSN)
	def(&o.Type, transport.RC)
	def(&o.Retry, 7)
	if !o.NoRNRRetry {
		def(&o.RNRRetry, 7)
	}
	def(&o.MinRNR, 1) // 10 µs
	def(&o.RdAtomic, 16)
	def(&o.Access, Access)
}

// def sets *v to d if it is zero.
func def[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// Access is what the peers' memory and QPs allow by default.
const Access = transport.LocalWrite | transport.RemoteWrite | transport.RemoteRead | transport.RemoteAtomic

// Peer is one end: a device over a link, and one queue pair with its
// completion queues and registered buffer.
type Peer struct {
	Dev      *transport.Device // the device, closed when the test ends
	Link     nic.Link          // the link the device owns
	Mem      *mem.Link         // in-memory peers: the link under Link
	Addr     netip.Addr        // the peer's address
	GIDIndex uint8             // the index of Addr's GID
	PD       *transport.PD     // the protection domain of everything below
	SCQ, RCQ *transport.CQ     // the send and receive completion queues
	QP       *transport.QP     // the queue pair
	Buf      []byte            // registered memory, Opt.Access
	MR       *transport.MR     // Buf's region
	// RO is what READs read: written once, when the peer is made, and
	// never again. A duplicate READ can be replayed after the requester
	// completed it (its late request reaches the responder after the
	// responses it asked for again, as a reordering path makes happen),
	// so no READ source may be rewritten while the QP lives: the replay
	// would read it as the test writes it.
	RO   []byte
	ROMR *transport.MR // RO's region, remote read only
	Opt  Options       // the options, defaults filled in
}

// NewPeer opens a device over link (which it then owns) and creates the
// queue pair; the device is closed when t ends.
func NewPeer(t testing.TB, link nic.Link, addr netip.Addr, o Options) *Peer {
	t.Helper()
	o.defaults()
	d, err := transport.Open(link, o.device(addr))
	if err != nil {
		link.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return newQP(t, d, link, addr, o, true)
}

// device returns the options of the device at addr.
func (o *Options) device(addr netip.Addr) transport.Options {
	opt := transport.Options{Window: o.Window, Clock: o.Clock, PollProgress: o.PollProgress, LeaveNetpoll: o.LeaveNetpoll,
		Congestion: o.Congestion}
	if o.Trace != nil {
		opt.Trace = o.Trace(addr.String())
	}
	return opt
}

// NewQP makes another peer on p's device: its own PD, CQs, registered
// buffers and queue pair, with p's options.
func (p *Peer) NewQP(t testing.TB) *Peer {
	t.Helper()
	q := newQP(t, p.Dev, p.Link, p.Addr, p.Opt, p.RO != nil)
	q.Mem = p.Mem
	return q
}

// newQP makes the verbs objects of a peer on device d, with RO if ro.
func newQP(t testing.TB, d *transport.Device, link nic.Link, addr netip.Addr, o Options, ro bool) *Peer {
	t.Helper()
	var err error
	p := &Peer{Dev: d, Link: link, Addr: addr.WithZone(""), Opt: o}
	var ok bool
	if p.GIDIndex, ok = d.GIDIndex(p.Addr); !ok {
		t.Fatalf("%v is not in %s's GID table %v", addr, link.Info().Name, d.GIDs())
	}
	p.PD = d.AllocPD()
	p.SCQ, p.RCQ = d.CreateCQ(o.CQDepth), d.CreateCQ(o.CQDepth)
	p.Buf = make([]byte, o.BufSize)
	if p.MR, err = p.PD.Register(p.Buf, o.Access); err != nil {
		t.Fatal(err)
	}
	if ro {
		p.RO = make([]byte, o.BufSize/2)
		Fill(p.RO, 0x5eed)
		if p.ROMR, err = p.PD.Register(p.RO, transport.RemoteRead); err != nil {
			t.Fatal(err)
		}
	}
	p.QP, err = d.CreateQP(p.PD, transport.QPInitAttr{Type: o.Type, SendCQ: p.SCQ, RecvCQ: p.RCQ,
		Cap: transport.QPCap{MaxSendWR: o.SQDepth, MaxRecvWR: o.RQDepth, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: o.Inline}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// GID returns the peer's GID.
func (p *Peer) GID() bth.GID {
	g, _ := p.Dev.GID(p.GIDIndex)
	return g
}

// PathMTU is the MTU the peers connect with.
func (p *Peer) PathMTU() transport.MTU {
	if p.Opt.MTU != 0 {
		return p.Opt.MTU
	}
	return p.Dev.ActiveMTU()
}

// Connect moves both QPs to RTS towards each other, as rc_pingpong's
// pp_connect_ctx does after the out-of-band exchange; UD QPs get Q_Key
// 0x11111111 and talk through address handles (AH).
func Connect(t testing.TB, a, b *Peer) {
	t.Helper()
	connect(t, a, b)
	connect(t, b, a)
}

func connect(t testing.TB, p, peer *Peer) {
	t.Helper()
	o := p.Opt
	err := p.Dev.Connect(p.QP, p.Endpoint(), peer.Endpoint(), transport.ConnectOptions{
		Access: o.Access, QKey: QKey, Timeout: o.Timeout, RetryCnt: o.Retry, RNRRetry: o.RNRRetry,
		MinRNRTimer: o.MinRNR, MaxRdAtomic: o.RdAtomic, MaxDestRdAtomic: o.RdAtomic})
	if err != nil {
		t.Fatal(err)
	}
}

// Endpoint is what p would send its peer: its QP, first PSN, the GID of
// its address and its path MTU.
func (p *Peer) Endpoint() transport.Endpoint {
	return transport.Endpoint{QPN: p.QP.QPN(), PSN: p.Opt.PSN, GID: p.GID(), MTU: p.PathMTU()}
}

// QKey is the UD Q_Key, what ibv_ud_pingpong uses.
const QKey = transport.DefaultQKey

// AH creates an address handle from p to peer (UD).
func (p *Peer) AH(t testing.TB, peer *Peer) *transport.AH {
	t.Helper()
	av, err := p.Dev.AHAttr(p.Endpoint(), peer.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	av.HopLimit, av.TrafficClass = 64, 0x28
	ah, err := p.Dev.CreateAH(p.PD, av)
	if err != nil {
		t.Fatal(err)
	}
	return ah
}

// Pair opens links of kind k on both ends of n, peers over them talking
// family f, and connects them.
func Pair(t testing.TB, n *Net, k Kind, f Family, o Options) (a, b *Peer) {
	t.Helper()
	return PairOf(t, n, k, k, f, o)
}

// PairOf is Pair with a link of kind ka on A and kb on B.
func PairOf(t testing.TB, n *Net, ka, kb Kind, f Family, o Options) (a, b *Peer) {
	t.Helper()
	var ps [2]*Peer
	for i, e := range []*netns.End{n.A, n.B} {
		k := ka
		if i == 1 {
			k = kb
		}
		l, err := OpenLink(k, e, f.Addr(e))
		if err != nil {
			t.Fatal(err)
		}
		ps[i] = NewPeer(t, l, f.Addr(e), o)
	}
	Connect(t, ps[0], ps[1])
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range ps {
				t.Logf("%s (%v): %v", p.Link.Info().Name, p.QP, p.Dev.Counters().List())
				t.Logf("%s link: %+v", p.Link.Info().Name, p.Link.Stats())
			}
			if n.Fwd != nil {
				ab, ba := n.Fwd.Stats()
				t.Logf("forwarder A->B %+v", ab)
				t.Logf("forwarder B->A %+v", ba)
			}
		}
	})
	return ps[0], ps[1]
}

// Wait returns the next completion of c, failing t after d.
func Wait(t testing.TB, c *transport.CQ, d time.Duration) transport.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wc [1]transport.WC
	if n, err := c.PollWait(ctx, wc[:]); err != nil || n != 1 {
		t.Fatalf("no completion within %v: %v", d, err)
	}
	return wc[0]
}

// Fill writes a pattern derived from seed: every message of a test has
// its own, so a byte in the wrong place shows.
func Fill(b []byte, seed uint32) {
	x := seed*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
}

// Settle makes the order between the test's accesses to the peers'
// memory and the devices' visible to the race detector. Across a real
// link that order is real (a packet the test's post caused, or whose
// completion it waited for, went through a kernel socket), but a socket
// is not a Go synchronization, so -race would report every check as a
// race with the receive loop. Each device touches registered memory only
// under its QP's lock; taking the locks after the test's own accesses
// (and after waiting for a completion, before reading) orders the two.
func Settle(ps ...*Peer) {
	for _, p := range ps {
		p.QP.State()
	}
}
