package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/oob/perftest"
	"github.com/goroce/goroce/qp"
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
	comm  *perftest.CommConn
	l     *cm.Listener
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
	r.cmr = &ptCM{m: m}
	p := perftest.CommParams{Retry: c.Retry, QPTimeout: c.QPTimeout}
	var comm *perftest.CommConn
	if c.IsServer() {
		comm, err = perftest.AcceptComm(ctx, m, r.ep.Device, c.Port, p, func() { ptListening(c.Port) })
		if err != nil {
			return failWith(" "+err.Error(), " Unable to perform rdma_server function", " Unable to init the socket connection")
		}
		r.sess = perftest.NewSession(comm, perftest.Server, c.Claim)
	} else {
		if r.cmr.peer, err = ptResolve(ctx, c.ServerName, r.ep.Addr); err != nil {
			return failWith(" "+err.Error(), " Unable to perform rdma_client function", " Unable to init the socket connection")
		}
		comm, err = perftest.DialComm(ctx, m, r.ep.Device, r.ep.Addr, netip.AddrPortFrom(r.cmr.peer, uint16(c.Port)), p)
		if err != nil {
			return failWith(" "+err.Error(), " Unable to perform rdma_client function", " Unable to init the socket connection")
		}
		r.sess = perftest.NewSession(comm, perftest.Client, c.Claim)
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
		ACKTimeout: uint8(c.QPTimeout), PathMTU: qp.MTU(r.mtu)}
	if v := c.Test.Verb(); v == perftest.VerbRead || v == perftest.VerbAtomic {
		p.ResponderResources, p.InitiatorDepth = uint8(c.OutReads), uint8(c.OutReads)
	}
	return p
}

// cmQPConfig is create_qp_main's QP through rdma_create_qp, with the
// rights rdma_cm gives it: remote writes, and reads and atomics when the
// side takes any (cm.c's cm_init_qp_init_attr).
func (r *ptRun) cmQPConfig() cm.QPConfig {
	access := mr.RemoteWrite
	if v := r.cfg.Test.Verb(); v == perftest.VerbRead || v == perftest.VerbAtomic {
		access |= mr.RemoteRead | mr.RemoteAtomic
	}
	return cm.QPConfig{PD: r.pc.pd, Init: r.pc.initAttr(), Access: access, Prepare: r.cmPrepare}
}

// cmPrepare takes a connection's QP, in RTS, as the run's next QP
// before the peer learns it, and posts its receives of the first
// traffic step (a receiving side's), so that they are there before the
// REP or RTU goes.
func (r *ptRun) cmPrepare(x *qp.QP) error {
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
func (r *ptRun) cmReady(steps []perftest.Step, i int) error {
	c := &r.cfg
	r.cmr.mu.Lock()
	r.cmr.early = -1
	if r.pc.receives() {
		for j := i; j < len(steps); j++ {
			if st := steps[j]; st.Kind == perftest.StepTraffic {
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
	if c.IsServer() {
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
			if !errors.As(err, &rej) || attempt == ptCMRetries {
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
	// The traffic loops count packets with the path MTU the CM settled on.
	if a, _ := r.pc.qps[0].Query(); a.PathMTU.Valid() && a.PathMTU.Bytes() < c.MTU {
		c.MTU = a.PathMTU.Bytes()
	}
	return r.cmr.early, nil
}

// cmDialAll dials the -q connections; on a refusal it tears down those
// made (rdma_cm_destroy_cma) for the next attempt.
func (r *ptRun) cmDialAll(ctx context.Context, raddr netip.AddrPort) error {
	for range r.cfg.NumQPs {
		conn, err := r.cmr.m.Dial(ctx, netip.AddrPortFrom(r.ep.Addr, 0), raddr, r.cmQPConfig(), r.cmParams())
		if err != nil {
			for _, c := range r.cmr.conns {
				c.Close()
				r.ep.Device.DestroyQP(c.QP())
			}
			r.cmr.conns = nil
			r.cmr.mu.Lock()
			r.pc.qps, r.pc.my = nil, nil
			if r.poster != nil {
				r.poster = newRecvPoster(r.pc, r.poster.size)
			}
			r.cmr.mu.Unlock()
			return err
		}
		r.cmr.conns = append(r.cmr.conns, conn)
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
