package cm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/transport"
)

// The UDP port space: UD services resolved with SIDR_REQ and SIDR_REP
// (IBA 12.11), as Linux's rdma_cm serves RDMA_PS_UDP. There is no
// connection: the passive side tells the active one its QPN and Q_Key,
// and from then on each side sends datagrams with an address handle.

// UDPQKey is the Q_Key of every QP of rdma_cm's UDP port space
// (librdmacm's RDMA_UDP_QKEY): the one CreateUDQP gives a QP, and the one
// a SIDR_REP from rdma_cm carries.
const UDPQKey = 0x01234567

// UDPrivateLen is how much private data a SIDR_REQ holds after rdma_cm's
// header (180 bytes); a SIDR_REP holds mad.SIDRREPPrivateDataLen (136).
const UDPrivateLen = mad.SIDRREQPrivateDataLen - mad.CMAHdrLen

// sidrHold is how long an answered SIDR_REQ is remembered, so that a
// duplicate of it (the requester's retry, its first answer lost) is
// answered with the same SIDR_REP rather than handed to Accept again: as
// long as a requester using this manager's timeout and retry count goes on
// asking. Linux's cm.c forgets a request once it answered it.
var sidrHold = (maxCMRetries + 1) * reqTimeout

// reqTimeout is how long an active side waits for the answer to its REQ
// or SIDR_REQ before sending it again: twice the packet life time plus
// the CM response timeout it announces.
var reqTimeout = 2*ibaTime(packetLifeTime) + ibaTime(cmResponseTimeout)

// SIDRError is the error of a UD service the peer did not resolve: the
// SIDR_REP's status other than success (1, unsupported, for a port
// nobody listens on; 2, reject, for a request the program refused).
type SIDRError struct {
	Status      mad.SIDRStatus // the SIDR_REP's status
	PrivateData []byte         // its private data (136 bytes, zero-padded)
}

// Error implements error.
func (e *SIDRError) Error() string { return fmt.Sprintf("cm: SIDR: %v", e.Status) }

// sidrKey identifies a SIDR_REQ by its sender and request ID, as cm.c's
// remote SIDR table does.
type sidrKey struct {
	remote netip.Addr
	id     uint32
}

// UDListener hands over the SIDR requests for one address and port of the
// UDP port space.
type UDListener struct {
	m      *Manager
	ps     mad.PortSpace
	addr   netip.AddrPort
	ch     chan *SIDRRequest
	closed chan struct{}
}

// SIDRRequest is a request to resolve a UD service a UDListener took: the
// program answers it with Accept (its QPN and Q_Key) or Reject, as an
// rdma_cm program answers RDMA_CM_EVENT_CONNECT_REQUEST on a UDP ID with
// rdma_accept or rdma_reject.
type SIDRRequest struct {
	m       *Manager
	l       *UDListener
	key     sidrKey
	p       peer
	tid     uint64
	service uint64
	local   netip.AddrPort
	remote  netip.AddrPort
	private []byte

	reply mad.MAD // the SIDR_REP, once answered (under m.mu)
}

// LocalAddr returns the address and port the request was for.
func (r *SIDRRequest) LocalAddr() netip.AddrPort { return r.local }

// RemoteAddr returns the requester's address and the port in its rdma_cm
// header.
func (r *SIDRRequest) RemoteAddr() netip.AddrPort { return r.remote }

// PrivateData returns what followed rdma_cm's header in the SIDR_REQ (180
// bytes, zero-padded), as librdmacm hands it over.
func (r *SIDRRequest) PrivateData() []byte { return r.private }

// Accept answers the request with a SIDR_REP of status success naming q,
// a UD QP (in RTS, as CreateUDQP leaves it), and its Q_Key, with private
// data (at most 136 bytes). A retried SIDR_REQ of the same request is
// answered with the same SIDR_REP, never handed over again.
func (r *SIDRRequest) Accept(q *transport.QP, privateData []byte) error {
	if q == nil || q.Type() != transport.UD {
		return fmt.Errorf("cm: SIDR accept: %v is not a UD QP", q)
	}
	a, _ := q.Query()
	return r.answer(mad.SIDRSuccess, q.QPN(), a.QKey, privateData)
}

// Reject answers the request with a SIDR_REP of status (mad.SIDRReject, as
// rdma_reject sends) and private data (at most 136 bytes).
func (r *SIDRRequest) Reject(status mad.SIDRStatus, privateData []byte) error {
	if status == mad.SIDRSuccess {
		return errors.New("cm: SIDR reject: status success")
	}
	return r.answer(status, 0, 0, privateData)
}

func (r *SIDRRequest) answer(status mad.SIDRStatus, qpn, qkey uint32, private []byte) error {
	if len(private) > mad.SIDRREPPrivateDataLen {
		return fmt.Errorf("cm: SIDR: %d bytes of private data, a SIDR_REP holds %d", len(private), mad.SIDRREPPrivateDataLen)
	}
	m := r.m
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		return ErrClosed
	case r.reply != nil:
		return errors.New("cm: SIDR: the request was answered already")
	}
	m.replySIDR(r, status, qpn, qkey, private)
	return nil
}

// replySIDR sends r's SIDR_REP and keeps it for the duplicates of r for
// sidrHold. Called with m.mu held.
func (m *Manager) replySIDR(r *SIDRRequest, status mad.SIDRStatus, qpn, qkey uint32, private []byte) {
	msg := newMAD(mad.AttrSIDRREP, r.tid)
	msg.SIDRREP().Put(mad.SIDRREPFields{RequestID: r.key.id, Status: status, QPN: qpn,
		ServiceID: r.service, QKey: qkey, PrivateData: private})
	r.reply = msg
	m.clock.AfterFunc(sidrHold, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.sidrIn[r.key] == r {
			delete(m.sidrIn, r.key)
		}
	})
	m.send(r.p, msg)
}

// ListenUD starts taking SIDR requests for addr (an unspecified address
// takes any of the device's) in the UDP port space: a SIDR_REQ whose
// service ID is 0x0111<<16 | port and whose rdma_cm header names addr.
// Accept hands each over once; the program answers it. At most backlog
// (0: 16) requests wait for Accept; one beyond is rejected.
func (m *Manager) ListenUD(addr netip.AddrPort, backlog int) (*UDListener, error) {
	return m.ListenUDIn(mad.PortSpaceUDP, addr, backlog)
}

// ListenUDIn is ListenUD in port space ps: mad.PortSpaceUDP, or the two
// other spaces in which rdma_cm resolves UD services through SIDR,
// mad.PortSpaceIPoIB and mad.PortSpaceIB (0: UDP). Each space has ports of
// its own. rdma_cm gives a QP of the IPoIB space the Q_Key of the IPoIB
// broadcast group, which RoCE has not: the program's QP, whose Q_Key the
// SIDR_REP carries, says it.
func (m *Manager) ListenUDIn(ps mad.PortSpace, addr netip.AddrPort, backlog int) (*UDListener, error) {
	ps, err := udSpace(ps)
	if err != nil {
		return nil, fmt.Errorf("cm: listen: %w", err)
	}
	if backlog <= 0 {
		backlog = defaultBacklog
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	key := psPort{ps, addr.Port()}
	if _, used := m.udListeners[key]; used {
		return nil, fmt.Errorf("cm: listen: port %d of port space %#04x is in use", addr.Port(), uint16(ps))
	}
	if err := m.shareListen(ps, addr.Port()); err != nil {
		return nil, err
	}
	l := &UDListener{m: m, ps: ps, addr: netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port()),
		ch: make(chan *SIDRRequest, backlog), closed: make(chan struct{})}
	m.udListeners[key] = l
	return l, nil
}

// Addr returns the address and port the listener takes requests for.
func (l *UDListener) Addr() netip.AddrPort { return l.addr }

// Accept returns the next SIDR request, or an error when ctx ends or the
// listener is closed.
func (l *UDListener) Accept(ctx context.Context) (*SIDRRequest, error) {
	select {
	case r := <-l.ch:
		return r, nil
	case <-l.closed:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops listening: later SIDR requests for the port are answered
// "unsupported"; those it took and the program has not answered, whether
// Accept returned them or not, are rejected.
func (l *UDListener) Close() error {
	m := l.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if key := (psPort{l.ps, l.addr.Port()}); m.udListeners[key] == l {
		delete(m.udListeners, key)
		m.shareUnlisten(key)
	}
	select {
	case <-l.closed:
		return nil
	default:
	}
	close(l.closed)
	for len(l.ch) > 0 {
		<-l.ch
	}
	if m.closed {
		return nil
	}
	for _, r := range m.sidrIn {
		if r.l == l && r.reply == nil {
			m.replySIDR(r, mad.SIDRReject, 0, 0, nil)
		}
	}
	return nil
}

// onSIDRREQ is the passive side's: a request for a UD service goes to its
// listener once; a duplicate of one answered already gets the same
// answer, one not yet answered none; a service nobody listens on is
// "unsupported", as cm.c answers it.
func (m *Manager) onSIDRREQ(p peer, in mad.MAD) {
	r := in.SIDRREQ()
	key := sidrKey{p.remote, r.RequestID()}
	if old := m.sidrIn[key]; old != nil {
		m.st.duplicates.Add(1)
		if old.reply != nil {
			rep := append(mad.MAD(nil), old.reply...)
			rep.SetTID(in.TID()) // the same as the first's, from a requester that retries
			m.send(old.p, rep)
		}
		return
	}
	req := &SIDRRequest{m: m, key: key, p: p, tid: in.TID(), service: r.ServiceID()}
	ps, port, ok := mad.SplitServiceID(r.ServiceID())
	l := m.udListeners[psPort{ps, port}]
	if !ok || l == nil {
		m.st.rejected.Add(1)
		m.replySIDRNow(req, mad.SIDRUnsupported)
		return
	}
	hdr, err := mad.ParseCMAHdr(r.PrivateData())
	if err != nil || hdr.Version() != mad.CMAVersion || !takes(l.addr.Addr(), hdr, p) {
		// rdma_cm finds no ID for the header: its SIDR ID is destroyed
		// unanswered, which cm.c answers with a reject.
		m.st.rejected.Add(1)
		m.replySIDRNow(req, mad.SIDRReject)
		return
	}
	req.l = l
	req.local = netip.AddrPortFrom(p.local, port)
	req.remote = netip.AddrPortFrom(hdr.SrcAddr().Unmap(), hdr.Port())
	req.private = append([]byte(nil), r.PrivateData()[mad.CMAHdrLen:]...)
	m.sidrIn[key] = req
	select {
	case l.ch <- req:
	default:
		m.st.rejected.Add(1)
		m.replySIDR(req, mad.SIDRReject, 0, 0, nil) // the backlog is full
	}
}

// replySIDRNow answers a request no listener took, keeping nothing: each
// duplicate is answered anew, the same.
func (m *Manager) replySIDRNow(r *SIDRRequest, status mad.SIDRStatus) {
	msg := newMAD(mad.AttrSIDRREP, r.tid)
	msg.SIDRREP().Put(mad.SIDRREPFields{RequestID: r.key.id, Status: status, ServiceID: r.service})
	m.send(r.p, msg)
}

// CreateUDQP makes a UD QP of the UDP port space, as rdma_create_qp makes
// one on a UDP ID: in RTS, with the Q_Key UDPQKey. qc.Access is not used;
// qc.Prepare, if set, is called with the QP before CreateUDQP returns.
func (m *Manager) CreateUDQP(qc QPConfig) (*transport.QP, error) {
	if qc.PD == nil {
		return nil, errors.New("cm: create UD QP: no protection domain")
	}
	qc.Init.Type = transport.UD
	q, err := m.dev.CreateQP(qc.PD, qc.Init)
	if err != nil {
		return nil, fmt.Errorf("cm: create UD QP: %w", err)
	}
	ep, err := m.dev.LocalEndpoint(q)
	if err == nil {
		err = m.dev.Connect(q, ep, transport.Endpoint{}, transport.ConnectOptions{QKey: UDPQKey})
	}
	if err == nil && qc.Prepare != nil {
		err = qc.Prepare(q)
	}
	if err != nil {
		m.dev.DestroyQP(q)
		return nil, fmt.Errorf("cm: create UD QP: %w", err)
	}
	return q, nil
}

// UDPeer is a UD service ResolveUD resolved: where to send its datagrams
// (librdmacm's struct rdma_ud_param).
type UDPeer struct {
	QPN  uint32 // the service's QP
	QKey uint32 // its Q_Key (UDPQKey from rdma_cm)
	// AH is the address vector to the service, for Device.CreateAH.
	AH transport.AHAttr
	// LocalAddr is this side's address and the port its rdma_cm header
	// named; RemoteAddr the service's.
	LocalAddr, RemoteAddr netip.AddrPort
	// PrivateData is the SIDR_REP's (136 bytes, zero-padded).
	PrivateData []byte
}

// sidrQuery is a SIDR_REQ this side sent, waiting for its SIDR_REP.
type sidrQuery struct {
	id      uint32
	p       peer
	msg     mad.MAD
	retries int
	timer   clock.Timer
	done    chan struct{}
	rep     mad.SIDRREP // the answer (a copy), or nil
	err     error
}

// ResolveUD resolves the UD service at raddr (UDP port space), as
// rdma_connect does on a UDP ID: it sends a SIDR_REQ with rdma_cm's header
// and privateData (at most UDPrivateLen bytes), sends it again after the
// timeout a REQ gets, up to 15 times, and returns what the SIDR_REP names.
// laddr is this side's address (an invalid one: the device's default
// GID's); its port goes in the header (0: a random one). A SIDR_REP of
// another status than success is a *SIDRError; no answer is ErrTimeout;
// ctx ending stops the retries.
func (m *Manager) ResolveUD(ctx context.Context, laddr, raddr netip.AddrPort, privateData []byte) (*UDPeer, error) {
	return m.ResolveUDIn(ctx, mad.PortSpaceUDP, laddr, raddr, privateData)
}

// ResolveUDIn is ResolveUD in port space ps (mad.PortSpaceUDP,
// mad.PortSpaceIPoIB or mad.PortSpaceIB; 0: UDP): the SIDR_REQ's service
// ID is ps<<16 | raddr's port.
func (m *Manager) ResolveUDIn(ctx context.Context, ps mad.PortSpace, laddr, raddr netip.AddrPort, privateData []byte) (*UDPeer, error) {
	ps, err := udSpace(ps)
	if err != nil {
		return nil, fmt.Errorf("cm: resolve: %w", err)
	}
	if len(privateData) > UDPrivateLen {
		return nil, fmt.Errorf("cm: resolve: %d bytes of private data, a SIDR_REQ holds %d after rdma_cm's header", len(privateData), UDPrivateLen)
	}
	local, err := m.localAddr(laddr, raddr)
	if err != nil {
		return nil, fmt.Errorf("cm: resolve: %w", err)
	}
	ra := raddr.Addr().Unmap()
	ah, err := m.dev.AHAttr(transport.Endpoint{GID: bth.GIDFromAddr(local.Addr())}, transport.Endpoint{GID: bth.GIDFromAddr(ra)})
	if err != nil {
		return nil, fmt.Errorf("cm: resolve: %w", err)
	}
	priv := make([]byte, mad.SIDRREQPrivateDataLen)
	h := mad.CMAHdr(priv[:mad.CMAHdrLen])
	h.SetPort(local.Port())
	h.SetAddrs(local.Addr(), ra)
	copy(priv[mad.CMAHdrLen:], privateData)

	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	q := &sidrQuery{p: peer{local: local.Addr(), remote: ra}, retries: maxCMRetries, done: make(chan struct{})}
	for q.id == 0 || m.sidrOut[q.id] != nil {
		q.id = m.ids()
	}
	q.msg = newMAD(mad.AttrSIDRREQ, m.hiTID|uint64(q.id))
	q.msg.SIDRREQ().Put(mad.SIDRREQFields{RequestID: q.id, PKey: transport.GSIPKey,
		ServiceID: mad.ServiceID(ps, raddr.Port()), PrivateData: priv})
	m.sidrOut[q.id] = q
	m.armSIDR(q)
	m.send(q.p, q.msg)
	m.mu.Unlock()

	select {
	case <-q.done:
	case <-ctx.Done():
		m.mu.Lock()
		if m.sidrOut[q.id] == q {
			m.endSIDR(q, ctx.Err())
		}
		m.mu.Unlock()
		<-q.done
	}
	if q.err != nil {
		return nil, q.err
	}
	r := q.rep
	if r.Status() != mad.SIDRSuccess {
		return nil, &SIDRError{Status: r.Status(), PrivateData: r.PrivateData()}
	}
	return &UDPeer{QPN: r.QPN(), QKey: r.QKey(), AH: ah, LocalAddr: local, RemoteAddr: netip.AddrPortFrom(ra, raddr.Port()),
		PrivateData: r.PrivateData()}, nil
}

// armSIDR (re)starts q's retry timer. Called with m.mu held; the timer is
// armed before the send, as sendRetried's is.
func (m *Manager) armSIDR(q *sidrQuery) {
	q.timer = m.clock.AfterFunc(reqTimeout, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.closed || m.sidrOut[q.id] != q {
			return
		}
		if q.retries == 0 {
			m.endSIDR(q, ErrTimeout) // cm.c sends nothing more: IB_CM_SIDR_REQ_ERROR
			return
		}
		q.retries--
		m.st.retries.Add(1)
		m.armSIDR(q)
		m.send(q.p, q.msg)
	})
}

// endSIDR ends q with err, or with its answer when err is nil. Called
// with m.mu held.
func (m *Manager) endSIDR(q *sidrQuery, err error) {
	if q.timer != nil {
		q.timer.Stop()
	}
	delete(m.sidrOut, q.id)
	q.err = err
	close(q.done)
}

// onSIDRREP is the active side's: the answer to a SIDR_REQ, found by its
// request ID (cm.c's cm_sidr_rep_handler); a second one is dropped.
func (m *Manager) onSIDRREP(in mad.MAD) {
	r := in.SIDRREP()
	q := m.sidrOut[r.RequestID()]
	if q == nil {
		m.st.unknown.Add(1)
		return
	}
	q.rep = mad.SIDRREP(append([]byte(nil), r...))
	m.endSIDR(q, nil)
}

// localAddr returns the address and rdma_cm port an active side uses
// towards raddr: laddr's address, or the device's default GID's; laddr's
// port, or a random one (as an ephemeral port).
func (m *Manager) localAddr(laddr, raddr netip.AddrPort) (netip.AddrPort, error) {
	la, ra := laddr.Addr().Unmap(), raddr.Addr().Unmap()
	if !la.IsValid() {
		g, _ := m.dev.GID(m.dev.DefaultGIDIndex())
		la = g.Addr()
	}
	if la.Is4() != ra.Is4() {
		return netip.AddrPort{}, fmt.Errorf("%v and %v are not of one family", la, ra)
	}
	lport := laddr.Port()
	if lport == 0 {
		lport = uint16(0x8000 | rand.Uint32()&0x7fff)
	}
	return netip.AddrPortFrom(la, lport), nil
}
