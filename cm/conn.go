package cm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/transport"
)

// state is a connection's CM state (IBA 12.9.6, the kernel's ib_cm_state).
type state uint8

const (
	stateIdle        state = iota
	stateREQSent           // active: REQ sent, waiting for REP
	stateMRAREQRcvd        // active: the peer MRAed our REQ
	stateREPRcvd           // active, external QP: REP received, the RTU waits for Establish
	stateREPSent           // passive: REP sent, waiting for RTU
	stateMRAREPRcvd        // passive: the peer MRAed our REP
	stateEstablished       // both: RTU sent or received
	stateDREQSent          // we asked to disconnect, waiting for DREP
	stateTimewait          // disconnected; the IDs are held a while yet
	stateGone              // removed
)

var stateNames = [...]string{"idle", "REQ sent", "MRA REQ rcvd", "REP rcvd", "REP sent", "MRA REP rcvd",
	"established", "DREQ sent", "timewait", "gone"}

func (s state) String() string { return stateNames[s] }

// ErrTimeout is returned when the peer never answered a MAD, retries
// included.
var ErrTimeout = errors.New("cm: timed out")

// ErrDisconnected is returned by Dial when the peer disconnected first.
var ErrDisconnected = errors.New("cm: disconnected")

// RejectError is the error of a connection the peer rejected.
type RejectError struct {
	Reason      mad.RejReason // why (IBA table 112; 28 is rdma_reject's)
	PrivateData []byte        // the REJ's private data (148 bytes, zero-padded)
}

// Error implements error.
func (e *RejectError) Error() string { return fmt.Sprintf("cm: rejected: %v", e.Reason) }

// QPConfig says how to make the QP of a connection, as a librdmacm program
// says it to rdma_create_qp: the protection domain, the CQs and
// capacities (the type is always RC), and what the peer may do to this
// side's memory.
type QPConfig struct {
	PD     *transport.PD        // the device's
	Init   transport.QPInitAttr // Type is set to RC
	Access transport.Access     // 0: transport.RemoteRead | transport.RemoteWrite | transport.RemoteAtomic, as rdma_cm grants
	// Prepare, if set, is called with the QP once it is in RTS and before
	// the peer learns it (before the REP goes, or the RTU), so that the
	// program can post its first receives in time, as an rdma_cm program
	// posts them before rdma_accept or rdma_connect; otherwise the peer's
	// first SEND may meet an RNR NAK and wait for its retry. An error
	// abandons the connection (a REJ, reason 28). It runs while the
	// manager handles the connection: it must not call the Manager.
	Prepare func(*transport.QP) error
	// QP, if set, is a QP the program made already on the manager's
	// device (RC, in RESET or INIT), as a librdmacm program that calls
	// ibv_create_qp itself rather than rdma_create_qp; Init is then not
	// used. The connection takes it: a connection that fails destroys it.
	QP *transport.QP
	// ExternalQPN, if not 0, is the number of a QP the program keeps
	// and moves itself, as librdmacm's rdma_connect and rdma_accept of
	// an id with no QP announce conn_param->qp_num: the CM makes, moves
	// and destroys no QP (PD, Init, QP and Prepare are not used). The
	// REQ or REP carries this number and a starting PSN the CM draws;
	// Conn.QPAttr (ConnRequest.QPAttr before Accept) gives the INIT, RTR
	// and RTS attributes that agree with them. Dial returns at the REP,
	// before the RTU (rdma_cm's CONNECT_RESPONSE, EventConnectResponse),
	// and Conn.Establish sends the RTU once the program's QP is ready.
	ExternalQPN uint32
}

// ConnParams are the parameters a side gives its connection
// (librdmacm's struct rdma_conn_param).
type ConnParams struct {
	// PrivateData goes in the REQ (after rdma_cm's 36-byte header: at most
	// 56 bytes) or the REP (at most 196).
	PrivateData []byte
	// ResponderResources is how many READs and atomics from the peer this
	// side takes at once; InitiatorDepth how many it issues (0: 16 each).
	// Each side ends with the smaller of its own and the peer's opposite.
	ResponderResources, InitiatorDepth uint8
	// RetryCount and RNRRetryCount are the RC retry counts this side's
	// QP uses after a timeout and after an RNR NAK (0: 7 each, rping's);
	// the REQ or REP tells the peer the RNR one.
	RetryCount, RNRRetryCount uint8
	// PathMTU bounds the path MTU (0: the device's active MTU).
	PathMTU transport.MTU
	// PortSpace is the rdma_cm port space Dial connects in (0: TCP, as
	// most programs' RDMA_PS_TCP; mad.PortSpaceIB, RDMA_PS_IB, is the
	// other one rdma_cm makes RC connections in): the REQ's service ID is
	// PortSpace<<16 | port. Listen and Accept do not use it.
	PortSpace mad.PortSpace
	// ACKTimeout, if not 0, is this side's QP's local ACK timeout
	// exponent (4.096 µs × 2^ACKTimeout), as rdma_set_option's
	// RDMA_OPTION_ID_ACK_TIMEOUT sets it; 0 takes the path's (the REQ's
	// local ACK timeout). Only the QP uses it: the CM's messages and time
	// wait keep the path's.
	ACKTimeout uint8
}

// UserPrivateLen is how much private data a REQ holds after rdma_cm's header.
const UserPrivateLen = mad.REQPrivateDataLen - mad.CMAHdrLen

func (p *ConnParams) defaults() {
	if p.ResponderResources == 0 {
		p.ResponderResources = defaultRdAtomic
	}
	if p.InitiatorDepth == 0 {
		p.InitiatorDepth = defaultRdAtomic
	}
	if p.RetryCount == 0 {
		p.RetryCount = 7
	}
	if p.RNRRetryCount == 0 {
		p.RNRRetryCount = 7
	}
}

// Conn is one RC connection: its QP, already in RTS, and the connection
// manager's state of it.
type Conn struct {
	m        *Manager
	qp       *transport.QP // nil: an external QP (QPConfig.ExternalQPN)
	qpn      uint32        // this side's QP's number, qp's or the external one
	local    netip.AddrPort
	remote   netip.AddrPort
	private  []byte // the peer's private data (REQ: after rdma_cm's header; REP)
	active   bool
	p        peer
	lep      transport.Endpoint // this side's endpoint (QPN, first PSN, GID, MTU)
	plan     plan               // how the QP goes to RTS, set by connect
	params   ConnParams
	ackTO    uint8 // the path's local ACK timeout: the QP's, and time wait's measure
	qcAccess transport.Access
	prepare  func(*transport.QP) error

	ready    chan struct{} // closed when established or failed (Dial, accept)
	done     chan struct{} // closed when the connection ended
	doneOnce sync.Once

	// Under m.mu.
	state     state
	localID   uint32
	remoteKey remoteID
	tid       uint64
	msg       mad.MAD       // the MAD a timeout sends again
	retries   int           // sends of msg left
	timeout   time.Duration // between sends of msg
	timer     clock.Timer
	gen       uint64 // bumped whenever the timer is re-armed or stopped
	err       error
	listener  *Listener
}

// QP returns the connection's queue pair, in RTS once Dial or Accept
// returned it; nil for an external QP (QPConfig.ExternalQPN).
func (c *Conn) QP() *transport.QP { return c.qp }

// QPN returns the number of the connection's QP, its own or the external
// one the REQ or REP announced.
func (c *Conn) QPN() uint32 { return c.qpn }

// LocalAddr returns this side's address and port.
func (c *Conn) LocalAddr() netip.AddrPort { return c.local }

// RemoteAddr returns the peer's address and port (a dialing peer's port is
// the one in its rdma_cm header).
func (c *Conn) RemoteAddr() netip.AddrPort { return c.remote }

// PrivateData returns the peer's private data: what followed rdma_cm's
// header in its REQ (56 bytes), or its REP's (196 bytes), zero-padded, as
// librdmacm hands it over.
func (c *Conn) PrivateData() []byte { return c.private }

// ResponderResources and InitiatorDepth return what the connection
// settled on: the READs and atomics this side takes from the peer at once,
// and those it issues.
func (c *Conn) ResponderResources() uint8 { return c.params.ResponderResources }

// InitiatorDepth returns how many READs and atomics this side issues at once.
func (c *Conn) InitiatorDepth() uint8 { return c.params.InitiatorDepth }

// Done is closed when the connection ends: disconnected by either side,
// timed out, or its manager closed. Err then says why.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns why the connection ended (nil while it lasts, ErrDisconnected
// after a disconnection).
func (c *Conn) Err() error {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	return c.err
}

// ErrState is returned by Establish and QPAttr on a connection in no
// state for them.
var ErrState = errors.New("cm: the connection is in no state for this")

// Establish completes an external QP's connection that Dial returned at
// the peer's REP: it sends the RTU, after which the peer's connection is
// established (librdmacm's rdma_establish). The program moves its QP to
// RTS first (QPAttr). As the kernel's rdma_cm, no event marks it on this
// side. A connection with a QP of the CM's, or not waiting for its RTU,
// is ErrState.
func (c *Conn) Establish() error {
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.state != stateREPRcvd {
		return ErrState
	}
	c.state = stateEstablished
	m.sendRTU(c)
	return nil
}

// QPAttr returns the attributes that move a QP of the connection to s
// (INIT, RTR or RTS) and their mask: what the CM gives a QP of its own
// (Device.ConnectSteps), for an external QP the program moves (librdmacm's
// rdma_init_qp_attr). They are known once the peer's message is: from the
// REP on the active side (Dial returned), at once on the passive side.
func (c *Conn) QPAttr(s transport.QPState) (transport.QPAttr, transport.QPAttrMask, error) {
	c.m.mu.Lock()
	pl, state := c.plan, c.state
	c.m.mu.Unlock()
	if state == stateREQSent || state == stateMRAREQRcvd || state == stateIdle {
		return transport.QPAttr{}, 0, ErrState
	}
	return pl.attr(c.m.dev, s)
}

// Close disconnects: it moves the QP to ERR (its outstanding work requests
// complete flushed), sends a DREQ and returns at once; the DREQ is retried
// until the peer's DREP, and Done is closed when it arrives or the retries
// run out. Closing a connection that ended already does nothing. The QP
// stays the caller's to destroy (Device.DestroyQP) once it has polled
// what it needs; an external QP is left as it is. An external QP's
// connection still waiting for Establish is withdrawn with a REJ.
func (c *Conn) Close() error {
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.state == stateREPRcvd {
		// An external QP's connection never established: withdrawn with
		// a REJ, as cm.c's cm_destroy_id rejects an id in REP_RCVD.
		m.reject(c.p, c.tid, c.localID, c.remoteKey.comm, mad.MsgREP, mad.RejConsumerDefined)
		m.drop(c, ErrDisconnected)
		return nil
	}
	if c.state != stateEstablished {
		return nil
	}
	c.toErr()
	// The active side's DREQ goes in the connection's transaction; the
	// passive side starts one of its own, as cm.c's cm_form_tid does.
	tid := c.tid
	if !c.active {
		tid = m.hiTID | uint64(c.localID)
	}
	msg := newMAD(mad.AttrDREQ, tid)
	d := msg.DREQ()
	d.SetLocalCommID(c.localID)
	d.SetRemoteCommID(c.remoteKey.comm)
	d.SetRemoteQPN(c.plan.remote.QPN)
	c.state = stateDREQSent
	c.sendRetried(msg, maxCMRetries)
	return nil
}

// Disconnect closes the connection and waits until the peer answered (or
// the DREQ's retries ran out), or ctx ends.
func (c *Conn) Disconnect(ctx context.Context) error {
	c.Close()
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// toErr moves the QP to ERR, as rdma_cm does on a disconnection; an
// external QP is the program's, which librdmacm leaves alone.
func (c *Conn) toErr() {
	if c.qp != nil && c.qp.State() != transport.Reset {
		c.qp.Modify(&transport.QPAttr{State: transport.Err}, transport.AttrState)
	}
}

// sendRetried sends msg and arms the timer to send it again, up to
// retries more times. Called with m.mu held. The timer is armed before
// the send, so that whoever sees the message (a test's fake clock
// included) finds its retry already due at send time + timeout.
func (c *Conn) sendRetried(msg mad.MAD, retries int) {
	c.msg, c.retries = msg, retries
	c.arm(c.timeout)
	c.m.send(c.p, msg)
}

// arm (re)starts the connection's timer. Called with m.mu held.
func (c *Conn) arm(d time.Duration) {
	c.stopTimer()
	gen := c.gen
	c.timer = c.m.clock.AfterFunc(d, func() { c.m.expire(c, gen) })
}

// stopTimer stops the timer; a firing already under way finds its
// generation stale. Called with m.mu held.
func (c *Conn) stopTimer() {
	c.gen++
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
}

// finish records why the connection ended and wakes its waiters. Called
// with m.mu held.
func (c *Conn) finish(err error) {
	if c.err == nil {
		c.err = err
	}
	select {
	case <-c.ready:
	default:
		close(c.ready)
	}
	c.doneOnce.Do(func() { close(c.done) })
}

// expire is a connection's timer firing.
func (m *Manager) expire(c *Conn, gen uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if gen != c.gen || m.closed {
		return
	}
	c.timer = nil
	switch c.state {
	case stateTimewait:
		m.forget(c)
		m.emit(EventTimewaitExit, c, nil)
		return
	case stateREQSent, stateMRAREQRcvd, stateREPSent, stateMRAREPRcvd, stateDREQSent:
	default:
		return
	}
	if c.retries > 0 {
		c.retries--
		m.st.retries.Add(1)
		c.arm(c.timeout)
		m.send(c.p, c.msg)
		return
	}
	// No answer, retries included (IBA 12.9.7): a REQ or REP is withdrawn
	// with a REJ of reason Timeout, as cm.c's cm_destroy_id sends one; a
	// DREQ ends in time wait all the same.
	switch c.state {
	case stateREQSent, stateMRAREQRcvd:
		m.reject(c.p, c.tid, c.localID, 0, mad.MsgREQ, mad.RejTimeout)
		m.drop(c, ErrTimeout)
	case stateREPSent, stateMRAREPRcvd:
		m.reject(c.p, c.tid, c.localID, c.remoteKey.comm, mad.MsgREP, mad.RejTimeout)
		m.drop(c, ErrTimeout)
	case stateDREQSent:
		m.timewait(c, ErrTimeout)
	}
}

// drop ends a connection that never was established: its IDs are
// forgotten at once and its QP destroyed. Called with m.mu held.
func (m *Manager) drop(c *Conn, err error) {
	c.stopTimer()
	m.forget(c)
	if c.listener != nil {
		c.listener.pending--
	}
	m.destroyQP(c)
	c.finish(err)
	m.emit(endEvent(err), c, err)
}

// destroyQP destroys the connection's QP if it is the CM's to destroy.
func (m *Manager) destroyQP(c *Conn) {
	if c.qp != nil { // an external QP is the program's
		m.dev.DestroyQP(c.qp)
	}
}

// forget removes c from the tables. Called with m.mu held.
func (m *Manager) forget(c *Conn) {
	c.stopTimer()
	c.state = stateGone
	if m.conns[c.localID] == c {
		delete(m.conns, c.localID)
	}
	if m.remote[c.remoteKey] == c {
		delete(m.remote, c.remoteKey)
	}
}

// timewait ends an established connection: the QP goes to ERR, and the
// IDs are kept for the time wait so that a late DREQ is answered and a
// late duplicate REQ refused as stale. Called with m.mu held.
func (m *Manager) timewait(c *Conn, err error) {
	c.toErr()
	c.state = stateTimewait
	c.arm(ibaTime(c.ackTO))
	c.finish(err)
	m.emit(EventDisconnected, c, err)
}

// Listener accepts connections to one address and port of the TCP port
// space.
type Listener struct {
	m       *Manager
	addr    netip.AddrPort
	cfg     ListenConfig
	ch      chan *Conn
	reqs    chan *ConnRequest // DeferAccept's requests, not yet taken by Request
	closed  chan struct{}
	pending int // connections past REQ, not yet established (under m.mu)
}

// ListenConfig is what a Listener gives each connection it accepts.
type ListenConfig struct {
	// QP says how to make each accepted connection's QP.
	QP QPConfig
	// Params are this side's; PrivateData goes in the REP.
	Params ConnParams
	// Backlog bounds the connections not yet accepted (0: 16); a REQ
	// beyond it is rejected (reason 3, no resources).
	Backlog int
	// PortSpace is the rdma_cm port space listened in (0: TCP; or
	// mad.PortSpaceIB): a REQ comes to the listener when its service ID
	// names this space and the listener's port. Each space has ports of
	// its own.
	PortSpace mad.PortSpace
	// DeferAccept, if set, leaves each REQ to the program: Request
	// returns it as a ConnRequest, which the program answers with Accept
	// (a REP, with the QP it made by then) or Reject, as an rdma_cm
	// program answers RDMA_CM_EVENT_CONNECT_REQUEST with rdma_accept or
	// rdma_reject. QP and Params are then not used, and the listener's
	// Accept returns nothing: the program has each Conn from
	// ConnRequest.Accept, and its ESTABLISHED event from Events.
	DeferAccept bool
}

// Listen starts accepting connections to addr (an unspecified address
// takes any of the device's) in the TCP port space: a REQ whose service
// ID is 0x0106<<16 | port and whose rdma_cm header names addr. Each
// connection gets a QP made from cfg.QP, is answered with a REP (the QP in
// RTS already, as rdma_accept leaves it) and is handed to Accept once the
// peer's RTU arrives: the manager accepts for the program, as a TCP stack
// does, within the backlog.
func (m *Manager) Listen(addr netip.AddrPort, cfg ListenConfig) (*Listener, error) {
	if cfg.QP.PD == nil && !cfg.DeferAccept {
		return nil, errors.New("cm: listen: no protection domain")
	}
	if cfg.QP.QP != nil || cfg.QP.ExternalQPN != 0 {
		return nil, errors.New("cm: listen: each connection needs a QP of its own: QPConfig.QP is for Dial")
	}
	if len(cfg.Params.PrivateData) > mad.REPPrivateDataLen {
		return nil, fmt.Errorf("cm: listen: %d bytes of private data, a REP holds %d", len(cfg.Params.PrivateData), mad.REPPrivateDataLen)
	}
	ps, err := rcSpace(cfg.PortSpace)
	if err != nil {
		return nil, fmt.Errorf("cm: listen: %w", err)
	}
	cfg.PortSpace = ps
	cfg.Params.defaults()
	if cfg.Backlog <= 0 {
		cfg.Backlog = defaultBacklog
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	key := psPort{ps, addr.Port()}
	if _, used := m.listeners[key]; used {
		return nil, fmt.Errorf("cm: listen: port %d of port space %#04x is in use", addr.Port(), uint16(ps))
	}
	if err := m.shareListen(ps, addr.Port()); err != nil {
		return nil, err
	}
	l := &Listener{m: m, addr: netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port()), cfg: cfg,
		ch: make(chan *Conn, cfg.Backlog), reqs: make(chan *ConnRequest, cfg.Backlog), closed: make(chan struct{})}
	m.listeners[key] = l
	return l, nil
}

// Addr returns the address and port the listener accepts on.
func (l *Listener) Addr() netip.AddrPort { return l.addr }

// Accept returns the next established connection, or an error when ctx
// ends or the listener is closed.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops listening: later REQs to the port are rejected (invalid
// service ID). Connections accepted already are not affected; those not
// yet taken by Accept are disconnected.
func (l *Listener) Close() error {
	l.m.mu.Lock()
	if key := (psPort{l.cfg.PortSpace, l.addr.Port()}); l.m.listeners[key] == l {
		delete(l.m.listeners, key)
		l.m.shareUnlisten(key)
	}
	waiting := l.shut()
	l.m.rejectRequests(l)
	l.m.mu.Unlock()
	for _, c := range waiting {
		c.Close()
	}
	return nil
}

// shut marks the listener closed and returns the connections that were
// waiting for Accept. Called with m.mu held.
func (l *Listener) shut() []*Conn {
	select {
	case <-l.closed:
		return nil
	default:
	}
	close(l.closed)
	var waiting []*Conn
	for len(l.ch) > 0 {
		waiting = append(waiting, <-l.ch)
	}
	return waiting
}

// Dial connects to a listener at raddr (TCP port space) and returns the
// connection with its QP in RTS once the peer's REP has arrived and the
// RTU is on its way, as rdma_connect's RDMA_CM_EVENT_ESTABLISHED. laddr
// is this side's address (an invalid one: the device's default GID's);
// its port goes in rdma_cm's header (0: a random one, as an ephemeral
// port). A REJ is a *RejectError; no answer, retries included, is
// ErrTimeout; ctx ending withdraws the REQ with a REJ. With an external
// QP (QPConfig.ExternalQPN) it returns at the REP with no RTU sent: the
// program moves its QP (Conn.QPAttr) and calls Conn.Establish.
func (m *Manager) Dial(ctx context.Context, laddr, raddr netip.AddrPort, qc QPConfig, p ConnParams) (*Conn, error) {
	if qc.PD == nil && qc.ExternalQPN == 0 {
		return nil, errors.New("cm: dial: no protection domain")
	}
	if len(p.PrivateData) > UserPrivateLen {
		return nil, fmt.Errorf("cm: dial: %d bytes of private data, a REQ holds %d after rdma_cm's header", len(p.PrivateData), UserPrivateLen)
	}
	p.defaults()
	ps, err := rcSpace(p.PortSpace)
	if err != nil {
		return nil, fmt.Errorf("cm: dial: %w", err)
	}
	local, err := m.localAddr(laddr, raddr)
	if err != nil {
		return nil, fmt.Errorf("cm: dial: %w", err)
	}
	la, ra, lport := local.Addr(), raddr.Addr().Unmap(), local.Port()
	c, err := m.newConn(qc, p, la, rand.Uint32()&bth.PSNMask)
	if err != nil {
		return nil, fmt.Errorf("cm: dial: %w", err)
	}
	c.active = true
	c.local, c.remote = netip.AddrPortFrom(la, lport), netip.AddrPortFrom(ra, raddr.Port())
	c.p = peer{local: la, remote: ra}
	c.ackTO = packetLifeTime + 1
	c.timeout = reqTimeout

	msg := newMAD(mad.AttrREQ, 0)
	r := msg.REQ()
	f := mad.REQFields{
		ServiceID: mad.ServiceID(ps, raddr.Port()), LocalCAGUID: m.guid,
		LocalQPN: c.qpn, ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth,
		RemoteCMResponseTimeout: cmResponseTimeout, StartingPSN: c.lep.PSN,
		LocalCMResponseTimeout: cmResponseTimeout, RetryCount: p.RetryCount, PKey: transport.GSIPKey,
		PathMTU: uint8(c.lep.MTU), RNRRetryCount: p.RNRRetryCount, MaxCMRetries: maxCMRetries,
		Primary: mad.PathFields{LocalLID: permissiveLID, RemoteLID: permissiveLID, LocalGID: c.lep.GID,
			RemoteGID: bth.GIDFromAddr(ra), HopLimit: hopLimit, LocalACKTimeout: c.ackTO},
	}
	priv := make([]byte, mad.REQPrivateDataLen)
	h := mad.CMAHdr(priv[:mad.CMAHdrLen])
	h.SetPort(lport)
	h.SetAddrs(la, ra)
	copy(priv[mad.CMAHdrLen:], p.PrivateData)
	f.PrivateData = priv

	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		m.destroyQP(c)
		return nil, ErrClosed
	}
	c.localID = m.newCommID()
	c.tid = m.hiTID | uint64(c.localID)
	f.LocalCommID = c.localID
	msg.SetTID(c.tid)
	r.Put(f)
	m.conns[c.localID] = c
	c.state = stateREQSent
	c.sendRetried(msg, maxCMRetries)
	m.mu.Unlock()

	select {
	case <-c.ready:
	case <-ctx.Done():
		m.mu.Lock()
		if c.state == stateREQSent || c.state == stateMRAREQRcvd {
			m.reject(c.p, c.tid, c.localID, 0, mad.MsgREQ, mad.RejTimeout)
			m.drop(c, ctx.Err())
		}
		m.mu.Unlock()
		<-c.ready
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.state != stateEstablished && c.state != stateREPRcvd {
		return nil, c.err
	}
	return c, nil
}

// newConn makes a connection's QP (none for an external one) and
// endpoint, from local address la, its first PSN psn (rdma_cm's
// seq_num: what the REQ or REP announces and this side's QP expects).
func (m *Manager) newConn(qc QPConfig, p ConnParams, la netip.Addr, psn uint32) (*Conn, error) {
	if qc.Access == 0 {
		// The kernel's rdma_cm grants remote write, and read and atomics
		// with responder resources, which a connection here always has
		// (ConnParams' 0 takes the default): qperf's rc_compare_swap_mr
		// on an rdma_cm connection relies on the atomics.
		qc.Access = transport.RemoteRead | transport.RemoteWrite | transport.RemoteAtomic
	}
	if _, ok := m.dev.GIDIndex(la); !ok {
		return nil, fmt.Errorf("%v is none of the device's addresses", la)
	}
	ep := transport.Endpoint{QPN: qc.ExternalQPN, MTU: m.dev.ActiveMTU()}
	qc.Init.Type = transport.RC
	q := qc.QP
	switch {
	case qc.ExternalQPN != 0:
		if qc.ExternalQPN > bth.PSNMask {
			return nil, fmt.Errorf("QP number 0x%x exceeds 24 bits", qc.ExternalQPN)
		}
		q = nil // the program's: not the CM's to touch
	case q == nil:
		var err error
		if q, err = m.dev.CreateQP(qc.PD, qc.Init); err != nil {
			return nil, err
		}
		ep.QPN = q.QPN()
	case q.Type() != transport.RC || (q.State() != transport.Reset && q.State() != transport.Init):
		return nil, fmt.Errorf("QP 0x%06x is %v in %v, want RC in RESET or INIT", q.QPN(), q.Type(), q.State())
	default:
		ep.QPN = q.QPN()
	}
	ep.GID, ep.PSN = bth.GIDFromAddr(la), psn
	if p.PathMTU != 0 && p.PathMTU < ep.MTU {
		ep.MTU = p.PathMTU
	}
	c := &Conn{m: m, qp: q, qpn: ep.QPN, lep: ep, params: p, ready: make(chan struct{}), done: make(chan struct{})}
	c.params.PrivateData = append([]byte(nil), p.PrivateData...)
	c.qcAccess, c.prepare = qc.Access, qc.Prepare
	return c, nil
}

// plan is how a connection's QP goes to RTS towards the peer: the
// arguments of Device.Connect, which the CM applies to a QP of its own
// and hands out (QPAttr) for an external one, so that both agree with
// what the REQ and REP announced.
type plan struct {
	local, remote transport.Endpoint
	opts          transport.ConnectOptions
}

// attr returns the attributes of the step of pl that moves a QP to s.
func (pl plan) attr(d *transport.Device, s transport.QPState) (transport.QPAttr, transport.QPAttrMask, error) {
	steps, err := d.ConnectSteps(transport.RC, pl.local, pl.remote, pl.opts)
	if err != nil {
		return transport.QPAttr{}, 0, err
	}
	for _, st := range steps {
		if st.Attr.State == s {
			return st.Attr, st.Mask, nil
		}
	}
	return transport.QPAttr{}, 0, fmt.Errorf("cm: no attributes to move a connection's QP to %v", s)
}

// newPlan is the plan of a QP at endpoint lep towards the peer's QPN and
// remote address, sending from sendPSN, the Starting PSN of the peer's
// message (REQ or REP), and expecting the one this side's own message
// carried (lep.PSN), with what the connection settled on.
//
// That is how Linux reads the Starting PSN of a REQ and a REP (cm.c: the
// passive side's send queue starts at the REQ's, the active side's at
// the REP's; rdma_init_qp_attr's RTR rq_psn is the id's own seq_num),
// and what rxe does on the wire: in the rping_c5 capture the client sends
// from the REP's PSN and the server from the REQ's. Each side's message
// names the PSN it expects to receive.
func newPlan(lep transport.Endpoint, remote netip.Addr, qpn, sendPSN uint32, mtu transport.MTU, ackTO uint8,
	p ConnParams, access transport.Access, retry, rnr uint8) plan {
	pl := plan{local: lep, remote: transport.Endpoint{QPN: qpn, PSN: lep.PSN, GID: bth.GIDFromAddr(remote), MTU: mtu}}
	pl.local.PSN = sendPSN
	if p.ACKTimeout != 0 {
		ackTO = p.ACKTimeout
	}
	// The RNR NAK timer the responder asks for is the kernel CM's, code 0
	// (655.36 ms): rdma-core's external-QP test sends before its peer has
	// posted a receive, and five retries of 0.64 ms ran out under load.
	pl.opts = transport.ConnectOptions{Access: access, Timeout: ackTO, RetryCnt: retry, RNRRetry: rnr,
		MinRNRTimer: transport.RNRTimer655ms, MaxRdAtomic: p.InitiatorDepth, MaxDestRdAtomic: p.ResponderResources}
	return pl
}

// connect plans c's QP towards the peer's QPN (newPlan) and brings a QP of
// the CM's to RTS by it; an external QP is the program's to move
// (QPAttr). Called with m.mu held.
func (m *Manager) connect(c *Conn, qpn, sendPSN uint32, mtu transport.MTU, retry, rnr uint8) error {
	c.plan = newPlan(c.lep, c.p.remote, qpn, sendPSN, mtu, c.ackTO, c.params, c.qcAccess, retry, rnr)
	if c.qp == nil {
		return nil
	}
	err := m.dev.Connect(c.qp, c.plan.local, c.plan.remote, c.plan.opts)
	if err == nil && c.prepare != nil {
		err = c.prepare(c.qp)
	}
	return err
}
