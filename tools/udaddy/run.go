package udaddy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/tools/internal/serverwait"
	"github.com/goroce/goroce/transport"
)

// Env is what a run needs besides its flags.
type Env struct {
	Dev    *transport.Device // the device
	CM     *cm.Manager       // its connection manager
	Stdout io.Writer         // udaddy's printf lines: its progress, a failed resolution's event
	Stderr io.Writer         // its perror lines, and roced's own
	// Listening, if set, is called once the server listens: a caller
	// that runs the client next starts it on this event.
	Listening func(netip.AddrPort)
}

// Return statuses besides 0.
const (
	// statusFail is what udaddy returns from a failed call (-1, 255 to a
	// shell).
	statusFail = -1
	// statusInvalid is -EINVAL: a message larger than the MTU, or a
	// SIDR_REP whose Q_Key is not rdma_cm's (rdma_cm's ADDR_ERROR).
	statusInvalid = -22
	// statusTimedOut is RDMA_CM_EVENT_UNREACHABLE's status when the
	// SIDR_REQ got no answer: -ETIMEDOUT.
	statusTimedOut = -110
)

// pollBatch is how many completions udaddy's poll_cqs takes at once.
const pollBatch = 8

// node is one UD QP and its peer, udaddy's struct cmatest_node.
type node struct {
	id int
	q  *transport.QP
	cq *transport.CQ
	// recv holds -C slots of -S bytes plus the GRH, one per receive
	// (udaddy posts every receive into one buffer; its contents are never
	// looked at but for the first GRH, which roced reads from a slot no
	// later receive writes). send is the messages' source.
	recv, send *transport.MR
	sgid       uint8 // the GID index of this side's address
	ah         *transport.AH
	remoteQPN  uint32
	remoteQKey uint32
	recvd      int // successful receive completions
	sent       int // successful send completions
}

type run struct {
	cfg   Config
	env   Env
	count int // messages each way on each QP
	pd    *transport.PD
	nodes []*node // the QPs resolved or accepted, in order
	all   []*node // every QP made
}

// Run is udaddy's main after the flags: it runs the server (no -s) or the
// client, prints what udaddy prints, and returns its exit status (udaddy
// returns its ret: 0, a failed event's status or -1).
func Run(ctx context.Context, cfg Config, env Env) int {
	r := &run{cfg: cfg, env: env, count: cfg.Count}
	// create_message zeroes message_count when message_size is 0.
	if cfg.Size == 0 {
		r.count = 0
	}
	r.pd = env.Dev.AllocPD()
	var ret int
	if cfg.IsServer() {
		ret = r.server(ctx)
	} else {
		ret = r.client(ctx)
	}
	r.printf("test complete")
	r.cleanup()
	r.printf("return status %d", ret)
	return ret & 0xff
}

func (r *run) printf(format string, a ...any) {
	fmt.Fprintf(r.env.Stdout, format+"\n", a...)
}

// perror prints what perror(what) prints for err, and returns statusFail.
func (r *run) perror(what string, err error) int {
	fmt.Fprintf(r.env.Stderr, "%s: %v\n", what, err)
	return statusFail
}

// verify is verify_test_params: a UD message is one packet.
func (r *run) verify() error {
	if mtu := r.env.Dev.ActiveMTU().Bytes(); r.count > 0 && r.cfg.Size > mtu {
		r.printf("udaddy: message_size %d is larger than active mtu %d", r.cfg.Size, mtu)
		return fmt.Errorf("message size %d above the MTU %d", r.cfg.Size, mtu)
	}
	return nil
}

// slot is the size of one receive: the message and the GRH before it.
func (r *run) slot() int { return r.cfg.Size + bth.GRHLen }

// initNode is init_node and post_recvs: the node's CQ (2 × -C entries), its
// UD QP (-C sends and receives, no send signaled unless asked), its
// buffers and its -C receives, all before the peer learns the QP.
func (r *run) initNode(n *node, local netip.Addr) error {
	n.sgid, _ = r.env.Dev.GIDIndex(local)
	n.cq = r.env.Dev.CreateCQ(max(2*r.count, 2))
	wrs := uint32(max(r.count, 1))
	qc := cm.QPConfig{PD: r.pd, Init: transport.QPInitAttr{SendCQ: n.cq, RecvCQ: n.cq,
		Cap: transport.QPCap{MaxSendWR: wrs, MaxRecvWR: wrs, MaxSendSGE: 1, MaxRecvSGE: 1}},
		Prepare: func(q *transport.QP) error { return r.prepare(n, q) }}
	q, err := r.env.CM.CreateUDQP(qc)
	if err != nil {
		r.env.Dev.DestroyCQ(n.cq)
		fmt.Fprintf(r.env.Stderr, "udaddy: unable to create QP: %v\n", err)
		return err
	}
	n.q = q
	r.all = append(r.all, n)
	return nil
}

// prepare is create_message and post_recvs.
func (r *run) prepare(n *node, q *transport.QP) error {
	if r.count == 0 {
		return nil
	}
	var err error
	if n.recv, err = r.pd.Register(make([]byte, r.count*r.slot()), transport.LocalWrite); err != nil {
		r.printf("failed to reg MR")
		return err
	}
	if n.send, err = r.pd.Register(make([]byte, r.cfg.Size), 0); err != nil {
		r.printf("failed to reg MR")
		return err
	}
	for i := range r.count {
		if err := q.PostRecv(&transport.RecvWR{WRID: uint64(i), SGL: []transport.SGE{n.recv.SGE(i*r.slot(), r.slot())}}); err != nil {
			r.printf("failed to post receives: %v", err)
			return err
		}
	}
	return nil
}

// postSends is post_sends: -C SENDs with immediate of -S bytes, the
// immediate this side's QPN, to the node's peer.
func (r *run) postSends(n *node, flags transport.SendFlags) error {
	for range r.count {
		err := n.q.PostSend(&transport.SendWR{WRID: uint64(n.id), Opcode: transport.WRSendWithImm, Flags: flags,
			Imm: n.q.QPN(), SGL: []transport.SGE{n.send.SGE(0, r.cfg.Size)},
			AH: n.ah, RemoteQPN: n.remoteQPN, RemoteQKey: n.remoteQKey})
		if err != nil {
			r.printf("failed to post sends: %v", err)
			return err
		}
	}
	return nil
}

// server is run_server: listen, accept -c requests, receive, reply.
func (r *run) server(ctx context.Context) int {
	r.printf("udaddy: starting server")
	bind, err := r.cfg.ListenAddr(r.env.Dev, r.cfg.Port)
	if err != nil {
		return r.perror("udaddy: bind address failed", err)
	}
	l, err := r.env.CM.ListenUD(bind, max(r.cfg.Connections, 1))
	if err != nil {
		return r.perror("udaddy: bind address failed", err)
	}
	defer l.Close()
	if r.env.Listening != nil {
		r.env.Listening(l.Addr())
	}
	// connect_events: until -c requests are answered or one fails (its
	// failure ends the events; run_server goes on regardless).
	for left := r.cfg.Connections; left > 0; left-- {
		req, err := l.Accept(ctx)
		if err != nil {
			return r.perror("udaddy: failure in rdma_get_cm_event in connect events", err)
		}
		if !r.connectHandler(req) {
			break
		}
	}
	// udaddy keeps its listening ID to the end; a request past -c would
	// be refused ("failing connection request"). roced stops listening:
	// a later request is answered "unsupported".
	l.Close()
	if r.count == 0 {
		return 0
	}
	r.printf("receiving data transfers")
	if err := r.poll(ctx, transport.OpRecv); err != nil {
		return r.perror("udaddy: failed polling CQ", err)
	}
	r.printf("sending replies")
	for _, n := range r.nodes {
		if r.postSends(n, transport.Signaled) != nil {
			return statusFail
		}
	}
	if err := r.poll(ctx, transport.OpSend); err != nil {
		return r.perror("udaddy: failed polling CQ", err)
	}
	r.printf("data transfers complete")
	return 0
}

// connectHandler is connect_handler: a QP for the request, its receives
// posted, then the request accepted with the QP's number; on a failure
// the request is rejected and false returned.
func (r *run) connectHandler(req *cm.SIDRRequest) bool {
	n := &node{id: len(r.nodes)}
	err := r.verify()
	if err == nil {
		err = r.initNode(n, req.LocalAddr().Addr())
	}
	if err == nil {
		if err = req.Accept(n.q, nil); err != nil {
			r.perror("udaddy: failure accepting", err)
		}
	}
	if err != nil {
		r.printf("udaddy: failing connection request")
		req.Reject(mad.SIDRReject, nil)
		return false
	}
	r.nodes = append(r.nodes, n)
	return true
}

// client is run_client: resolve -c services at once, send, receive the
// replies.
func (r *run) client(ctx context.Context) int {
	r.printf("udaddy: starting client")
	r.printf("udaddy: connecting")
	laddr, err := r.cfg.LocalAddr(r.env.Dev)
	if err != nil {
		return r.perror("udaddy: failure getting addr", err)
	}
	// route_handler checks the size before it makes anything: the first
	// route's failure ends the events.
	if r.verify() != nil {
		return statusInvalid
	}
	raddr := netip.AddrPortFrom(r.cfg.Addr, r.cfg.Port)
	local := laddr.Addr()
	if !local.IsValid() {
		g, _ := r.env.Dev.GID(r.env.Dev.DefaultGIDIndex())
		local = g.Addr()
	}
	type resolved struct {
		n   *node
		u   *cm.UDPeer
		err error
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan resolved, r.cfg.Connections)
	for i := range r.cfg.Connections {
		n := &node{id: i}
		if err := r.initNode(n, local); err != nil {
			return statusFail
		}
		go func() {
			// rdma_connect: the SIDR_REQ carries rdma_cm's header and no
			// private data (rdma_getaddrinfo gives none for IP addresses).
			// A server not listening yet is waited for (serverwait),
			// each service on its own, where udaddy would fail.
			u, err := serverwait.Retry(rctx, func(ctx context.Context) (*cm.UDPeer, error) {
				return r.env.CM.ResolveUD(ctx, laddr, raddr, nil)
			}, serverwait.NoListener)
			results <- resolved{n, u, err}
		}()
	}
	// connect_events stops at the first resolution that fails, with its
	// event's status; the others are abandoned.
	for range r.cfg.Connections {
		d := <-results
		if d.err == nil {
			d.err = r.resolvedHandler(d.n, d.u)
		}
		if d.err != nil {
			return r.connectFailed(d.err)
		}
		r.nodes = append(r.nodes, d.n)
	}
	if r.count == 0 {
		return 0
	}
	r.printf("initiating data transfers")
	for _, n := range r.nodes {
		// udaddy's client does not signal its sends, and never polls them.
		if r.postSends(n, 0) != nil {
			return statusFail
		}
	}
	r.printf("receiving data transfers")
	if err := r.poll(ctx, transport.OpRecv); err != nil {
		return r.perror("udaddy: failed polling CQ", err)
	}
	r.printf("data transfers complete")
	return 0
}

// errQKey is rdma_cm's refusal of a SIDR_REP whose Q_Key is not the one
// its UDP IDs use (cma.c's cma_set_qkey).
var errQKey = errors.New("the SIDR_REP's Q_Key is not rdma_cm's")

// resolvedHandler is resolved_handler: the peer's QPN and Q_Key, and an
// address handle to it.
func (r *run) resolvedHandler(n *node, u *cm.UDPeer) error {
	if u.QKey != cm.UDPQKey {
		return fmt.Errorf("%w: %#x", errQKey, u.QKey)
	}
	ah, err := r.env.Dev.CreateAH(r.pd, u.AH)
	if err != nil {
		r.printf("udaddy: failure creating address handle")
		return err
	}
	n.ah, n.remoteQPN, n.remoteQKey = ah, u.QPN, u.QKey
	return nil
}

// connectFailed prints what udaddy prints when a resolution fails and
// returns the status it ends with: the error event with its status (a
// SIDR_REP's status other than success, or -ETIMEDOUT when the SIDR_REQ
// went unanswered, both RDMA_CM_EVENT_UNREACHABLE; a foreign Q_Key is
// RDMA_CM_EVENT_ADDR_ERROR, -EINVAL).
func (r *run) connectFailed(err error) int {
	var se *cm.SIDRError
	event, status := "", 0
	switch {
	case errors.As(err, &se):
		event, status = "RDMA_CM_EVENT_UNREACHABLE", int(se.Status)
	case errors.Is(err, cm.ErrTimeout):
		event, status = "RDMA_CM_EVENT_UNREACHABLE", statusTimedOut
	case errors.Is(err, errQKey):
		fmt.Fprintf(r.env.Stderr, "roced udaddy: %v\n", err)
		event, status = "RDMA_CM_EVENT_ADDR_ERROR", statusInvalid
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return r.perror("udaddy: failure in rdma_get_cm_event in connect events", err)
	default:
		return r.perror("udaddy: failure connecting", err)
	}
	r.printf("udaddy: event: %s, error: %d", event, status)
	return status
}

// poll is poll_cqs: for each node in turn it takes completions until it
// has -C of op. udaddy counts whatever it polls; roced wants each to be a
// success of op (a receive of -S bytes with immediate). The server's
// first receive on a node names the client's address and QP (the GRH and
// the immediate): its replies go there, with the server's own Q_Key.
func (r *run) poll(ctx context.Context, op transport.WCOpcode) error {
	wc := make([]transport.WC, pollBatch)
	for _, n := range r.nodes {
		cnt := &n.recvd
		if op == transport.OpSend {
			cnt = &n.sent
		}
		for *cnt < r.count {
			if err := n.cq.Wait(ctx); err != nil {
				return err
			}
			k, err := n.cq.Poll(wc)
			if err != nil {
				return err
			}
			for _, w := range wc[:k] {
				if err := r.check(n, &w, op, *cnt); err != nil {
					return err
				}
				*cnt++
				if op == transport.OpRecv && n.ah == nil {
					if err := r.replyAH(n, &w); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// check says what is wrong with completion w, the i-th of op on node n.
func (r *run) check(n *node, w *transport.WC, op transport.WCOpcode, i int) error {
	what := "send"
	if op == transport.OpRecv {
		what = "receive"
	}
	switch {
	case i >= r.count:
		return fmt.Errorf("QP %d: a %s completion more than the %d posted", n.id, what, r.count)
	case w.Status != transport.Success:
		return fmt.Errorf("QP %d: %s completion %d of %d: %v", n.id, what, i+1, r.count, w.Status)
	case w.Opcode != op:
		return fmt.Errorf("QP %d: a %v completion, want %v", n.id, w.Opcode, op)
	case op == transport.OpRecv && int(w.ByteLen) != r.slot():
		return fmt.Errorf("QP %d: received %d bytes, want %d", n.id, int(w.ByteLen)-bth.GRHLen, r.cfg.Size)
	case op == transport.OpRecv && w.Flags&transport.WithImm == 0:
		return fmt.Errorf("QP %d: a message without immediate data", n.id)
	}
	return nil
}

// replyAH is create_reply_ah: the address handle back to the sender of
// receive w (from the GRH of its slot), the sender's QPN from the
// immediate, and this side's own Q_Key.
func (r *run) replyAH(n *node, w *transport.WC) error {
	off := int(w.WRID) * r.slot()
	attr, err := transport.AHAttrFromWC(w, n.recv.Bytes()[off:off+bth.GRHLen], n.sgid)
	if err == nil {
		n.ah, err = r.env.Dev.CreateAH(r.pd, attr)
	}
	if err != nil {
		return fmt.Errorf("QP %d: no address handle to the sender: %w", n.id, err)
	}
	a, _ := n.q.Query()
	n.remoteQPN, n.remoteQKey = w.ImmData, a.QKey
	return nil
}

// cleanup is destroy_nodes.
func (r *run) cleanup() {
	for _, n := range r.all {
		if n.ah != nil {
			n.ah.Destroy()
		}
		r.env.Dev.DestroyQP(n.q)
		r.env.Dev.DestroyCQ(n.cq)
	}
}
