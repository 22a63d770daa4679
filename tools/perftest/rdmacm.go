package perftest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/transport"
)

// perftest's -R: the QPs are connected through the RDMA CM, and, as
// force_dependecies turns use_rdma_cm on with it, the data exchange runs
// over an RDMA CM connection of its own instead of TCP. Both listen on the
// port of -p (TCP port space), one after the other.

// ptCMRetries and ptCMRetryGap are rdma_cm_client_connection's: a client
// whose connection requests are refused (the server listens only once the
// zeroed handshake is done, so the client's REQ may come first) tries 10
// times, 100 ms apart.
const (
	ptCMRetries  = 10
	ptCMRetryGap = 100 * time.Millisecond
)

// ptCM is the connection manager side of a -R run.
type ptCM struct {
	m     *cm.Manager
	comm  *CommConn
	l     *cm.Listener
	udl   *cm.UDListener // a UD server's (-c UD: the UDP port space)
	conns []*cm.Conn
	peer  netip.Addr // the server's address (client)
	// early is the index in the plan of the traffic step whose receives
	// cmPrepare posts (-1: none).
	early int
	mu    sync.Mutex // cmPrepare runs on the manager's goroutine
}

// openComm starts the connection manager and makes the exchange's
// connection (establish_connection with use_rdma_cm).
func (r *ptRun) openComm(ctx context.Context) error {
	c := &r.cfg
	m, err := cm.New(r.ep.Device, cm.Options{})
	if err != nil {
		return failWith(" "+err.Error(), " Unable to create RDMA_CM resources")
	}
	r.ep.ServeCM(m) // roced stats lists its listener, as rdma(8) would perftest's
	r.cmr = &ptCM{m: m}
	p := CommParams{Retry: c.Retry, QPTimeout: c.QPTimeout}
	var comm *CommConn
	if c.IsServer() {
		comm, err = AcceptComm(ctx, m, r.ep.Device, c.Port, p, func() { ptListening(c.Port) })
		if err != nil {
			return failWith(" "+err.Error(), " Unable to perform rdma_server function", " Unable to init the socket connection")
		}
		r.sess = NewSession(comm, Server, c.Claim)
	} else {
		if r.cmr.peer, err = ptResolve(ctx, c.ServerName, r.ep.Addr); err != nil {
			return failWith(" "+err.Error(), " Unable to perform rdma_client function", " Unable to init the socket connection")
		}
		comm, err = DialComm(ctx, m, r.ep.Device, r.ep.Addr, netip.AddrPortFrom(r.cmr.peer, uint16(c.Port)), p)
		if err != nil {
			return failWith(" "+err.Error(), " Unable to perform rdma_client function", " Unable to init the socket connection")
		}
		r.sess = NewSession(comm, Client, c.Claim)
	}
	r.sess.RDMACM = true
	r.cmr.comm = comm
	return nil
}

// ptResolve is the server's address of the family of the local one.
func ptResolve(ctx context.Context, host string, local netip.Addr) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), nil
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.Addr{}, err
	}
	for _, a := range addrs {
		if a = a.Unmap(); a.Is4() == local.Is4() {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%s has no address of the family of %v", host, local)
}

// cmParams is the conn_param of rdma_cm_route_handler and
// rdma_cm_connection_request_handler: responder resources and initiator
// depth of -o for READ and atomics (the passive side's clamped to the
// peer's, which package cm does), retry_count and rnr_retry_count of
// --retry_count, and the QP's ACK timeout of -u (RDMA_OPTION_ID_ACK_TIMEOUT).
// The path MTU is bounded by check_mtu's, which the traffic loops count
// packets with.
func (r *ptRun) cmParams() cm.ConnParams {
	c := &r.cfg
	p := cm.ConnParams{RetryCount: uint8(c.Retry), RNRRetryCount: uint8(c.Retry),
		ACKTimeout: uint8(c.QPTimeout), PathMTU: transport.MTU(r.mtu)}
	if v := c.Test.Verb(); v == VerbRead || v == VerbAtomic {
		p.ResponderResources, p.InitiatorDepth = uint8(c.OutReads), uint8(c.OutReads)
	}
	return p
}

// cmQPConfig is create_qp_main's QP through rdma_create_qp, with the
// rights rdma_cm gives it: remote writes, and reads and atomics when the
// side takes any (cm.c's cm_init_qp_init_attr).
func (r *ptRun) cmQPConfig() cm.QPConfig {
	access := transport.RemoteWrite
	if v := r.cfg.Test.Verb(); v == VerbRead || v == VerbAtomic {
		access |= transport.RemoteRead | transport.RemoteAtomic
	}
	return cm.QPConfig{PD: r.pc.pd, Init: r.pc.initAttr(), Access: access, Prepare: r.cmPrepare}
}

// cmPrepare takes a connection's QP, in RTS, as the run's next QP
// before the peer learns it, and posts its receives of the first
// traffic step (a receiving side's), so that they are there before the
// REP or RTU goes.
func (r *ptRun) cmPrepare(x *transport.QP) error {
	r.cmr.mu.Lock()
	defer r.cmr.mu.Unlock()
	if len(r.pc.qps) >= r.cfg.NumQPs {
		// rdma_cm_connection_request_handler rejects a request beyond -q.
		return fmt.Errorf("more than %d connection requests", r.cfg.NumQPs)
	}
	r.pc.addQP(x)
	if r.poster != nil {
		i := len(r.pc.qps) - 1
		for range r.poster.perQP() {
			if err := r.poster.post(i); err != nil {
				return err
			}
		}
	}
	return nil
}

// cmReady readies the CM connection of the QPs at step i of the plan
// (the first zeroed handshake): a receiving side makes the poster of the
// first traffic step, whose receives cmPrepare posts, and a server
// listens (rdma_cm_server_connection: the port of -p, a backlog of -q).
// roced listens before the zeroed handshake that precedes it in perftest,
// so that a client's request is never refused for coming early.
func (r *ptRun) cmReady(steps []Step, i int) error {
	c := &r.cfg
	r.cmr.mu.Lock()
	r.cmr.early = -1
	// UD: no early receives. A datagram finds a receive or is dropped, so
	// the usual posting before the handshake that precedes the traffic is
	// what counts; and a side that learns the peer's QPN through the
	// exchange below must find that message in its first receive.
	if r.pc.receives() && c.Conn != ConnUD {
		for j := i; j < len(steps); j++ {
			if st := steps[j]; st.Kind == StepTraffic {
				if !st.Passive {
					r.poster = newRecvPoster(r.pc, st.Size)
					r.cmr.early = j
				}
				break
			}
		}
	}
	r.cmr.mu.Unlock()
	if !c.IsServer() {
		return nil
	}
	if c.Conn == ConnUD {
		l, err := r.cmr.m.ListenUD(netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(c.Port)), c.NumQPs)
		if err != nil {
			return failWith(" Failed to listen on RDMA CM server listen ID: "+err.Error(), "Failed to create RDMA CM connection with resources.")
		}
		r.cmr.udl = l
		return nil
	}
	l, err := r.cmr.m.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(c.Port)),
		cm.ListenConfig{QP: r.cmQPConfig(), Params: r.cmParams(), Backlog: c.NumQPs})
	if err != nil {
		return failWith(" Failed to listen on RDMA CM server listen ID: "+err.Error(), "Failed to create RDMA CM connection with resources.")
	}
	r.cmr.l = l
	return nil
}

// cmConnect connects the -q QPs (create_rdma_cm_connection between its
// two handshakes) and returns the index of the traffic step whose
// receives are posted already (-1: none).
func (r *ptRun) cmConnect(ctx context.Context) (int, error) {
	c := &r.cfg
	fail := func(err error) (int, error) {
		return -1, failWith(" "+err.Error(), "Failed to create RDMA CM connection with resources.")
	}
	if c.IsServer() && c.Conn == ConnUD {
		for i := range c.NumQPs {
			if err := r.cmAcceptUD(ctx, i); err != nil {
				return fail(err)
			}
		}
		r.cmr.udl.Close()
		r.cmr.udl = nil
	} else if c.IsServer() {
		for range c.NumQPs {
			conn, err := r.cmr.l.Accept(ctx)
			if err != nil {
				return fail(err)
			}
			r.cmr.conns = append(r.cmr.conns, conn)
		}
		r.cmr.l.Close() // rdma_destroy_id(listen_id)
		r.cmr.l = nil
	} else {
		raddr := netip.AddrPortFrom(r.cmr.peer, uint16(c.Port))
		for attempt := 1; ; attempt++ {
			err := r.cmDialAll(ctx, raddr)
			if err == nil {
				break
			}
			var rej *cm.RejectError
			var sidr *cm.SIDRError
			if !errors.As(err, &rej) && !errors.As(err, &sidr) || attempt == ptCMRetries {
				if attempt == ptCMRetries {
					err = fmt.Errorf("%w: Failed to connect RDMA CM client, tried %d times", err, ptCMRetries)
				}
				return fail(err)
			}
			select {
			case <-time.After(ptCMRetryGap):
			case <-ctx.Done():
				return fail(ctx.Err())
			}
		}
	}
	// The traffic loops count packets with the path MTU the CM settled on
	// (a UD QP has none: its messages fit the MTU the exchange agreed).
	if a, _ := r.pc.qps[0].Query(); c.Conn != ConnUD && a.PathMTU.Valid() && a.PathMTU.Bytes() < c.MTU {
		c.MTU = a.PathMTU.Bytes()
	}
	return r.cmr.early, nil
}

// cmDialAll dials the -q connections (resolves the -q UD services); on a
// refusal it tears down those made (rdma_cm_destroy_cma) for the next
// attempt.
func (r *ptRun) cmDialAll(ctx context.Context, raddr netip.AddrPort) error {
	for i := range r.cfg.NumQPs {
		var err error
		if r.cfg.Conn == ConnUD {
			err = r.cmResolveUD(ctx, i, raddr)
		} else {
			var conn *cm.Conn
			if conn, err = r.cmr.m.Dial(ctx, netip.AddrPortFrom(r.ep.Addr, 0), raddr, r.cmQPConfig(), r.cmParams()); err == nil {
				r.cmr.conns = append(r.cmr.conns, conn)
			}
		}
		if err != nil {
			for _, c := range r.cmr.conns {
				c.Close()
				r.ep.Device.DestroyQP(c.QP())
			}
			r.cmr.conns = nil
			r.cmr.mu.Lock()
			if r.cfg.Conn == ConnUD {
				r.pc.dropUD()
			}
			r.pc.qps, r.pc.my = nil, nil
			if r.poster != nil {
				r.poster = newRecvPoster(r.pc, r.poster.size)
			}
			r.cmr.mu.Unlock()
			return err
		}
	}
	return nil
}

// udParamsNeeded says whether a UD run exchanges perftest's parameters
// message, as it does when both sides send (send_lat, send_bw -b): the
// client tells the server its QPN, which SIDR carries only the other way.
func (r *ptRun) udParamsNeeded() bool {
	return r.cfg.Conn == ConnUD && (!r.cfg.Test.BW() || r.cfg.Duplex)
}

// cmAcceptUD answers the i-th SIDR request of a UD server
// (rdma_cm_connection_request_handler on a UDP ID): a UD QP of the UDP
// port space, and a SIDR_REP naming it. When both sides send, a receive
// for the client's parameters goes first (rdma_cm_request_ud_connection_
// parameters), and its arrival gives the address handle back to the
// client (from the GRH, ibv_create_ah_from_wc), the client's QPN (the
// immediate data) and the Q_Key, this side's own
// (rdma_cm_initialize_ud_connection_parameters).
func (r *ptRun) cmAcceptUD(ctx context.Context, i int) error {
	req, err := r.cmr.udl.Accept(ctx)
	if err != nil {
		return err
	}
	x, err := r.cmr.m.CreateUDQP(r.cmQPConfig())
	if err != nil {
		req.Reject(mad.SIDRReject, nil) // perftest's rdma_reject
		return err
	}
	if !r.udParamsNeeded() {
		return req.Accept(x, nil)
	}
	grh := r.pc.sendArea(i)
	wr := transport.RecvWR{WRID: 0, SGL: []transport.SGE{{Addr: grh, Length: ptUDAddition + 4, LKey: r.pc.mr.LKey()}}}
	if err := x.PostRecv(&wr); err != nil {
		req.Reject(mad.SIDRReject, nil)
		return fmt.Errorf("Failed to post receive for connection %d for RDMA CM UD request connection parameters: %w", i, err)
	}
	if err := req.Accept(x, nil); err != nil {
		return err
	}
	wc, err := r.pc.waitOne(ctx, r.pc.recvCQ)
	if err == nil && (wc.Status != transport.Success || wc.Opcode != transport.OpRecv || wc.Flags&transport.WithImm == 0) {
		err = fmt.Errorf("status %v, opcode %v, flags %v: want a receive with immediate data", wc.Status, wc.Opcode, wc.Flags)
	}
	if err != nil {
		return fmt.Errorf("Bad WQE status when trying to create AH for UD connection in RDMA CM: %w", err)
	}
	av, err := transport.AHAttrFromWC(&wc, r.pc.bytesAt(grh, ptUDAddition), r.pc.gidIdx)
	if err != nil {
		return fmt.Errorf("Failed to create AH for RDMA CM connection: %w", err)
	}
	a, _ := x.Query()
	return r.pc.addUDPeer(av, wc.ImmData, a.QKey)
}

// cmResolveUD resolves the UD service of the i-th QP of a UD client
// (rdma_cm_route_handler, then rdma_cm_establish_ud_connection): its own
// UD QP, then the SIDR exchange, whose answer gives the server's QPN and
// Q_Key and the address handle; when both sides send, a SEND with
// immediate data (its QPN, 4 bytes) tells the server where to answer.
func (r *ptRun) cmResolveUD(ctx context.Context, i int, raddr netip.AddrPort) error {
	x, err := r.cmr.m.CreateUDQP(r.cmQPConfig())
	if err != nil {
		return err
	}
	p, err := r.cmr.m.ResolveUD(ctx, netip.AddrPortFrom(r.ep.Addr, 0), raddr, nil)
	if err != nil {
		return err
	}
	if err := r.pc.addUDPeer(p.AH, p.QPN, p.QKey); err != nil {
		return err
	}
	if !r.udParamsNeeded() {
		return nil
	}
	wr := transport.SendWR{WRID: 0, Opcode: transport.WRSendWithImm, Flags: transport.Signaled, Imm: x.QPN(),
		SGL: []transport.SGE{{Addr: r.pc.sendArea(i), Length: 4, LKey: r.pc.mr.LKey()}},
		AH:  r.pc.ahs[i], RemoteQPN: p.QPN, RemoteQKey: p.QKey}
	if err := x.PostSend(&wr); err != nil {
		return fmt.Errorf("Failed to post send for connection %d for RDMA CM UD send connection parameters: %w", i, err)
	}
	wc, err := r.pc.waitOne(ctx, r.pc.sendCQ)
	if err == nil && (wc.Status != transport.Success || wc.Opcode != transport.OpSend) {
		err = fmt.Errorf("status %v, opcode %v", wc.Status, wc.Opcode)
	}
	if err != nil {
		return fmt.Errorf("Bad WQE status when trying to send UD connection parameters in RDMA CM: %w", err)
	}
	return nil
}

// cmClose ends the connections as perftest does at the end of a run
// (rdma_cm_disconnect_nodes, then the exchange's): the server disconnects
// and waits for the answers; the client waits for the server's
// disconnection after a run that went through, then closes what is left.
func (r *ptRun) cmClose(ok bool) {
	x := r.cmr
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if x.l != nil {
		x.l.Close()
	}
	if x.udl != nil {
		x.udl.Close()
	}
	if r.cfg.IsServer() || !ok {
		for _, c := range x.conns {
			c.Close()
		}
	}
	if ok {
		for _, c := range x.conns {
			select {
			case <-c.Done():
			case <-ctx.Done():
			}
		}
	}
	for _, c := range x.conns {
		c.Close()
	}
	if x.comm != nil {
		if r.cfg.IsServer() && ok {
			x.comm.Disconnect(ctx)
		} else if ok {
			select {
			case <-x.comm.CM().Done():
			case <-ctx.Done():
			}
		}
		x.comm.Close()
	}
	x.m.Close()
}
