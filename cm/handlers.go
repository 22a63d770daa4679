package cm

import (
	"fmt"
	"math/rand/v2"
	"net/netip"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/transport"
)

// The handlers of each CM message, called with m.mu held. Each follows the
// state machine of IBA 12.9 as Linux's cm.c implements it; where cm.c
// answers a message for no known connection (a DREQ, a REP), so do they.

// onREQ is the passive side's: a REQ opens a connection to a listener, or
// is a duplicate of one that did, or is rejected.
func (m *Manager) onREQ(p peer, in mad.MAD) {
	r := in.REQ()
	key := remoteID{r.LocalCommID(), r.LocalCAGUID()}
	rej := func(why mad.RejReason) { m.reject(p, in.TID(), 0, key.comm, mad.MsgREQ, why) }
	if c := m.remote[key]; c != nil {
		// A duplicate: the REP (retried on its own timer) or the
		// connection stands; a REQ for a connection in time wait is stale
		// (cm.c's cm_dup_req_handler).
		m.st.duplicates.Add(1)
		if c.state == stateTimewait {
			m.reject(p, in.TID(), c.localID, key.comm, mad.MsgREQ, mad.RejStaleConn)
		}
		return
	}
	if req := m.requests[key]; req != nil {
		// The program has yet to answer it, and the requester is retrying:
		// tell it to wait, with an MRA (again, if one went already), as
		// cm.c's cm_dup_req_handler answers a REQ in MRA_REQ_SENT.
		m.st.duplicates.Add(1)
		m.sendMRA(req)
		return
	}
	ps, port, ok := mad.SplitServiceID(r.ServiceID())
	l := m.listeners[psPort{ps, port}]
	if !ok || l == nil {
		rej(mad.RejInvalidServiceID) // nobody listens: cm.c's answer, reason 8
		return
	}
	if r.TransportServiceType() != 0 || r.ExtendedTransportType() != 0 {
		rej(mad.RejInvalidTransportType) // RC only
		return
	}
	hdr, err := mad.ParseCMAHdr(r.PrivateData())
	if err != nil || hdr.Version() != mad.CMAVersion || !takes(l.addr.Addr(), hdr, p) {
		rej(mad.RejConsumerDefined) // rdma_cm finds no listener for the header: its ID is dropped, REJ 28
		return
	}
	if l.pending+len(l.ch) >= cap(l.ch) {
		rej(mad.RejNoResources)
		return
	}
	local := r.Primary().RemoteGID().Addr().Unmap()
	if _, ok := m.dev.GIDIndex(local); !ok || local != p.local {
		rej(mad.RejInvalidGID)
		return
	}
	if l.cfg.DeferAccept {
		// The program answers: rdma_cm's CONNECT_REQUEST, then rdma_accept
		// or rdma_reject (request.go).
		m.requestConn(l, p, in, key)
		return
	}
	m.acceptREQ(l, p, in, key, 0, rand.Uint32()&bth.PSNMask, l.cfg.QP, l.cfg.Params)
}

// acceptREQ answers a REQ to l with a REP: a connection with a QP made
// (or given) by qc, in RTS, with params, counted pending on l until the
// RTU. localID is the communication ID an MRA may have named already (0:
// a new one); psn is this side's starting PSN, which the REP carries. A
// REQ it cannot serve is rejected, and the error says why.
func (m *Manager) acceptREQ(l *Listener, p peer, in mad.MAD, key remoteID, localID, psn uint32, qc QPConfig, params ConnParams) error {
	r := in.REQ()
	rej := func(why mad.RejReason, err error) error {
		m.reject(p, in.TID(), localID, key.comm, mad.MsgREQ, why)
		return err
	}
	hdr, _ := mad.ParseCMAHdr(r.PrivateData()) // onREQ checked it
	_, port, _ := mad.SplitServiceID(r.ServiceID())
	local := p.local
	params.ResponderResources = min(params.ResponderResources, r.InitiatorDepth())
	params.InitiatorDepth = min(params.InitiatorDepth, r.ResponderResources())
	c, err := m.newConn(qc, params, local, psn)
	if err != nil {
		return rej(mad.RejNoResources, err)
	}
	c.listener = l
	c.p = p
	c.local = netip.AddrPortFrom(local, port)
	c.remote = netip.AddrPortFrom(hdr.SrcAddr().Unmap(), hdr.Port())
	c.private = append([]byte(nil), r.PrivateData()[mad.CMAHdrLen:]...)
	c.ackTO = r.Primary().LocalACKTimeout()
	pktLife := c.ackTO - min(c.ackTO, 1)
	c.timeout = 2*ibaTime(pktLife) + ibaTime(r.LocalCMResponseTimeout())
	mtu := transport.MTU(r.PathMTU())
	if !mtu.Valid() {
		m.destroyQP(c)
		return rej(mad.RejInvalidMTU, fmt.Errorf("cm: REQ with path MTU %d", r.PathMTU()))
	}
	mtu = min(mtu, c.lep.MTU)
	c.lep.MTU = mtu
	if err := m.connect(c, r.LocalQPN(), r.StartingPSN(), mtu, r.RetryCount(), r.RNRRetryCount()); err != nil {
		m.destroyQP(c)
		return rej(mad.RejConsumerDefined, err)
	}
	c.localID = localID
	if c.localID == 0 {
		c.localID = m.newCommID()
	}
	c.remoteKey = key
	c.tid = in.TID() // the REP answers the REQ's transaction
	m.conns[c.localID] = c
	m.remote[key] = c
	l.pending++

	msg := newMAD(mad.AttrREP, c.tid)
	rep := msg.REP()
	rep.Put(mad.REPFields{
		LocalCommID: c.localID, RemoteCommID: key.comm, LocalQPN: c.qpn, StartingPSN: c.lep.PSN,
		ResponderResources: params.ResponderResources, InitiatorDepth: params.InitiatorDepth,
		TargetACKDelay: targetACKDelay, RNRRetryCount: params.RNRRetryCount, LocalCAGUID: m.guid,
		PrivateData: params.PrivateData,
	})
	c.state = stateREPSent
	c.sendRetried(msg, int(r.MaxCMRetries()))
	return nil
}

// onREP is the active side's: the peer accepted.
func (m *Manager) onREP(p peer, in mad.MAD) {
	r := in.REP()
	c := m.conns[r.RemoteCommID()]
	if c == nil || !c.active {
		// cm.c's cm_rep_handler answers a REP for no connection with a REJ,
		// invalid communication ID.
		m.st.unknown.Add(1)
		m.reject(p, in.TID(), 0, r.LocalCommID(), mad.MsgREP, mad.RejInvalidCommID)
		return
	}
	switch c.state {
	case stateREQSent, stateMRAREQRcvd:
	case stateEstablished:
		// Our RTU was lost and the peer retried its REP: answer it again
		// (cm.c's cm_dup_rep_handler).
		if r.LocalCommID() == c.remoteKey.comm {
			m.st.duplicates.Add(1)
			m.sendRTU(c)
		}
		return
	default:
		m.st.duplicates.Add(1)
		return
	}
	c.stopTimer()
	key := remoteID{r.LocalCommID(), r.LocalCAGUID()}
	if other := m.remote[key]; other != nil {
		m.reject(p, in.TID(), c.localID, key.comm, mad.MsgREP, mad.RejStaleConn)
		m.drop(c, &RejectError{Reason: mad.RejStaleConn})
		return
	}
	c.remoteKey = key
	c.params.ResponderResources = min(c.params.ResponderResources, r.InitiatorDepth())
	c.params.InitiatorDepth = min(c.params.InitiatorDepth, r.ResponderResources())
	c.private = append([]byte(nil), r.PrivateData()...)
	if err := m.connect(c, r.LocalQPN(), r.StartingPSN(), c.lep.MTU, c.params.RetryCount, r.RNRRetryCount()); err != nil {
		m.reject(p, in.TID(), c.localID, key.comm, mad.MsgREP, mad.RejConsumerDefined)
		m.drop(c, err)
		return
	}
	m.remote[key] = c
	if c.qp == nil {
		// An external QP: the program moves it now (QPAttr) and sends
		// the RTU with Establish, as the kernel's rdma_cm reports a REP
		// to an id with no QP as CONNECT_RESPONSE and leaves the RTU to
		// rdma_establish.
		c.state = stateREPRcvd
		close(c.ready)
		m.emit(EventConnectResponse, c, nil)
		return
	}
	c.state = stateEstablished
	m.sendRTU(c)
	close(c.ready)
	m.emit(EventEstablished, c, nil)
}

func (m *Manager) sendRTU(c *Conn) {
	msg := newMAD(mad.AttrRTU, c.tid)
	rtu := msg.RTU()
	rtu.SetLocalCommID(c.localID)
	rtu.SetRemoteCommID(c.remoteKey.comm)
	m.send(c.p, msg)
}

// onRTU is the passive side's: the connection is established and goes to
// its listener's Accept.
func (m *Manager) onRTU(in mad.MAD) {
	r := in.RTU()
	c := m.conns[r.RemoteCommID()]
	if c == nil || c.active || r.LocalCommID() != c.remoteKey.comm {
		m.st.unknown.Add(1)
		return
	}
	if c.state != stateREPSent && c.state != stateMRAREPRcvd {
		m.st.duplicates.Add(1)
		return
	}
	c.stopTimer()
	c.state = stateEstablished
	c.listener.pending--
	close(c.ready)
	m.emit(EventEstablished, c, nil)
	if c.listener.cfg.DeferAccept {
		return // the program has the Conn from ConnRequest.Accept
	}
	select {
	case c.listener.ch <- c:
	default: // the backlog was checked at the REQ: not reached
	}
}

// onREJ: the peer refused our REQ or REP, or gave up on it.
func (m *Manager) onREJ(in mad.MAD) {
	r := in.REJ()
	c := m.conns[r.RemoteCommID()]
	if c == nil {
		m.st.unknown.Add(1)
		return
	}
	err := &RejectError{Reason: r.Reason(), PrivateData: append([]byte(nil), r.PrivateData()...)}
	switch c.state {
	case stateREQSent, stateMRAREQRcvd, stateREPRcvd, stateREPSent, stateMRAREPRcvd:
		m.drop(c, err)
	case stateEstablished, stateDREQSent:
		m.timewait(c, err)
	default:
		m.st.duplicates.Add(1)
	}
}

// onMRA: the peer needs longer to answer; the outstanding MAD's timer is
// pushed back by the service timeout the MRA names plus the path's packet
// life time, without spending a retry (cm.c's cm_mra_handler).
func (m *Manager) onMRA(in mad.MAD) {
	r := in.MRA()
	c := m.conns[r.RemoteCommID()]
	if c == nil {
		m.st.unknown.Add(1)
		return
	}
	switch {
	case c.state == stateREQSent && r.MessageMRAed() == mad.MsgREQ:
		c.state = stateMRAREQRcvd
	case c.state == stateREPSent && r.MessageMRAed() == mad.MsgREP:
		c.state = stateMRAREPRcvd
	default:
		m.st.duplicates.Add(1)
		return
	}
	c.arm(ibaTime(r.ServiceTimeout()) + ibaTime(c.ackTO))
}

// onDREQ: the peer disconnects. The QP goes to ERR, a DREP answers and the
// connection waits out its time wait; a DREQ for no known connection is
// answered all the same (cm.c's cm_issue_drep), and so is a retried one.
func (m *Manager) onDREQ(p peer, in mad.MAD) {
	r := in.DREQ()
	c := m.conns[r.RemoteCommID()]
	if c == nil {
		m.st.unknown.Add(1)
		m.sendDREP(p, in.TID(), r.RemoteCommID(), r.LocalCommID())
		return
	}
	if r.RemoteQPN() != c.qpn || r.LocalCommID() != c.remoteKey.comm {
		m.st.unknown.Add(1) // cm.c drops a DREQ naming another QP
		return
	}
	switch c.state {
	case stateEstablished, stateREPSent, stateMRAREPRcvd, stateDREQSent:
		// A DREQ crossing ours ends the connection as a DREP would.
		c.stopTimer()
		if c.listener != nil && c.state != stateEstablished && c.state != stateDREQSent {
			c.listener.pending--
		}
		m.sendDREP(p, in.TID(), c.localID, c.remoteKey.comm)
		m.timewait(c, ErrDisconnected)
	case stateTimewait:
		m.st.duplicates.Add(1)
		m.sendDREP(p, in.TID(), c.localID, c.remoteKey.comm)
	default:
		m.st.duplicates.Add(1)
	}
}

func (m *Manager) sendDREP(p peer, tid uint64, local, remote uint32) {
	msg := newMAD(mad.AttrDREP, tid)
	d := msg.DREP()
	d.SetLocalCommID(local)
	d.SetRemoteCommID(remote)
	m.send(p, msg)
}

// onDREP: the peer answered our DREQ.
func (m *Manager) onDREP(in mad.MAD) {
	r := in.DREP()
	c := m.conns[r.RemoteCommID()]
	if c == nil {
		m.st.unknown.Add(1)
		return
	}
	if c.state != stateDREQSent || r.LocalCommID() != c.remoteKey.comm {
		m.st.duplicates.Add(1)
		return
	}
	m.timewait(c, ErrDisconnected)
}

// onLAP answers a peer's request to load an alternate path on an
// established connection with an APR whose status is "unsupported": goroce
// has no alternate paths (automatic path migration). The specification's
// alternate path exchange answers a LAP with an APR; Linux's CM drops LAPs
// on RoCE ports unanswered (cm_lap_handler), and the peer's LAP then
// times out. A LAP that names
// no connection of ours, or another QP, is dropped as cm.c drops it.
func (m *Manager) onLAP(p peer, in mad.MAD) {
	r := in.LAP()
	c := m.conns[r.RemoteCommID()]
	if c == nil || r.LocalCommID() != c.remoteKey.comm || r.RemoteQPN() != c.qpn {
		m.st.unknown.Add(1)
		return
	}
	if c.state != stateEstablished {
		m.st.duplicates.Add(1) // cm.c: a LAP outside ESTABLISHED is ignored
		return
	}
	m.st.unhandled.Add(1)
	msg := newMAD(mad.AttrAPR, in.TID())
	a := msg.APR()
	a.SetLocalCommID(c.localID)
	a.SetRemoteCommID(c.remoteKey.comm)
	a.SetStatus(mad.APRUnsupported)
	m.send(p, msg)
}

// takes reports whether a listener bound to addr takes a request whose
// rdma_cm header is hdr, come from p, as rdma_cm matches a request to a
// listening ID by the header's destination (cma_match_private_data): an
// unbound or wildcard listener takes every request, one bound to an
// address those naming it. A loopback address no device holds binds no
// device (the kernel's rdma_bind_addr leaves id->verbs NULL for
// 127.0.0.1, as rxe shows), and only this host reaches it: here a
// connection to 127.0.0.1 or ::1 leaves from the device's own address to
// itself, its header naming that address, so such a listener also takes
// the requests whose sender is the device itself.
func takes(addr netip.Addr, hdr mad.CMAHdr, p peer) bool {
	switch {
	case !addr.IsValid() || addr.IsUnspecified() || hdr.DstAddr().Unmap() == addr:
		return true
	case addr.IsLoopback():
		return p.remote == p.local
	}
	return false
}
