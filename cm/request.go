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

// ErrAnswered is returned by a ConnRequest's Accept or Reject once the
// request was answered, or withdrawn when its listener closed.
var ErrAnswered = errors.New("cm: connection request answered already")

// ConnRequest is a REQ a DeferAccept listener holds for the program
// (rdma_cm's RDMA_CM_EVENT_CONNECT_REQUEST): nothing has answered it
// yet. If the program takes longer than the REQ allows, the manager
// sends an MRA for it, and answers each duplicate of it with one, so
// that the requester waits instead of retrying or giving up.
type ConnRequest struct {
	m       *Manager
	l       *Listener
	p       peer
	in      mad.MAD
	key     remoteID
	local   netip.AddrPort
	remote  netip.AddrPort
	localID uint32 // this side's communication ID, named by the MRA and the REP
	psn     uint32 // this side's starting PSN, which the REP carries

	// Under m.mu.
	done  bool        // answered or withdrawn
	timer clock.Timer // sends the MRA when the REQ's response time runs short
	mras  int         // MRAs sent
}

// LocalAddr returns the address and port the request came to.
func (r *ConnRequest) LocalAddr() netip.AddrPort { return r.local }

// RemoteAddr returns the requester's address and port (its rdma_cm
// header's).
func (r *ConnRequest) RemoteAddr() netip.AddrPort { return r.remote }

// PrivateData returns the requester's private data: what followed rdma_cm's
// header in the REQ (56 bytes, zero-padded).
func (r *ConnRequest) PrivateData() []byte {
	return append([]byte(nil), r.in.REQ().PrivateData()[mad.CMAHdrLen:]...)
}

// ResponderResources returns the READs and atomics the requester takes
// at once; InitiatorDepth those it issues (the REQ's fields).
func (r *ConnRequest) ResponderResources() uint8 { return r.in.REQ().ResponderResources() }

// InitiatorDepth returns how many READs and atomics the requester issues
// at once.
func (r *ConnRequest) InitiatorDepth() uint8 { return r.in.REQ().InitiatorDepth() }

// requestConn holds a REQ to a DeferAccept listener for the program.
// Called with m.mu held, once onREQ has checked the REQ.
func (m *Manager) requestConn(l *Listener, p peer, in mad.MAD, key remoteID) {
	r := in.REQ()
	hdr, _ := mad.ParseCMAHdr(r.PrivateData())
	_, port, _ := mad.SplitServiceID(r.ServiceID())
	req := &ConnRequest{m: m, l: l, p: p, in: append(mad.MAD(nil), in...), key: key,
		local:   netip.AddrPortFrom(p.local, port),
		remote:  netip.AddrPortFrom(hdr.SrcAddr().Unmap(), hdr.Port()),
		localID: m.newCommID(), psn: rand.Uint32() & bth.PSNMask}
	m.requests[key] = req
	m.held[req.localID] = true
	req.timer = m.clock.AfterFunc(mraDelay(r.RemoteCMResponseTimeout()), func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if !req.done && !m.closed && req.mras == 0 {
			m.sendMRA(req)
		}
	})
	l.pending++ // onREQ checked the backlog: reqs has room
	l.reqs <- req
}

// Request returns the next connection request of a DeferAccept listener,
// or an error when ctx ends or the listener is closed.
func (l *Listener) Request(ctx context.Context) (*ConnRequest, error) {
	if !l.cfg.DeferAccept {
		return nil, errors.New("cm: request: the listener accepts by itself (ListenConfig.DeferAccept)")
	}
	select {
	case r := <-l.reqs:
		return r, nil
	case <-l.closed:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Accept answers the request with a REP: the connection's QP (qc.QP, the
// program's, in RESET or INIT, or one made from qc) is moved to RTS and
// the Conn returned at once, before the requester's RTU, as rdma_accept
// returns; its EventEstablished comes on Events when the RTU arrives.
// p's private data (at most 196 bytes) goes in the REP; its responder
// resources and initiator depth are bounded by the requester's. A QP that
// cannot be connected fails the request with a REJ.
func (r *ConnRequest) Accept(qc QPConfig, p ConnParams) (*Conn, error) {
	if qc.PD == nil && qc.QP == nil && qc.ExternalQPN == 0 {
		return nil, errors.New("cm: accept: no protection domain")
	}
	if len(p.PrivateData) > mad.REPPrivateDataLen {
		return nil, fmt.Errorf("cm: accept: %d bytes of private data, a REP holds %d", len(p.PrivateData), mad.REPPrivateDataLen)
	}
	p.defaults()
	m := r.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := r.take(); err != nil {
		return nil, err
	}
	if err := m.acceptREQ(r.l, r.p, r.in, r.key, r.localID, r.psn, qc, p); err != nil {
		return nil, fmt.Errorf("cm: accept: %w", err)
	}
	return m.remote[r.key], nil
}

// QPAttr returns the attributes that move a QP to s (INIT, RTR or RTS)
// for this request before it is accepted, as the kernel's rdma_cm answers
// rdma_init_qp_attr on a request's id: towards the requester's QP and
// PSN, expecting the PSN the REP will carry, with the requester's RDMA
// READ depths and retry counts. ackTimeout, if not 0, is this side's
// local ACK timeout (ConnParams.ACKTimeout). A program that moves an
// external QP by them before Accept (rdma-core's tests do) then accepts
// with QPConfig.ExternalQPN.
func (r *ConnRequest) QPAttr(s transport.QPState, ackTimeout uint8) (transport.QPAttr, transport.QPAttrMask, error) {
	m := r.m
	q := r.in.REQ()
	mtu := transport.MTU(q.PathMTU())
	if !mtu.Valid() {
		return transport.QPAttr{}, 0, fmt.Errorf("cm: REQ with path MTU %d", q.PathMTU())
	}
	lep := transport.Endpoint{PSN: r.psn, GID: bth.GIDFromAddr(r.p.local), MTU: min(mtu, m.dev.ActiveMTU())}
	p := ConnParams{ResponderResources: q.InitiatorDepth(), InitiatorDepth: q.ResponderResources(), ACKTimeout: ackTimeout}
	pl := newPlan(lep, r.p.remote, q.LocalQPN(), q.StartingPSN(), lep.MTU, q.Primary().LocalACKTimeout(), p,
		transport.RemoteRead|transport.RemoteWrite|transport.RemoteAtomic, q.RetryCount(), q.RNRRetryCount())
	return pl.attr(m.dev, s)
}

// Reject answers the request with a REJ, reason 28 (consumer defined, as
// rdma_reject sends it), carrying privateData (at most 148 bytes).
func (r *ConnRequest) Reject(privateData []byte) error {
	if len(privateData) > mad.REJPrivateDataLen {
		return fmt.Errorf("cm: reject: %d bytes of private data, a REJ holds %d", len(privateData), mad.REJPrivateDataLen)
	}
	m := r.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := r.take(); err != nil {
		return err
	}
	m.rejectREQ(r, privateData)
	return nil
}

// take marks the request answered. Called with m.mu held.
func (r *ConnRequest) take() error {
	if r.done {
		return ErrAnswered
	}
	if r.m.closed {
		return ErrClosed
	}
	r.done = true
	r.timer.Stop()
	delete(r.m.requests, r.key)
	delete(r.m.held, r.localID) // m.conns holds it from the REP on
	r.l.pending--
	return nil
}

// sendMRA tells the requester of r to wait: an MRA for its REQ, in the
// REQ's transaction, with this side's communication ID and a service
// timeout of mraServiceTimeout. Called with m.mu held.
func (m *Manager) sendMRA(r *ConnRequest) {
	msg := newMAD(mad.AttrMRA, r.in.TID())
	msg.MRA().Put(mad.MRAFields{LocalCommID: r.localID, RemoteCommID: r.key.comm,
		MessageMRAed: mad.MsgREQ, ServiceTimeout: mraServiceTimeout})
	r.mras++
	r.timer.Stop()
	m.send(r.p, msg)
}

// rejectREQ sends the REJ that refuses r. Called with m.mu held.
func (m *Manager) rejectREQ(r *ConnRequest, privateData []byte) {
	msg := newMAD(mad.AttrREJ, r.in.TID())
	rej := msg.REJ()
	if r.mras > 0 {
		rej.SetLocalCommID(r.localID) // the MRA named it
	}
	rej.SetRemoteCommID(r.key.comm)
	rej.SetMessageRejected(mad.MsgREQ)
	rej.SetReason(mad.RejConsumerDefined)
	rej.SetPrivateData(privateData)
	m.st.rejected.Add(1)
	m.send(r.p, msg)
}

// rejectRequests refuses the requests a closing listener still holds,
// taken by Request or not, as rdma_cm rejects those of a destroyed
// listener. Called with m.mu held.
func (m *Manager) rejectRequests(l *Listener) {
	for _, r := range m.requests {
		if r.l == l && r.take() == nil {
			m.rejectREQ(r, nil)
		}
	}
}
