package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/tools/internal/serverwait"
	"github.com/goroce/goroce/transport"
)

// commRecvLen is how much one receive of the exchange takes. perftest
// posts sizeof(struct pingpong_dest) (post_one_recv_wqe), which holds
// every message of 6.06 and 6.24; roced takes up to the 320-byte
// negotiation struct as well, which a 6.28+ peer would send here.
const commRecvLen = NegotiateSize

// CommConn is perftest's data exchange over the RDMA CM (-R, and -z:
// create_comm_struct with use_rdma_cm): an RC connection of its own, one
// send and one receive deep, where each message of the exchange is one
// SEND (rdma_write_data, rdma_write_keys) and the receive is posted again
// once its message is taken (rdma_read_data). It is a net.Conn so that a
// Session runs over it unchanged: Write sends its bytes as one message,
// Read returns the received messages' bytes in order.
type CommConn struct {
	conn       *cm.Conn
	dev        *transport.Device
	pd         *transport.PD
	scq, rcq   *transport.CQ
	send, recv *transport.MR
	wc         []transport.WC
	pending    []byte // what is left of the last message received

	mu       sync.Mutex
	deadline time.Time
	changed  chan struct{} // closed and renewed when the deadline changes
	closed   chan struct{}
	once     sync.Once
}

// CommParams are the exchange connection's parameters (create_comm_struct
// copies retry_count and qp_timeout; rdma_client_connect and
// rdma_server_connect set rnr_retry_count 7 and the ACK timeout).
type CommParams struct {
	Retry     int // --retry_count
	QPTimeout int // -u: the QP's ACK timeout (RDMA_OPTION_ID_ACK_TIMEOUT)
}

func (p CommParams) conn() cm.ConnParams {
	return cm.ConnParams{RetryCount: uint8(p.Retry), RNRRetryCount: 7, ACKTimeout: uint8(p.QPTimeout)}
}

func newCommConn(dev *transport.Device) (*CommConn, error) {
	c := &CommConn{dev: dev, pd: dev.AllocPD(), scq: dev.CreateCQ(1), rcq: dev.CreateCQ(1),
		wc: make([]transport.WC, 1), changed: make(chan struct{}), closed: make(chan struct{})}
	var err error
	if c.send, err = c.pd.Register(make([]byte, commRecvLen), 0); err != nil {
		return nil, err
	}
	if c.recv, err = c.pd.Register(make([]byte, commRecvLen), transport.LocalWrite); err != nil {
		return nil, err
	}
	return c, nil
}

// qpConfig is the exchange QP (tx_depth and rx_depth 1, RC, SEND), whose
// first receive is posted before the peer learns it, as
// rdma_client_connect and rdma_server_connect post it (post_one_recv_wqe)
// before rdma_connect and rdma_accept.
func (c *CommConn) qpConfig() cm.QPConfig {
	return cm.QPConfig{PD: c.pd, Init: transport.QPInitAttr{SendCQ: c.scq, RecvCQ: c.rcq,
		Cap: transport.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}},
		Access: transport.RemoteWrite, Prepare: c.postRecv}
}

func (c *CommConn) postRecv(q *transport.QP) error {
	return q.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{c.recv.SGE(0, commRecvLen)}})
}

// AcceptComm is rdma_server_connect for the exchange: listen on port
// (the TCP port space, the port of -p), take one client, stop listening
// (rdma_destroy_id of the listening ID), so that the QPs' own listener
// can take the port next. listening, if set, is called once the listener
// is up.
func AcceptComm(ctx context.Context, m *cm.Manager, dev *transport.Device, port int, p CommParams, listening func()) (*CommConn, error) {
	c, err := newCommConn(dev)
	if err != nil {
		return nil, err
	}
	l, err := m.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(port)),
		cm.ListenConfig{QP: c.qpConfig(), Params: p.conn(), Backlog: 1})
	if err != nil {
		return nil, fmt.Errorf("rdma_listen failed: %w", err)
	}
	defer l.Close()
	if listening != nil {
		listening()
	}
	if c.conn, err = l.Accept(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// DialComm is rdma_client_connect for the exchange. establish_connection
// makes one attempt, so the server must be listening; roced retries a
// REJ 8 (nothing listens yet) for as long as serverwait allows
// (GOROCE_SERVER_WAIT), as its other clients do.
func DialComm(ctx context.Context, m *cm.Manager, dev *transport.Device, laddr netip.Addr, raddr netip.AddrPort, p CommParams) (*CommConn, error) {
	c, err := newCommConn(dev)
	if err != nil {
		return nil, err
	}
	c.conn, err = serverwait.Retry(ctx, func(ctx context.Context) (*cm.Conn, error) {
		return m.Dial(ctx, netip.AddrPortFrom(laddr, 0), raddr, c.qpConfig(), p.conn())
	}, serverwait.NoListener)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// CM returns the connection.
func (c *CommConn) CM() *cm.Conn { return c.conn }

// waitCtx is a context that ends at the deadline, on Close, when the
// connection ends or when the deadline changes (changed is then closed).
func (c *CommConn) waitCtx() (context.Context, context.CancelFunc, chan struct{}) {
	c.mu.Lock()
	d, ch := c.deadline, c.changed
	c.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	if !d.IsZero() {
		ctx, cancel = context.WithDeadline(context.Background(), d)
	}
	go func() {
		select {
		case <-ch:
		case <-c.closed:
		case <-c.conn.Done():
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx, cancel, ch
}

// next waits for one completion of q.
func (c *CommConn) next(q *transport.CQ) (transport.WC, error) {
	for {
		ctx, cancel, ch := c.waitCtx()
		n, err := q.PollWait(ctx, c.wc)
		cancel()
		if n > 0 {
			if c.wc[0].Status != transport.Success {
				select {
				case <-c.conn.Done():
					return c.wc[0], io.EOF // flushed by the disconnection
				default:
				}
				return c.wc[0], fmt.Errorf("Bad wc status %d (%v)", int(c.wc[0].Status), c.wc[0].Status)
			}
			return c.wc[0], nil
		}
		select {
		case <-c.closed:
			return transport.WC{}, net.ErrClosed
		default:
		}
		c.mu.Lock()
		d := c.deadline
		c.mu.Unlock()
		if !d.IsZero() && !time.Now().Before(d) {
			return transport.WC{}, os.ErrDeadlineExceeded
		}
		select {
		case <-c.conn.Done():
			return transport.WC{}, io.EOF
		case <-ch:
			continue // a new deadline: wait again under it
		default:
		}
		if err == nil {
			err = errors.New("perftest: exchange wait ended")
		}
		return transport.WC{}, err
	}
}

// Read returns the bytes of the messages received, in order.
func (c *CommConn) Read(p []byte) (int, error) {
	if len(c.pending) == 0 {
		wc, err := c.next(c.rcq)
		if err != nil {
			return 0, err
		}
		c.pending = append(c.pending[:0], c.recv.Bytes()[:wc.ByteLen]...)
		if err := c.postRecv(c.conn.QP()); err != nil {
			return 0, fmt.Errorf("Couldn't post recv: %w", err)
		}
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// Write sends b as one SEND and waits for its completion.
func (c *CommConn) Write(b []byte) (int, error) {
	if len(b) > commRecvLen {
		return 0, fmt.Errorf("perftest: %d-byte message, the exchange takes %d", len(b), commRecvLen)
	}
	copy(c.send.Bytes(), b)
	if err := c.conn.QP().PostSend(&transport.SendWR{WRID: 1, Opcode: transport.WRSend, Flags: transport.Signaled,
		SGL: []transport.SGE{c.send.SGE(0, len(b))}}); err != nil {
		return 0, fmt.Errorf("Function ibv_post_send failed: %w", err)
	}
	if _, err := c.next(c.scq); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Close disconnects (a DREQ, as destroying the connected ID sends one)
// without waiting for the peer's answer.
func (c *CommConn) Close() error {
	c.once.Do(func() {
		close(c.closed)
		if c.conn != nil {
			c.conn.Close()
		}
	})
	return nil
}

// Disconnect closes and waits until the peer answered the DREQ, or ctx
// ends.
func (c *CommConn) Disconnect(ctx context.Context) error {
	c.Close()
	select {
	case <-c.conn.Done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type cmAddr netip.AddrPort

func (a cmAddr) Network() string { return "rdma_cm" }
func (a cmAddr) String() string  { return netip.AddrPort(a).String() }

// LocalAddr is this side's address and port of the connection.
func (c *CommConn) LocalAddr() net.Addr { return cmAddr(c.conn.LocalAddr()) }

// RemoteAddr is the peer's address and port of the connection.
func (c *CommConn) RemoteAddr() net.Addr { return cmAddr(c.conn.RemoteAddr()) }

// SetDeadline bounds the Reads and Writes under way and to come.
func (c *CommConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline = t
	close(c.changed)
	c.changed = make(chan struct{})
	return nil
}

// SetReadDeadline is SetDeadline: one message is in flight at a time.
func (c *CommConn) SetReadDeadline(t time.Time) error { return c.SetDeadline(t) }

// SetWriteDeadline is SetDeadline: one message is in flight at a time.
func (c *CommConn) SetWriteDeadline(t time.Time) error { return c.SetDeadline(t) }
