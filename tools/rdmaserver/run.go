package rdmaserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/tools/internal/serverwait"
	"github.com/goroce/goroce/transport"
)

// Env is what a run needs besides its flags.
type Env struct {
	Dev    *transport.Device // the device
	CM     *cm.Manager       // its connection manager
	Stdout io.Writer         // "NAME: start", "NAME: end STATUS"
	Stderr io.Writer         // perror's lines
	// Listening, if set, is called once the server listens: a caller
	// that runs the client next starts it on this event.
	Listening func(netip.AddrPort)
}

// disconnectWait bounds the wait for the peer's DREP at the end.
// rdma_disconnect returns at once and the kernel's CM answers what comes
// after the program exits; roced's CM ends with the process, so it waits
// this long for the DREP to be polite to the peer, then exits anyway.
const disconnectWait = 3 * time.Second

// Run is the example's main after the flags: it prints "NAME: start",
// runs the exchange, prints "NAME: end STATUS" and returns the exit
// status (the examples return run()'s status: 0, or -1, 255 to a shell).
func Run(ctx context.Context, cfg Config, env Env) int {
	fmt.Fprintf(env.Stdout, "%s: start\n", cfg.Name())
	r := &run{cfg: cfg, env: env}
	ret := 0
	if err := r.run(ctx); err != nil {
		ret = -1
	}
	fmt.Fprintf(env.Stdout, "%s: end %d\n", cfg.Name(), ret)
	return ret & 0xff
}

type run struct {
	cfg        Config
	env        Env
	scq, rcq   *transport.CQ // the send and the receive queue's
	recv, send *transport.MR
	conn       *cm.Conn
}

// perror prints what the example's perror(what) prints for err.
func (r *run) perror(what string, err error) error {
	fmt.Fprintf(r.env.Stderr, "%s: %v\n", what, err)
	return err
}

func (r *run) run(ctx context.Context) error {
	pd := r.env.Dev.AllocPD()
	// A CQ for each queue, as rdma_create_ep makes for an endpoint
	// without its own (ucma_create_cqs), so that rdma_get_send_comp and
	// rdma_get_recv_comp each wait on their own: the peer's reply may
	// complete the receive before our SEND's ACK completes the send.
	// sq_sig_all: every send completes.
	r.scq, r.rcq = r.env.Dev.CreateCQ(1), r.env.Dev.CreateCQ(1)
	defer r.env.Dev.DestroyCQ(r.rcq)
	defer r.env.Dev.DestroyCQ(r.scq)
	var err error
	if r.recv, err = pd.Register(make([]byte, MsgLen), transport.LocalWrite); err != nil {
		return r.perror("rdma_reg_msgs for recv_msg", err)
	}
	if r.send, err = pd.Register(make([]byte, MsgLen), 0); err != nil {
		return r.perror("rdma_reg_msgs for send_msg", err)
	}
	qc := cm.QPConfig{PD: pd, Init: transport.QPInitAttr{SendCQ: r.scq, RecvCQ: r.rcq, SigAll: true,
		Cap: transport.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: MsgLen}},
		// rdma_post_recv comes before rdma_accept and rdma_connect.
		Prepare: func(q *transport.QP) error {
			return q.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{r.recv.SGE(0, MsgLen)}})
		}}
	if r.cfg.Server {
		err = r.server(ctx, qc)
	} else {
		err = r.client(ctx, qc)
	}
	if r.conn != nil {
		dctx, cancel := context.WithTimeout(ctx, disconnectWait)
		r.conn.Disconnect(dctx)
		cancel()
		r.env.Dev.DestroyQP(r.conn.QP())
	}
	return err
}

// server: listen on -s's address or any, take one connection, receive 16 bytes,
// send 16 back.
func (r *run) server(ctx context.Context, qc cm.QPConfig) error {
	bind := netip.AddrPortFrom(netip.IPv4Unspecified(), r.cfg.Port)
	if r.cfg.Addr.IsValid() {
		bind = netip.AddrPortFrom(r.cfg.Addr, r.cfg.Port)
	}
	delay := r.cfg.AcceptDelay
	l, err := r.env.CM.Listen(bind, cm.ListenConfig{QP: qc, DeferAccept: delay > 0})
	if err != nil {
		return r.perror("rdma_listen", err)
	}
	// The listening ID lives to the end, as rdma_server's listen_id does.
	defer l.Close()
	if r.env.Listening != nil {
		r.env.Listening(l.Addr())
	}
	if delay > 0 {
		// --accept-delay: rdma_get_request, a pause, then rdma_accept; the
		// connection manager sends the client an MRA meanwhile.
		req, err := l.Request(ctx)
		if err != nil {
			return r.perror("rdma_get_request", err)
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			req.Reject(nil)
			return r.perror("rdma_accept", ctx.Err())
		}
		if r.conn, err = req.Accept(qc, cm.ConnParams{}); err != nil {
			return r.perror("rdma_accept", err)
		}
	} else if r.conn, err = l.Accept(ctx); err != nil {
		return r.perror("rdma_get_request", err)
	}
	if err := r.complete(ctx, transport.OpRecv, "rdma_get_recv_comp"); err != nil {
		return err
	}
	if err := r.postSend(); err != nil {
		return err
	}
	err = r.complete(ctx, transport.OpSend, "rdma_get_send_comp")
	if errors.Is(err, errFlushedByPeer) {
		// The client disconnects once this SEND has come (or it failed),
		// and may do so before its ACK left: rxe completes the receive
		// before its responder acknowledges, and rdma_disconnect then
		// puts the QP in ERR. rdma_server does not look at the status.
		fmt.Fprintf(r.env.Stderr, "roced rdma_server: the client disconnected before acknowledging the SEND (flushed); rdma_server does not check\n")
		return nil
	}
	return err
}

// errFlushedByPeer is a SEND flushed because the peer disconnected.
var errFlushedByPeer = errors.New("flushed: the peer disconnected")

// client: connect, send 16 bytes, receive 16 back.
func (r *run) client(ctx context.Context, qc cm.QPConfig) error {
	var err error
	// A server not listening yet is waited for (serverwait), where
	// rdma_connect would fail at once.
	r.conn, err = serverwait.Retry(ctx, func(ctx context.Context) (*cm.Conn, error) {
		return r.env.CM.Dial(ctx, netip.AddrPort{}, netip.AddrPortFrom(r.cfg.Addr, r.cfg.Port), qc, cm.ConnParams{})
	}, serverwait.NoListener)
	if err != nil {
		return r.perror("rdma_connect", connectErr(err))
	}
	if err := r.postSend(); err != nil {
		return err
	}
	sendErr := r.complete(ctx, transport.OpSend, "rdma_get_send_comp")
	if sendErr != nil && !errors.Is(sendErr, errFlushedByPeer) {
		return sendErr
	}
	if err := r.complete(ctx, transport.OpRecv, "rdma_get_recv_comp"); err != nil {
		return err
	}
	if sendErr != nil {
		// The server replies only to what it received, so its reply
		// proves our SEND arrived; its ACK did not come before the server
		// disconnected, which flushed the SEND. rdma_client does not look
		// at the status.
		fmt.Fprintf(r.env.Stderr, "roced rdma_client: the server disconnected before acknowledging the SEND (flushed); its reply shows it arrived, and rdma_client does not check\n")
	}
	return nil
}

// connectErr is what librdmacm's rdma_connect leaves in errno: a REJ is
// ECONNREFUSED whatever its reason, a connection that got no answer
// ETIMEDOUT. The cause goes with it.
func connectErr(err error) error {
	var rej *cm.RejectError
	switch {
	case errors.As(err, &rej):
		return fmt.Errorf("Connection refused (%v)", err)
	case errors.Is(err, cm.ErrTimeout):
		return fmt.Errorf("Connection timed out (%v)", err)
	}
	return err
}

func (r *run) postSend() error {
	err := r.conn.QP().PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRSend, Flags: transport.Inline,
		SGL: []transport.SGE{r.send.SGE(0, MsgLen)}})
	if err != nil {
		return r.perror("rdma_post_send", err)
	}
	return nil
}

// complete waits for the next completion of op's queue (a SEND's or a
// RECV's), which must be a successful one of opcode op. The examples do not look at the status (rdma_get_*_comp
// returns the polled count); roced fails on a bad one instead of going on
// as if the message had come, and on the end of the connection.
func (r *run) complete(ctx context.Context, op transport.WCOpcode, what string) error {
	wc := make([]transport.WC, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-r.conn.Done():
			cancel()
		case <-wctx.Done():
		}
	}()
	c := r.scq
	if op == transport.OpRecv {
		c = r.rcq
	}
	if _, err := c.PollWait(wctx, wc); err != nil {
		// The end of the connection moved the QP to ERR before Done was
		// closed: a completion (a flush, or one that came just before the
		// DREQ) is in the CQ by now if there is one.
		if n, _ := c.Poll(wc); n == 0 {
			if cerr := r.conn.Err(); cerr != nil {
				err = fmt.Errorf("the connection ended: %v", cerr)
			} else if ctx.Err() == nil {
				err = errors.New("the peer disconnected")
			}
			return r.perror(what, err)
		}
	}
	switch w := wc[0]; {
	case w.Status == transport.WRFlushErr && op == transport.OpSend && errors.Is(r.conn.Err(), cm.ErrDisconnected):
		return errFlushedByPeer
	case w.Status != transport.Success:
		return r.perror(what, fmt.Errorf("completion status %v", w.Status))
	case w.Opcode != op:
		return r.perror(what, fmt.Errorf("a %v completion, want %v", w.Opcode, op))
	case op == transport.OpRecv && w.ByteLen != MsgLen:
		return r.perror(what, fmt.Errorf("%d bytes received, want %d", w.ByteLen, MsgLen))
	}
	return nil
}
