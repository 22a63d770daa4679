package rping

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/tools/internal/serverwait"
	"github.com/goroce/goroce/transport"
)

// Env is where a run happens: the device, its connection manager, the
// local address, and the tool's standard output and error.
type Env struct {
	Dev    *transport.Device // the device
	CM     *cm.Manager       // its connection manager
	Local  netip.Addr        // the address the device serves
	Stdout io.Writer         // the ping data (-v) and debug lines (-d)
	Stderr io.Writer         // the events and errors, as rping prints them
	// Listening, if set, is called once a server listens: a caller that
	// runs the client next starts it on this event, not after a guess.
	Listening func(netip.AddrPort)
}

// infoLen is sizeof(struct rping_rdma_info): be64 buf, be32 rkey, be32 size.
const infoLen = 16

// sqDepth is RPING_SQ_DEPTH.
const sqDepth = 16

// Exit statuses: rping returns its ret, -1 on most failures (255 to the
// shell), and exits with -1 from its CM thread on a rejection or an
// unreachable peer.
const (
	exitOK   = 0
	exitFail = 255
)

// run is one rping process.
type run struct {
	cfg  Config
	env  Env
	pd   *transport.PD
	cq   *transport.CQ
	conn *cm.Conn
	recv *transport.MR // recv_buf
	send *transport.MR // send_buf
	rdma *transport.MR // rdma_buf: the sink (client) or the READ target (server)
	strt *transport.MR // start_buf: the client's ping
	wc   []transport.WC
	ctx  context.Context // ends when the connection does
}

// errDisconnected is a wait ended by the peer's disconnection.
var errDisconnected = errors.New("disconnected")

// Run is rping's main after the flags: it serves one client (-s) or pings
// a server (-c), prints what rping prints, and returns rping's exit status.
func Run(ctx context.Context, cfg Config, env Env) int {
	r := &run{cfg: cfg, env: env, wc: make([]transport.WC, 1)}
	r.pd = env.Dev.AllocPD()
	r.cq = env.Dev.CreateCQ(2 * sqDepth)
	var err error
	reg := func(n int, a transport.Access) *transport.MR {
		if err != nil {
			return nil
		}
		var m *transport.MR
		m, err = r.pd.Register(make([]byte, n), a)
		return m
	}
	r.recv = reg(infoLen, transport.LocalWrite)
	r.send = reg(infoLen, 0)
	r.rdma = reg(cfg.Size, transport.LocalWrite|transport.RemoteRead|transport.RemoteWrite)
	if !cfg.Server {
		r.strt = reg(cfg.Size, transport.LocalWrite|transport.RemoteRead|transport.RemoteWrite)
	}
	if err != nil {
		r.errorf("rping_setup_buffers failed: %v", err)
		return exitFail
	}
	if cfg.Server {
		return r.server(ctx)
	}
	return r.client(ctx)
}

func (r *run) debugf(format string, a ...any) {
	if r.cfg.Debug {
		fmt.Fprintf(r.env.Stdout, format+"\n", a...)
	}
}

func (r *run) errorf(format string, a ...any) { fmt.Fprintf(r.env.Stderr, format+"\n", a...) }

// qpConfig is rping_create_qp's: RC, 16 sends, 2 receives, one SGE each;
// the first receive is posted before the peer learns the QP, as rping
// posts it before rdma_accept or rdma_connect.
func (r *run) qpConfig() cm.QPConfig {
	return cm.QPConfig{PD: r.pd, Init: transport.QPInitAttr{SendCQ: r.cq, RecvCQ: r.cq,
		Cap: transport.QPCap{MaxSendWR: sqDepth, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}},
		Prepare: r.postRecv}
}

// params is rping_init_conn_param's.
var params = cm.ConnParams{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}

// watch makes r.ctx, which ends when the connection does.
func (r *run) watch(ctx context.Context) func() {
	c, cancel := context.WithCancel(ctx)
	r.ctx = c
	go func() {
		select {
		case <-r.conn.Done():
			cancel()
		case <-c.Done():
		}
	}()
	return cancel
}

// next returns the next completion that is neither a SEND's nor flushed,
// as rping's CQ thread handles them; errDisconnected when the connection
// ended first.
func (r *run) next(ctx context.Context) (transport.WC, error) {
	for {
		_, err := r.cq.PollWait(r.ctx, r.wc)
		if err != nil {
			select {
			case <-r.conn.Done():
				return transport.WC{}, errDisconnected
			default:
			}
			return transport.WC{}, err
		}
		wc := r.wc[0]
		switch {
		case wc.Status == transport.WRFlushErr:
			continue
		case wc.Status != transport.Success:
			r.errorf("cq completion failed status %d", wc.Status)
			return wc, errors.New("completion error")
		case wc.Opcode == transport.OpSend:
			r.debugf("send completion")
			continue
		}
		return wc, nil
	}
}

// wait returns the next completion, which must be of opcode op; a RECV is
// checked for its 16 bytes and the receive posted again.
func (r *run) wait(ctx context.Context, op transport.WCOpcode) (transport.WC, error) {
	wc, err := r.next(ctx)
	if err != nil {
		return wc, err
	}
	if wc.Opcode != op {
		return wc, fmt.Errorf("unexpected %v completion", wc.Opcode)
	}
	if op == transport.OpRecv {
		r.debugf("recv completion")
		if wc.ByteLen != infoLen {
			r.errorf("Received bogus data, size %d", wc.ByteLen)
			return wc, errors.New("bogus data")
		}
		if err := r.postRecv(r.conn.QP()); err != nil {
			r.errorf("post recv error: %v", err)
			return wc, err
		}
	}
	return wc, nil
}

func (r *run) postRecv(q *transport.QP) error {
	return q.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{r.recv.SGE(0, infoLen)}})
}

// postInfo sends {addr, rkey, size} of m (rping_format_send and the post).
func (r *run) postInfo(m *transport.MR) error {
	b := r.send.Bytes()
	binary.BigEndian.PutUint64(b, m.Addr())
	binary.BigEndian.PutUint32(b[8:], m.RKey())
	binary.BigEndian.PutUint32(b[12:], uint32(r.cfg.Size))
	r.debugf("RDMA addr %x rkey %x len %d", m.Addr(), m.RKey(), r.cfg.Size)
	return r.postSend()
}

// postSend sends send_buf as it stands (the server's go-ahead: zeros).
func (r *run) postSend() error {
	return r.conn.QP().PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRSend, Flags: transport.Signaled,
		SGL: []transport.SGE{r.send.SGE(0, infoLen)}})
}

// cString returns b up to its first NUL, as printf's %s reads it.
func cString(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

// server is rping_run_server: bind, listen, accept one client, serve it
// until it disconnects.
func (r *run) server(ctx context.Context) int {
	bind := netip.AddrPortFrom(r.cfg.Addr, r.cfg.Port)
	if !r.cfg.Addr.IsValid() {
		bind = netip.AddrPortFrom(netip.IPv4Unspecified(), r.cfg.Port)
	}
	l, err := r.env.CM.Listen(bind, cm.ListenConfig{QP: r.qpConfig(), Params: params, Backlog: 3})
	if err != nil {
		r.errorf("rdma_bind_addr: %v", err)
		return exitFail
	}
	r.debugf("rdma_listen")
	if r.env.Listening != nil {
		r.env.Listening(l.Addr())
	}
	r.conn, err = l.Accept(ctx)
	l.Close()
	if err != nil {
		r.errorf("wait for CONNECT_REQUEST state %d", stateError)
		return exitFail
	}
	r.debugf("accepting client connection request")
	defer r.watch(ctx)()
	r.debugf("ESTABLISHED")
	err = r.serve(ctx)
	if errors.Is(err, errDisconnected) {
		return exitOK
	}
	if err != nil {
		r.errorf("rping server failed: -1")
		r.conn.Close()
		return exitFail
	}
	return exitOK
}

// rping.c's test_state values that its messages print.
const (
	stateDisconnected = 10
	stateError        = 11
)

// disconnected prints what rping's server prints when its client goes.
func (r *run) disconnected(what string) error {
	r.errorf("server DISCONNECT EVENT...")
	r.errorf("wait for %s state %d", what, stateDisconnected)
	return errDisconnected
}

// serve is rping_test_server.
func (r *run) serve(ctx context.Context) error {
	q := r.conn.QP()
	buf := r.rdma.Bytes()
	for {
		wc, err := r.wait(ctx, transport.OpRecv)
		if errors.Is(err, errDisconnected) {
			return r.disconnected("RDMA_READ_ADV")
		}
		if err != nil {
			return err
		}
		_ = wc
		info := r.recv.Bytes()
		addr, rkey, n := binary.BigEndian.Uint64(info), binary.BigEndian.Uint32(info[8:]), binary.BigEndian.Uint32(info[12:])
		r.debugf("Received rkey %x addr %x len %d from peer", rkey, addr, n)
		r.debugf("server received sink adv")
		if int(n) > len(buf) {
			r.errorf("post send error %d", 22)
			return errors.New("too long")
		}
		if err := q.PostSend(&transport.SendWR{WRID: 3, Opcode: transport.WRRDMARead, Flags: transport.Signaled,
			SGL: []transport.SGE{r.rdma.SGE(0, int(n))}, RemoteAddr: addr, RKey: rkey}); err != nil {
			r.errorf("post send error %v", err)
			return err
		}
		r.debugf("server posted rdma read req ")
		if _, err := r.wait(ctx, transport.OpRDMARead); err != nil {
			if errors.Is(err, errDisconnected) {
				return r.disconnected("RDMA_READ_COMPLETE")
			}
			return err
		}
		r.debugf("server received read complete")
		if r.cfg.Verbose {
			fmt.Fprintf(r.env.Stdout, "server ping data: %s\n", cString(buf))
		}
		if err := r.postSend(); err != nil {
			r.errorf("post send error %v", err)
			return err
		}
		r.debugf("server posted go ahead")
		if _, err := r.wait(ctx, transport.OpRecv); err != nil {
			if errors.Is(err, errDisconnected) {
				return r.disconnected("RDMA_WRITE_ADV")
			}
			return err
		}
		info = r.recv.Bytes()
		addr, rkey = binary.BigEndian.Uint64(info), binary.BigEndian.Uint32(info[8:])
		r.debugf("server received sink adv")
		wlen := len(cString(buf)) + 1
		wlen = min(wlen, len(buf))
		r.debugf("rdma write from lkey %x laddr %x len %d", r.rdma.LKey(), r.rdma.Addr(), wlen)
		if err := q.PostSend(&transport.SendWR{WRID: 4, Opcode: transport.WRRDMAWrite, Flags: transport.Signaled,
			SGL: []transport.SGE{r.rdma.SGE(0, wlen)}, RemoteAddr: addr, RKey: rkey}); err != nil {
			r.errorf("post send error %v", err)
			return err
		}
		if _, err := r.wait(ctx, transport.OpRDMAWrite); err != nil {
			if errors.Is(err, errDisconnected) {
				return r.disconnected("RDMA_WRITE_COMPLETE")
			}
			return err
		}
		r.debugf("server rdma write complete ")
		if err := r.postSend(); err != nil {
			r.errorf("post send error %v", err)
			return err
		}
		r.debugf("server posted go ahead")
	}
}

// client is rping_run_client: connect, ping Count times, disconnect.
func (r *run) client(ctx context.Context) int {
	raddr := netip.AddrPortFrom(r.cfg.Addr, r.cfg.Port)
	laddr := netip.AddrPortFrom(r.env.Local, 0)
	var err error
	// A server not listening yet is waited for (serverwait), where rping
	// would report the REJ at once.
	r.conn, err = serverwait.Retry(ctx, func(ctx context.Context) (*cm.Conn, error) {
		return r.env.CM.Dial(ctx, laddr, raddr, r.qpConfig(), params)
	}, serverwait.NoListener)
	var rej *cm.RejectError
	switch {
	case errors.As(err, &rej):
		r.errorf("cma event RDMA_CM_EVENT_REJECTED, error %d", rej.Reason)
		return exitFail
	case errors.Is(err, cm.ErrTimeout):
		r.errorf("cma event RDMA_CM_EVENT_UNREACHABLE, error -110")
		return exitFail
	case err != nil:
		r.errorf("rdma_connect: %v", err)
		r.errorf("connect error -1")
		return exitFail
	}
	r.debugf("ESTABLISHED")
	r.debugf("rdma_connect successful")
	defer r.watch(ctx)()
	code := exitOK
	if err := r.ping(ctx); err != nil {
		if errors.Is(err, errDisconnected) {
			r.errorf("client DISCONNECT EVENT...")
			return exitOK
		}
		r.errorf("rping client failed: -1")
		code = exitFail
	}
	r.conn.Close()
	select {
	case <-r.conn.Done():
		r.errorf("client DISCONNECT EVENT...")
	case <-ctx.Done():
	}
	return code
}

// ping is rping_test_client.
func (r *run) ping(ctx context.Context) error {
	start := byte(65)
	sb, rb := r.strt.Bytes(), r.rdma.Bytes()
	for ping := 0; r.cfg.Count == 0 || ping < r.cfg.Count; ping++ {
		cc := copy(sb, fmt.Sprintf("rdma-ping-%d: ", ping))
		c := start
		for i := cc; i < len(sb); i++ {
			sb[i] = c
			if c++; c > 122 {
				c = 65
			}
		}
		if start++; start > 122 {
			start = 65
		}
		sb[len(sb)-1] = 0
		if err := r.postInfo(r.strt); err != nil {
			r.errorf("post send error %v", err)
			return err
		}
		if _, err := r.wait(ctx, transport.OpRecv); err != nil {
			return err
		}
		if err := r.postInfo(r.rdma); err != nil {
			r.errorf("post send error %v", err)
			return err
		}
		if _, err := r.wait(ctx, transport.OpRecv); err != nil {
			return err
		}
		if r.cfg.Validate && !bytes.Equal(sb, rb) {
			r.errorf("data mismatch!")
			return errors.New("data mismatch")
		}
		if r.cfg.Verbose {
			fmt.Fprintf(r.env.Stdout, "ping data: %s\n", cString(rb))
		}
	}
	return nil
}
