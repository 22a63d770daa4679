package ucmatose

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/tools/internal/serverwait"
	"github.com/goroce/goroce/transport"
)

// Env is what a run needs besides its flags.
type Env struct {
	Dev    *transport.Device // the device
	CM     *cm.Manager       // its connection manager
	Stdout io.Writer         // cmatose's printf lines: its progress, a connection's error event
	Stderr io.Writer         // its perror lines, and roced's own
	// Listening, if set, is called once the server listens: a caller
	// that runs the client next starts it on this event.
	Listening func(netip.AddrPort)
}

// Return statuses besides 0 and a REJ's reason.
const (
	// statusFail is what cmatose returns from a failed call (-1, 255 to
	// a shell).
	statusFail = -1
	// statusUnreachable is RDMA_CM_EVENT_UNREACHABLE's status when the
	// REQ got no answer: -ETIMEDOUT.
	statusUnreachable = -110
)

// disconnectWait bounds the wait for the peer's DREP when a run ends on a
// failure. cmatose then destroys its IDs and the kernel's CM answers what
// comes after it exits; roced's CM ends with the process, so it waits this
// long to be polite to the peer, then exits anyway.
const disconnectWait = 3 * time.Second

// pollBatch is how many completions cmatose's poll_cqs takes at once.
const pollBatch = 8

// node is one connection, cmatose's struct cmatest_node.
type node struct {
	id             int
	conn           *cm.Conn
	qpn            uint32
	sendCQ, recvCQ *transport.CQ
	// send and recv are the messages' buffers. cmatose sends from and
	// receives into one; their contents are never looked at, so roced
	// keeps two and a SEND's retransmission never reads bytes a receive
	// is writing.
	send, recv  *transport.MR
	sent, recvd int // successful send and receive completions
}

type run struct {
	cfg   Config
	env   Env
	count int // messages each way on each connection
	pd    *transport.PD
	cqs   []*transport.CQ
	nodes []*node // the connections established, in order

	mu      sync.Mutex
	byQPN   map[uint32]*node // the server's nodes, made as each REQ comes
	prepErr error            // the first a server's Prepare met

	flushed int // client SENDs flushed by the server's disconnection
}

// Run is cmatose's main after the flags: it runs the server (no -s) or
// the client, prints what cmatose prints, and returns its exit status
// (cmatose returns its ret: 0, a REJ's reason, -110 or -1).
func Run(ctx context.Context, cfg Config, env Env) int {
	r := &run{cfg: cfg, env: env, count: cfg.Count, byQPN: map[uint32]*node{}}
	// create_message zeroes message_count when message_size is 0, as the
	// first connection is set up.
	if cfg.Size == 0 && cfg.Connections > 0 {
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
	r.cleanup(ctx)
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

// cqe is cmatose's queue depth: the message count, at least 1.
func (r *run) cqe() int { return max(r.count, 1) }

// qpInit is init_node's QP: RC, -C sends and receives of one SGE, every
// send signaled (sq_sig_all).
func (r *run) qpInit(sendCQ, recvCQ *transport.CQ) transport.QPInitAttr {
	n := uint32(r.cqe())
	return transport.QPInitAttr{SendCQ: sendCQ, RecvCQ: recvCQ, SigAll: true,
		Cap: transport.QPCap{MaxSendWR: n, MaxRecvWR: n, MaxSendSGE: 1, MaxRecvSGE: 1}}
}

// prepare is create_message and post_recvs: the node's buffers, and its
// -C receives posted before the peer learns the QP (cmatose posts them
// before rdma_accept and rdma_connect), so no SEND meets an RNR NAK.
func (r *run) prepare(n *node, q *transport.QP) error {
	n.qpn = q.QPN()
	if r.count == 0 {
		return nil
	}
	var err error
	if n.recv, err = r.pd.Register(make([]byte, r.cfg.Size), transport.LocalWrite); err != nil {
		r.printf("failed to reg MR")
		return err
	}
	if n.send, err = r.pd.Register(make([]byte, r.cfg.Size), 0); err != nil {
		r.printf("failed to reg MR")
		return err
	}
	for range r.count {
		if err := q.PostRecv(&transport.RecvWR{WRID: uint64(n.qpn), SGL: []transport.SGE{n.recv.SGE(0, r.cfg.Size)}}); err != nil {
			r.printf("failed to post receives: %v", err)
			return err
		}
	}
	return nil
}

// postSends is post_sends: -C SENDs of -S bytes.
func (r *run) postSends(n *node) error {
	for range r.count {
		err := n.conn.QP().PostSend(&transport.SendWR{WRID: uint64(n.id), Opcode: transport.WRSend,
			SGL: []transport.SGE{n.send.SGE(0, r.cfg.Size)}})
		if err != nil {
			r.printf("failed to post sends: %v", err)
			return err
		}
	}
	return nil
}

// server is run_server: listen, accept -c connections, send, receive,
// disconnect.
func (r *run) server(ctx context.Context) int {
	r.printf("cmatose: starting server")
	bind, err := r.cfg.ListenAddr(r.env.Dev, r.cfg.Port)
	if err != nil {
		return r.perror("cmatose: bind address failed", err)
	}
	// cmatose makes a send and a receive CQ for each connection; a
	// listener takes one QPConfig for all its connections, so here they
	// share one pair, deep enough for all. The wire is the same.
	conns := max(r.cfg.Connections, 1)
	sendCQ, recvCQ := r.env.Dev.CreateCQ(conns*r.cqe()), r.env.Dev.CreateCQ(conns*r.cqe())
	r.cqs = append(r.cqs, sendCQ, recvCQ)
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	qc := cm.QPConfig{PD: r.pd, Init: r.qpInit(sendCQ, recvCQ),
		// connect_handler: init_node and post_recvs, then rdma_accept;
		// a failure rejects the request and ends the server.
		Prepare: func(q *transport.QP) error {
			n := &node{sendCQ: sendCQ, recvCQ: recvCQ}
			err := r.prepare(n, q)
			r.mu.Lock()
			defer r.mu.Unlock()
			if err != nil {
				r.printf("cmatose: failing connection request")
				if r.prepErr == nil {
					r.prepErr = err
				}
				cancel()
				return err
			}
			r.byQPN[n.qpn] = n
			return nil
		}}
	// rdma_accept(id, NULL): the responder resources and initiator depth
	// the REQ asked for, retry and RNR retry counts 7. The backlog takes
	// every connection of -c at once (cmatose's rdma_listen(id, 0) is the
	// kernel's default backlog, 1024).
	l, err := r.env.CM.Listen(bind, cm.ListenConfig{QP: qc, Backlog: conns,
		Params: cm.ConnParams{RetryCount: 7, RNRRetryCount: 7}})
	if err != nil {
		return r.perror("cmatose: bind address failed", err)
	}
	// cmatose keeps listening to the end and rejects a request past -c
	// (reason 28); roced's listener would accept one itself, so it stops
	// listening once -c are in: a later REQ is refused all the same.
	defer l.Close()
	if r.env.Listening != nil {
		r.env.Listening(l.Addr())
	}
	for len(r.nodes) < r.cfg.Connections {
		conn, err := l.Accept(actx)
		if err != nil {
			r.mu.Lock()
			perr := r.prepErr
			r.mu.Unlock()
			if perr != nil {
				return statusFail
			}
			return r.perror("cmatose: failure in rdma_get_cm_event in connect events", err)
		}
		r.mu.Lock()
		n := r.byQPN[conn.QP().QPN()]
		r.mu.Unlock()
		if n == nil { // Prepare runs before the REP goes: cannot be
			conn.Close()
			return r.perror("cmatose: failure accepting", fmt.Errorf("QP %#x was never prepared", conn.QP().QPN()))
		}
		n.id, n.conn = len(r.nodes), conn
		r.nodes = append(r.nodes, n)
	}
	l.Close()

	if r.count > 0 {
		r.printf("initiating data transfers")
		for _, n := range r.nodes {
			if r.postSends(n) != nil {
				return statusFail
			}
		}
		r.printf("completing sends")
		if err := r.poll(ctx, sendCQ, r.nodes, transport.OpSend); err != nil {
			return r.perror("cmatose: failed polling CQ", err)
		}
		r.printf("receiving data transfers")
		if err := r.poll(ctx, recvCQ, r.nodes, transport.OpRecv); err != nil {
			return r.perror("cmatose: failed polling CQ", err)
		}
		r.printf("data transfers complete")
	}
	if r.cfg.Migrate {
		r.migrate()
	}
	r.printf("cmatose: disconnecting")
	for _, n := range r.nodes {
		n.conn.Close()
	}
	ret := 0
	if err := r.waitEnded(ctx); err != nil {
		ret = r.perror("cmatose: failure in rdma_get_cm_event in disconnect events", err)
	}
	r.printf("disconnected")
	return ret
}

// migrate is migrate_channel: cmatose moves its IDs to a new event
// channel. roced's connections have no channel to move; the run goes on
// as cmatose's does after a successful move.
func (r *run) migrate() { r.printf("migrating to new event channel") }

// client is run_client: connect -c times at once, receive, reply, wait
// for the server to disconnect.
func (r *run) client(ctx context.Context) int {
	r.printf("cmatose: starting client")
	r.printf("cmatose: connecting")
	laddr, err := r.cfg.LocalAddr(r.env.Dev)
	if err != nil {
		return r.perror("cmatose: failure getting addr", err)
	}
	raddr := netip.AddrPortFrom(r.cfg.Addr, r.cfg.Port)
	// route_handler's conn_param: one READ each way, retry count 5, no
	// private data (rdma_getaddrinfo gives none for IP addresses). It
	// leaves rnr_retry_count 0; cm.ConnParams reads 0 as 7, so roced's
	// REQ asks for 7 RNR retries.
	params := cm.ConnParams{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 5}
	type dialed struct {
		n    *node
		conn *cm.Conn
		err  error
	}
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan dialed, r.cfg.Connections)
	all := make([]*node, r.cfg.Connections)
	for i := range all {
		// One send and one receive CQ per connection, as init_node makes.
		n := &node{id: i, sendCQ: r.env.Dev.CreateCQ(r.cqe()), recvCQ: r.env.Dev.CreateCQ(r.cqe())}
		r.cqs = append(r.cqs, n.sendCQ, n.recvCQ)
		all[i] = n
		qc := cm.QPConfig{PD: r.pd, Init: r.qpInit(n.sendCQ, n.recvCQ),
			Prepare: func(q *transport.QP) error { return r.prepare(n, q) }}
		go func() {
			// A server not listening yet is waited for (serverwait),
			// each connection on its own, where cmatose would fail.
			conn, err := serverwait.Retry(dctx, func(ctx context.Context) (*cm.Conn, error) {
				return r.env.CM.Dial(ctx, laddr, raddr, qc, params)
			}, serverwait.NoListener)
			results <- dialed{n, conn, err}
		}()
	}
	// connect_events stops at the first connection that fails, with its
	// event's status; the others are withdrawn.
	ret := 0
	for range all {
		d := <-results
		if d.err == nil {
			d.n.conn = d.conn
			continue
		}
		if errors.Is(d.err, cm.ErrDisconnected) && r.count == 0 {
			// Dial's error for a connection established and then
			// disconnected by the server before Dial returned: cmatose
			// takes ESTABLISHED, then DISCONNECTED, which with no
			// messages to move is the whole run. With messages to move,
			// the server going first is a failure.
			continue
		}
		if ret != 0 {
			continue
		}
		ret = r.connectFailed(d.err)
		cancel()
	}
	for _, n := range all {
		if n.conn != nil {
			r.nodes = append(r.nodes, n)
		}
	}
	if ret != 0 {
		return ret
	}

	if r.count > 0 {
		r.printf("receiving data transfers")
		for _, n := range r.nodes {
			if err := r.poll(ctx, n.recvCQ, []*node{n}, transport.OpRecv); err != nil {
				return r.perror("cmatose: failed polling CQ", err)
			}
		}
		r.printf("sending replies")
		for _, n := range r.nodes {
			if r.postSends(n) != nil {
				return statusFail
			}
		}
		// cmatose never polls its sends; roced waits for them, so that a
		// failed SEND fails the run.
		for _, n := range r.nodes {
			if err := r.poll(ctx, n.sendCQ, []*node{n}, transport.OpSend); err != nil {
				return r.perror("cmatose: failed polling CQ", err)
			}
		}
		if r.flushed > 0 {
			fmt.Fprintf(r.env.Stderr, "roced ucmatose: %d SENDs flushed: the server disconnected, having received them all, before their ACKs came; cmatose does not poll its sends\n", r.flushed)
		}
		r.printf("data transfers complete")
	}
	if r.cfg.Migrate {
		r.migrate()
	}
	// disconnect_events: the server disconnects each connection.
	if err := r.waitEnded(ctx); err != nil {
		return r.perror("cmatose: failure in rdma_get_cm_event in disconnect events", err)
	}
	return 0
}

// connectFailed prints what cmatose prints when a connection fails and
// returns the status it ends with: a connection's error event is printed
// with its status (a REJ's reason; -ETIMEDOUT when the REQ went
// unanswered); rdma_connect failing is perror'd.
func (r *run) connectFailed(err error) int {
	var rej *cm.RejectError
	switch {
	case errors.As(err, &rej):
		r.printf("cmatose: event: RDMA_CM_EVENT_REJECTED, error: %d", rej.Reason)
		return int(rej.Reason)
	case errors.Is(err, cm.ErrTimeout):
		r.printf("cmatose: event: RDMA_CM_EVENT_UNREACHABLE, error: %d", statusUnreachable)
		return statusUnreachable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return r.perror("cmatose: failure in rdma_get_cm_event in connect events", err)
	}
	return r.perror("cmatose: failure connecting", err)
}

// done returns the node's count of completions of op.
func (n *node) done(op transport.WCOpcode) *int {
	if op == transport.OpSend {
		return &n.sent
	}
	return &n.recvd
}

// poll is poll_cqs: it takes completions from c until each node has -C of
// opcode op. cmatose counts whatever it polls; roced wants each to be a
// success of op (a receive of -S bytes), and fails when a connection ends
// before its completions are all in. Completions of QPs not in nodes (a
// connection the server never accepted) are passed over.
func (r *run) poll(ctx context.Context, c *transport.CQ, nodes []*node, op transport.WCOpcode) error {
	what := "send"
	if op == transport.OpRecv {
		what = "receive"
	}
	byQPN := make(map[uint32]*node, len(nodes))
	var waiting []*node
	for _, n := range nodes {
		byQPN[n.qpn] = n
		if *n.done(op) < r.count {
			waiting = append(waiting, n)
		}
	}
	wc := make([]transport.WC, pollBatch)
	ended := make([]bool, len(waiting))
	var wctx context.Context
	stop := func() {}
	defer func() { stop() }()
	for len(waiting) > 0 {
		if wctx == nil {
			wctx, stop = untilEnded(ctx, waiting)
		}
		err := c.Wait(wctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				return err
			}
			// A connection ended: the others are watched anew below.
			stop()
			wctx = nil
		}
		// Which connections had ended before the CQ is drained: a
		// connection's end moves its QP to ERR, which puts its flushed
		// work requests in c, before Done closes, so the drain below
		// takes all of theirs. One that ends during the drain is
		// judged at the next pass, after another drain.
		ended = ended[:len(waiting)] // waiting only shrinks
		for i, n := range waiting {
			select {
			case <-n.conn.Done():
				ended[i] = true
			default:
				ended[i] = false
			}
		}
		for {
			k, err := c.Poll(wc)
			if err != nil {
				return err
			}
			if k == 0 {
				break
			}
			for _, w := range wc[:k] {
				n := byQPN[w.QPNum]
				if n == nil {
					continue
				}
				cnt := n.done(op)
				switch {
				case *cnt >= r.count:
					return fmt.Errorf("connection %d: a %s completion more than the %d posted", n.id, what, r.count)
				case w.Status == transport.WRFlushErr && op == transport.OpSend && !r.cfg.IsServer() &&
					errors.Is(n.conn.Err(), cm.ErrDisconnected):
					// The server disconnects once it has received every
					// message, and may do so before the ACK of the last
					// came back (rxe completes a receive before it
					// acknowledges): the SEND arrived.
					r.flushed++
				case w.Status != transport.Success:
					return fmt.Errorf("connection %d: %s completion %d of %d: %v", n.id, what, *cnt+1, r.count, w.Status)
				case w.Opcode != op:
					return fmt.Errorf("connection %d: a %v completion, want %v", n.id, w.Opcode, op)
				case op == transport.OpRecv && int(w.ByteLen) != r.cfg.Size:
					return fmt.Errorf("connection %d: received %d bytes, want %d", n.id, w.ByteLen, r.cfg.Size)
				}
				*cnt++
			}
		}
		still := waiting[:0]
		for i, n := range waiting {
			if *n.done(op) == r.count {
				continue
			}
			if ended[i] {
				return fmt.Errorf("connection %d ended after %d of %d %s completions: %v", n.id, *n.done(op), r.count, what, endReason(n.conn))
			}
			still = append(still, n)
		}
		waiting = still
	}
	return nil
}

// endReason says why a connection ended.
func endReason(c *cm.Conn) error {
	if err := c.Err(); err != nil && !errors.Is(err, cm.ErrDisconnected) {
		return err
	}
	return errors.New("the peer disconnected")
}

// untilEnded returns a context that ends with ctx or when any of the
// nodes' connections ends.
func untilEnded(ctx context.Context, nodes []*node) (context.Context, context.CancelFunc) {
	wctx, cancel := context.WithCancel(ctx)
	for _, n := range nodes {
		go func() {
			select {
			case <-n.conn.Done():
				cancel()
			case <-wctx.Done():
			}
		}()
	}
	return wctx, cancel
}

// waitEnded is disconnect_events: it waits until every connection has
// ended (the peer's DREQ, or the DREP to ours, or the DREQ's retries run
// out, each of which is RDMA_CM_EVENT_DISCONNECTED to cmatose).
func (r *run) waitEnded(ctx context.Context) error {
	for _, n := range r.nodes {
		select {
		case <-n.conn.Done():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// cleanup is destroy_nodes: a connection still up is disconnected (as
// rdma_destroy_id does), its QP and the CQs destroyed.
func (r *run) cleanup(ctx context.Context) {
	var open []*cm.Conn
	for _, n := range r.nodes {
		select {
		case <-n.conn.Done():
		default:
			n.conn.Close()
			open = append(open, n.conn)
		}
	}
	if len(open) > 0 {
		dctx, cancel := context.WithTimeout(ctx, disconnectWait)
		for _, c := range open {
			select {
			case <-c.Done():
			case <-dctx.Done():
			}
		}
		cancel()
	}
	for _, n := range r.nodes {
		r.env.Dev.DestroyQP(n.conn.QP())
	}
	for _, c := range r.cqs {
		// A QP the server never accepted may still hold the shared CQs;
		// the device's close takes them.
		r.env.Dev.DestroyCQ(c)
	}
}
