package cm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/transport"
)

// sendGSI sends a MAD from the device's QP1 (Device.SendMAD); a variable
// so that a test sees what the manager sends without a peer.
var sendGSI = (*transport.Device).SendMAD

// The values Linux's rdma_cm puts in a REQ (cma.c; the captured rping REQ
// in ../shared/rxe-peer/captures carries exactly these), which goroce
// sends too.
const (
	// cmResponseTimeout is CMA_CM_RESPONSE_TIMEOUT: 4.096 µs × 2^20, 4.3 s,
	// both the local and the remote CM response timeout of a REQ.
	cmResponseTimeout = 20
	// maxCMRetries is CMA_MAX_CM_RETRIES.
	maxCMRetries = 15
	// packetLifeTime is CMA_IBOE_PACKET_LIFETIME of kernel 6.1 (bookworm):
	// 18, 1.07 s; a REQ's primary path says local ACK timeout 19.
	packetLifeTime = 18
	// targetACKDelay is what a REP says (rxe's local CA ACK delay, 15).
	targetACKDelay = 15
	// hopLimit is the path's hop limit as rdma_cm sends it.
	hopLimit = 64
	// permissiveLID is the LID of both path ends on RoCE.
	permissiveLID = 0xffff
	// defaultRdAtomic is the responder resources and initiator depth of a
	// connection whose options name none.
	defaultRdAtomic = 16
	// defaultBacklog bounds a listener's connections not yet accepted.
	defaultBacklog = 16
	// mraServiceTimeout is the service timeout of the MRAs this manager
	// sends for a REQ its program has yet to answer: 24, 68.7 s, what
	// rdma_cm asks for its own (cma.c's CMA_CM_MRA_SETTING).
	mraServiceTimeout = 24
)

// mraDelay is how long a REQ waits for its program's answer before the
// manager sends an MRA for it. IBA 12.6.6 (and 12.9.7's REQ_RCVD
// state): a passive side that cannot send its REP within the Remote CM
// Response Timeout the REQ names sends an MRA within it instead, so that
// the active side neither sends its REQ again nor gives up. Three
// quarters of that time leaves a quarter of margin for the MRA to arrive
// (the active side waits the timeout plus twice the packet life time).
func mraDelay(remoteCMResponseTimeout uint8) time.Duration {
	return ibaTime(remoteCMResponseTimeout) / 4 * 3
}

// ibaTime converts the IBA's 5-bit time exponent to a duration:
// 4.096 µs × 2^t.
func ibaTime(t uint8) time.Duration { return time.Duration(4096) << (t & 31) * time.Nanosecond }

// Options configure a Manager.
type Options struct {
	// Clock drives the MAD retries and time wait (default clock.Real);
	// tests pass one they advance by hand.
	Clock clock.Clock
}

// Stats counts what a Manager received and sent.
type Stats struct {
	Received   uint64 // CM MADs handled
	Sent       uint64 // CM MADs sent, retries included
	Retries    uint64 // MADs sent again after their timeout
	Malformed  uint64 // MADs mad.ParseCM refused, or of a method other than Send
	Unhandled  uint64 // CM messages this manager does not serve (APR, ClassPortInfo), and LAPs answered "unsupported"
	Duplicates uint64 // duplicate or stale messages dropped (a REQ, REP, MRA, DREQ... seen already)
	Unknown    uint64 // messages for a communication ID the manager does not know
	Rejected   uint64 // REJs sent, and SIDR_REPs refusing a request
	Overflow   uint64 // MADs dropped because the manager's queue was full
}

type stats struct {
	received, sent, retries, malformed, unhandled, duplicates, unknown, rejected, overflow atomic.Uint64
}

// remoteID identifies a connection by its peer: the peer's communication
// ID and CA GUID, which is how a duplicate REQ is recognized (IBA 12.9.8.3).
type remoteID struct {
	comm uint32
	guid uint64
}

// inMAD is a MAD the receive path handed over.
type inMAD struct {
	src, dst netip.Addr
	b        []byte
}

// Manager is the connection manager of one device. Its methods are safe
// for concurrent use.
type Manager struct {
	dev    *transport.Device
	clock  clock.Clock
	guid   uint64
	hiTID  uint64
	detach func()
	ids    func() uint32 // draws communication IDs (rand.Uint32; a test's own)

	mu        sync.Mutex
	conns     map[uint32]*Conn   // by local communication ID
	remote    map[remoteID]*Conn // by the peer's communication ID and CA GUID
	listeners map[psPort]*Listener
	requests  map[remoteID]*ConnRequest // REQs a DeferAccept listener's program has yet to answer
	held      map[uint32]bool           // the local communication IDs of those requests
	// The UDP port space (sidr.go): listeners by port, the SIDR requests
	// taken (by sender and request ID), those sent (by request ID).
	udListeners map[psPort]*UDListener
	sidrIn      map[sidrKey]*SIDRRequest
	sidrOut     map[uint32]*sidrQuery
	closed      bool

	in   *madQueue
	done chan struct{}
	wg   sync.WaitGroup
	st   stats

	events     chan Event // closed by Close, under mu
	eventsLost atomic.Uint64
}

// ErrClosed is returned by the calls of a closed Manager or Listener.
var ErrClosed = errors.New("cm: closed")

// New starts the connection manager of dev: it takes over dev's QP1. One
// device has at most one Manager at a time.
func New(dev *transport.Device, o Options) (*Manager, error) {
	m := &Manager{
		dev: dev, clock: o.Clock, guid: nodeGUID(dev), hiTID: uint64(rand.Uint32()) << 32,
		conns: map[uint32]*Conn{}, remote: map[remoteID]*Conn{}, listeners: map[psPort]*Listener{},
		requests: map[remoteID]*ConnRequest{}, held: map[uint32]bool{},
		udListeners: map[psPort]*UDListener{}, sidrIn: map[sidrKey]*SIDRRequest{}, sidrOut: map[uint32]*sidrQuery{},
		in: newMADQueue(), done: make(chan struct{}), ids: rand.Uint32,
		events: make(chan Event, eventQueue),
	}
	if m.clock == nil {
		m.clock = clock.Real{}
	}
	if s := dev.Share(); s != nil {
		// On a shared port the server hands this process the MADs
		// naming its communication IDs: they carry its block.
		b := s.Block()
		m.ids = func() uint32 { return b<<20 | rand.Uint32()&0xfffff }
		if b == 0 {
			// The port's owner: the IDs below the members' (bit 31 clear),
			// which its steering program keeps for it.
			m.ids = func() uint32 { return rand.Uint32() &^ (1 << 31) }
		}
	}
	detach, err := dev.AttachGSI(m.receive)
	if err != nil {
		return nil, fmt.Errorf("cm: %w", err)
	}
	m.detach = detach
	m.wg.Add(1)
	go m.loop()
	return m, nil
}

// nodeGUID returns the CA GUID the manager's MADs carry: the EUI-64 of the
// device's link-local GID, as rxe's node GUID is, or else one made from
// its first GID.
func nodeGUID(dev *transport.Device) uint64 {
	if g, ok := dev.GID(0); ok && g.Addr().IsLinkLocalUnicast() {
		return binary.BigEndian.Uint64(g[8:])
	}
	h := fnv.New64a()
	for _, g := range dev.GIDs() {
		h.Write(g[:])
	}
	return h.Sum64()
}

// Stats returns the manager's counters.
func (m *Manager) Stats() Stats {
	s := &m.st
	return Stats{Received: s.received.Load(), Sent: s.sent.Load(), Retries: s.retries.Load(),
		Malformed: s.malformed.Load(), Unhandled: s.unhandled.Load(), Duplicates: s.duplicates.Load(),
		Unknown: s.unknown.Load(), Rejected: s.rejected.Load(), Overflow: s.overflow.Load()}
}

// Close stops the manager: it gives QP1 back, stops every timer and ends
// every connection and listener without a word to the peers (their own
// timeouts end their side). QPs stay their owners' to destroy.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.detach()
	close(m.done)
	for _, c := range m.conns {
		c.stopTimer()
		c.finish(ErrClosed)
	}
	for k, l := range m.listeners {
		l.shut() // the connections it held end with the others above
		m.shareUnlisten(k)
	}
	for k, l := range m.udListeners {
		close(l.closed)
		m.shareUnlisten(k)
	}
	for _, q := range m.sidrOut {
		m.endSIDR(q, ErrClosed)
	}
	close(m.events) // m.closed: nothing emits any more
	m.mu.Unlock()
	m.wg.Wait()
	return nil
}

// receive is QP1's handler, on the device's receive path: it copies the
// MAD (one allocation per MAD) and queues it for the manager's goroutine.
func (m *Manager) receive(src, dst netip.Addr, b []byte) {
	if !m.in.put(inMAD{src.Unmap(), dst.Unmap(), append([]byte(nil), b...)}) {
		m.st.overflow.Add(1)
	}
}

func (m *Manager) loop() {
	defer m.wg.Done()
	for {
		select {
		case <-m.done:
			return
		case <-m.in.ready:
			for _, x := range m.in.take() {
				m.handle(x.src, x.dst, x.b)
			}
		}
	}
}

// handle processes one MAD that arrived at QP1 from src to the local
// address dst. Whatever the bytes, it never panics: a MAD that is not a
// well-formed CM Send is counted and dropped.
func (m *Manager) handle(src, dst netip.Addr, b []byte) {
	defer m.st.received.Add(1)
	mm, err := mad.ParseCM(b)
	if err != nil || mm.Method() != mad.MethodSend {
		m.st.malformed.Add(1)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	p := peer{local: dst, remote: src}
	switch mm.AttrID() {
	case mad.AttrREQ:
		m.onREQ(p, mm)
	case mad.AttrMRA:
		m.onMRA(mm)
	case mad.AttrREJ:
		m.onREJ(mm)
	case mad.AttrREP:
		m.onREP(p, mm)
	case mad.AttrRTU:
		m.onRTU(mm)
	case mad.AttrDREQ:
		m.onDREQ(p, mm)
	case mad.AttrDREP:
		m.onDREP(mm)
	case mad.AttrSIDRREQ:
		m.onSIDRREQ(p, mm)
	case mad.AttrSIDRREP:
		m.onSIDRREP(mm)
	case mad.AttrLAP:
		m.onLAP(p, mm)
	default: // APR (goroce sends no LAP), ClassPortInfo: not served
		m.st.unhandled.Add(1)
	}
}

// psPort is a port of one rdma_cm port space: each space has ports of its
// own (cma.c keeps a port table per space), and a REQ or SIDR_REQ finds
// its listener by the space and port of its service ID.
type psPort struct {
	ps   mad.PortSpace
	port uint16
}

// rcSpace returns the port space of a Listen or Dial (0: TCP), or an
// error for one rdma_cm makes no RC connections in: an RC ID is of the
// TCP port space, or of the IB one (rdma_create_id's RDMA_PS_IB, which
// takes RC and UD; librdmacm makes UD IDs of the UDP and IPoIB spaces).
func rcSpace(ps mad.PortSpace) (mad.PortSpace, error) {
	switch ps {
	case 0:
		return mad.PortSpaceTCP, nil
	case mad.PortSpaceTCP, mad.PortSpaceIB:
		return ps, nil
	}
	return 0, fmt.Errorf("port space %#04x: RC connections are in the TCP (0x0106) or IB (0x013f) port space", uint16(ps))
}

// udSpace is rcSpace for UD services: the UDP, IPoIB or IB port space
// (0: UDP).
func udSpace(ps mad.PortSpace) (mad.PortSpace, error) {
	switch ps {
	case 0:
		return mad.PortSpaceUDP, nil
	case mad.PortSpaceUDP, mad.PortSpaceIPoIB, mad.PortSpaceIB:
		return ps, nil
	}
	return 0, fmt.Errorf("port space %#04x: UD services are in the UDP (0x0111), IPoIB (0x0002) or IB (0x013f) port space", uint16(ps))
}

// peer is the pair of addresses a MAD travels between.
type peer struct{ local, remote netip.Addr }

// send sends a CM MAD from QP1 at p.local to QP1 at p.remote.
func (m *Manager) send(p peer, msg mad.MAD) {
	// Counted before it leaves, so that whoever receives the MAD finds it
	// counted (the scripted tests read Sent once the MAD arrived).
	m.st.sent.Add(1)
	if err := sendGSI(m.dev, p.local, p.remote, msg); err != nil {
		m.st.sent.Add(^uint64(0)) // not sent after all
		return                    // lost like any MAD: the retry, or the peer's, recovers it
	}
}

// newMAD returns a CM MAD of attribute a with transaction ID tid.
func newMAD(a mad.AttrID, tid uint64) mad.MAD {
	msg := mad.NewCM(a)
	msg.SetTID(tid)
	return msg
}

// reject sends a REJ answering a message of kind what with transaction ID
// tid: localComm is this side's communication ID (0 when it made none),
// remoteComm the peer's.
func (m *Manager) reject(p peer, tid uint64, localComm, remoteComm uint32, what mad.MsgKind, why mad.RejReason) {
	msg := newMAD(mad.AttrREJ, tid)
	r := msg.REJ()
	r.SetLocalCommID(localComm)
	r.SetRemoteCommID(remoteComm)
	r.SetMessageRejected(what)
	r.SetReason(why)
	m.st.rejected.Add(1)
	m.send(p, msg)
}

// newCommID returns an unused, non-zero local communication ID. Called
// with m.mu held.
func (m *Manager) newCommID() uint32 {
	for {
		id := m.ids()
		if _, used := m.conns[id]; id != 0 && !used && !m.held[id] {
			return id
		}
	}
}

// shareListen asks the server of a shared port (transport.Sharer) for the
// requests to a service this manager listens on. Called with m.mu held.
func (m *Manager) shareListen(ps mad.PortSpace, port uint16) error {
	s := m.dev.Share()
	if s == nil {
		return nil
	}
	if err := s.Listen(mad.ServiceID(ps, port)); err != nil {
		return fmt.Errorf("cm: listen: port %d of port space %#04x: %w", port, uint16(ps), err)
	}
	return nil
}

// shareUnlisten gives a service back to the shared port's server.
func (m *Manager) shareUnlisten(k psPort) {
	if s := m.dev.Share(); s != nil {
		s.Unlisten(mad.ServiceID(k.ps, k.port))
	}
}
