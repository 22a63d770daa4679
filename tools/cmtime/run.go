package cmtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/tools/internal/serverwait"
	"github.com/goroce/goroce/transport"
)

// Env is what a run needs besides its flags.
type Env struct {
	Dev    *transport.Device // the device
	CM     *cm.Manager       // its connection manager
	Stdout io.Writer         // cmtime's printf lines: its progress, its tables
	Stderr io.Writer         // its perror lines, and roced's own
	// Listen opens rdma-core 56's out-of-band TCP socket on a server
	// (nil: package net's); tests give an in-memory one.
	Listen func(network, address string) (net.Listener, error)
	// Dial connects a client's out-of-band socket (nil: package net's).
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Listening, if set, is called once the server listens (its RDMA CM
	// port and its TCP socket): a caller that runs the client next starts
	// it on this event.
	Listening func(netip.AddrPort)
}

// exitFailure is cmtime's exit(EXIT_FAILURE).
const exitFailure = 1

// conn is one connection of a test, cmtime's struct node.
type conn struct {
	t    times
	q    *transport.QP // the QP the client made (nil: none, or the CM's)
	c    *cm.Conn
	fail error
}

type run struct {
	cfg Config
	env Env
	clk clock

	out sync.Mutex // stdout, written from the connections' goroutines

	pd *transport.PD
	cq *transport.CQ

	// One test's state (reset).
	mu     sync.Mutex
	total  times
	conns  []conn
	curQPN uint32 // cmtime's cur_qpn: 0 while the test makes QPs
	delay  time.Duration
	// The server's: connection requests and disconnections seen.
	reqs, discs int
	// v56 is set once a server knows its client speaks 56 (its socket
	// came first); allocated once it said "Allocating verbs resources".
	v56, allocated bool
}

// Run is cmtime's main after the flags: it runs the server (no -s) or
// the client in the version of cmtime the peer speaks, prints what cmtime
// prints and returns its exit status.
func Run(ctx context.Context, cfg Config, env Env) int {
	r := &run{cfg: cfg, env: env, clk: newClock(), delay: time.Duration(cfg.MimicDelay) * time.Microsecond}
	if r.env.Listen == nil {
		r.env.Listen = net.Listen
	}
	if r.env.Dial == nil {
		var d net.Dialer
		r.env.Dial = d.DialContext
	}
	if cfg.Socket {
		r.curQPN = 1 // -S: cmtime's table then says cm_conn
		if cfg.IsServer() {
			return r.sockServer(ctx)
		}
		return r.sockClient(ctx)
	}
	if cfg.IsServer() {
		return r.server(ctx)
	}
	return r.client(ctx)
}

func (r *run) printf(format string, a ...any) {
	r.out.Lock()
	defer r.out.Unlock()
	fmt.Fprintf(r.env.Stdout, format+"\n", a...)
}

// perror prints what perror(what) prints for err and returns cmtime's
// exit status for it.
func (r *run) perror(what string, err error) int {
	r.out.Lock()
	defer r.out.Unlock()
	fmt.Fprintf(r.env.Stderr, "%s: %v\n", what, err)
	return exitFailure
}

// say is roced's own line on stderr.
func (r *run) say(format string, a ...any) {
	r.out.Lock()
	defer r.out.Unlock()
	fmt.Fprintf(r.env.Stderr, "roced cmtime: "+format+"\n", a...)
}

// Timestamps. start/end mark the whole step, startC/endC one connection's.
func (r *run) start(s step) { r.mu.Lock(); r.total[s][0] = r.clk.now(); r.mu.Unlock() }
func (r *run) end(s step)   { r.mu.Lock(); r.total[s][1] = r.clk.now(); r.mu.Unlock() }
func (r *run) startC(i int, s step) {
	r.mu.Lock()
	r.conns[i].t[s][0] = r.clk.now()
	r.mu.Unlock()
}
func (r *run) endC(i int, s step) {
	r.mu.Lock()
	r.conns[i].t[s][1] = r.clk.now()
	r.mu.Unlock()
}

// each runs f for every connection on the work queue's -n threads and
// returns once all are done, as cmtime queues a step's work and waits
// for its completed count.
func (r *run) each(n int, f func(i int)) {
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(r.cfg.Threads, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				f(i)
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
}

// verbs is open_verbs: the protection domain and the CQ every QP shares.
func (r *run) verbs() {
	if r.pd == nil {
		r.pd, r.cq = r.env.Dev.AllocPD(), r.env.Dev.CreateCQ(1)
	}
}

// qpInit is cmtime's QP: RC, one work request of one SGE each way, every
// send signalled, on the shared CQ.
func (r *run) qpInit() transport.QPInitAttr {
	return transport.QPInitAttr{Type: transport.RC, SendCQ: r.cq, RecvCQ: r.cq, SigAll: true,
		Cap: transport.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
}

// timed is one step for every connection on the work queue's threads,
// each connection's verb f timed, and the whole step; it returns the
// first error, which cmtime would exit on.
func (r *run) timed(n int, s step, f func(i int) error) error {
	var first error
	r.start(s)
	r.each(n, func(i int) {
		r.startC(i, s)
		err := f(i)
		r.endC(i, s)
		r.mu.Lock()
		defer r.mu.Unlock()
		if err != nil && first == nil {
			first = err
		}
	})
	r.end(s)
	return first
}

// reset starts a test of n connections (reset_test, less its sync).
func (r *run) reset(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total = times{}
	r.conns = make([]conn, n)
	r.reqs, r.discs = 0, 0
}

// qps reports whether the test makes real QPs (cur_qpn 0).
func (r *run) qps() bool { return r.curQPN == 0 }

// perConn returns the connections' spans.
func (r *run) perConn() []times {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := make([]times, len(r.conns))
	for i, c := range r.conns {
		t[i] = c.t
	}
	return t
}

// rounds runs 56's three tests (run_client, run_server): a warm-up with
// one connection, -c connections with QPs (or simulated ones, -m), -c
// without; the last two print their table.
func (r *run) rounds(test func(n int) int, warmup, qpTest, simTest, noQPTest string) int {
	n := r.cfg.Connections
	r.printf("%s", warmup)
	if ret := test(1); ret != 0 {
		return ret
	}
	if !r.cfg.Mimic {
		r.printf(qpTest, n)
	} else {
		r.printf(simTest, n, r.cfg.MimicDelay)
		r.curQPN = r.cfg.BaseQPN
	}
	if ret := test(n); ret != 0 {
		return ret
	}
	r.report()
	r.printf(noQPTest, n)
	r.curQPN, r.delay = r.cfg.BaseQPN, 0
	if ret := test(n); ret != 0 {
		return ret
	}
	r.report()
	return 0
}

func (r *run) report() {
	r.out.Lock()
	defer r.out.Unlock()
	report56(r.env.Stdout, r.qps(), r.cfg.Threads, r.total, r.perConn())
}

// oob is 56's out-of-band socket: one byte each way per sync.
type oob struct{ c net.Conn }

// sendRecv is oob_sendrecv (the client's side of a sync): send val, read
// it back.
func (o oob) sendRecv(val byte) error {
	if _, err := o.c.Write([]byte{val}); err != nil {
		return err
	}
	return o.expect(val)
}

// recvSend is oob_recvsend (the server's side): read val, send it back.
func (o oob) recvSend(val byte) error {
	if err := o.expect(val); err != nil {
		return err
	}
	_, err := o.c.Write([]byte{val})
	return err
}

func (o oob) expect(val byte) error {
	b := make([]byte, 1)
	if _, err := io.ReadFull(o.c, b); err != nil {
		return fmt.Errorf("the out-of-band socket: %w", err)
	}
	if b[0] != val {
		return fmt.Errorf("the out-of-band socket: got sync %d, want %d: the peer is at another step", b[0], val)
	}
	return nil
}

// ---- the client ----

func (r *run) client(ctx context.Context) int {
	if r.cfg.Bind.IsValid() {
		if _, ok := r.env.Dev.GIDIndex(r.cfg.Bind); !ok {
			return r.perror("rdma_getaddrinfo", fmt.Errorf("%v is none of the device's addresses", r.cfg.Bind))
		}
	}
	hostport := net.JoinHostPort(r.cfg.Addr.String(), strconv.Itoa(int(r.cfg.Port)))
	v := r.cfg.Version
	var sock net.Conn
	if v != V44 {
		var err error
		dial := func(ctx context.Context) (net.Conn, error) { return r.env.Dial(ctx, "tcp", hostport) }
		if v == V56 {
			// 56's server listens on its socket before anything else: a
			// refusal means it does not run yet, and it is waited for
			// (serverwait). Under auto a refusal is how a 44 server is
			// told apart, so it is taken at once.
			sock, err = serverwait.Retry(ctx, dial, serverwait.Refused)
		} else {
			sock, err = dial(ctx)
		}
		switch {
		case err == nil:
			defer sock.Close()
			// A signal ends a wait for the server's sync too.
			defer context.AfterFunc(ctx, func() { sock.Close() })()
			v = V56
		case v == Auto && errors.Is(err, syscall.ECONNREFUSED):
			if r.cfg.only56 != "" {
				r.say("nothing listens on TCP %s: the server is rdma-core 44's cmtime, which has no %s", hostport, r.cfg.only56)
				return exitFailure
			}
			v = V44
		default:
			r.say("the out-of-band TCP socket to %s: %v", hostport, err)
			return exitFailure
		}
	}
	if v == V44 {
		return r.legacyClient(ctx)
	}
	o := oob{sock}
	return r.rounds(func(n int) int { return r.clientTest(ctx, o, n) },
		"Client warmup", "Connect (%d) QPs test", "Connect (%d) simulated QPs test (delay %d us)",
		"Connect (%d) test - no QPs")
}

// syncFail ends a run whose out-of-band sync failed.
func (r *run) syncFail(err error) int {
	r.say("%v", err)
	return exitFailure
}

// clientTest is 56's client_connect: n connections made step by step,
// the server told when all are connected and when all are disconnected.
func (r *run) clientTest(ctx context.Context, o oob, n int) int {
	r.reset(n)
	if err := o.sendRecv(0); err != nil {
		return r.syncFail(err)
	}
	r.start(stepFullConnect)
	// rdma_create_id: goroce's CM has no ID apart from the connection
	// Dial makes; the step is not timed.
	r.printf("\tCreating IDs")
	for i := range n {
		r.startC(i, stepFullConnect)
	}
	if r.cfg.Bind.IsValid() {
		r.printf("\tBinding addresses")
		if err := r.bind(n); err != nil {
			return r.perror("rdma_bind_addr", err)
		}
	}
	// Address and route resolution: roced's routes are the kernel's
	// (its UDP socket); there is nothing to resolve or time.
	r.printf("\tResolving addresses")
	r.printf("\tResolving routes")
	r.printf("\tCreating QPs")
	err := r.timed(n, stepCreateQP, func(i int) error {
		r.mu.Lock()
		first := r.pd == nil
		r.verbs()
		r.mu.Unlock()
		if first {
			r.printf("\tAllocating verbs resources")
		}
		if !r.qps() {
			time.Sleep(r.delay) // cmtime's mimic: the delay for the verb
			return nil
		}
		q, err := r.env.Dev.CreateQP(r.pd, r.qpInit())
		r.mu.Lock()
		r.conns[i].q = q
		r.mu.Unlock()
		return err
	})
	if err != nil {
		return r.perror("ibv_create_qp", err)
	}
	r.printf("\tModify QPs to INIT")
	err = r.timed(n, stepInitQP, func(i int) error {
		q := r.conns[i].q
		if q == nil {
			time.Sleep(r.delay)
			return nil
		}
		return q.Modify(&transport.QPAttr{State: transport.Init, PortNum: 1, AccessFlags: transport.RemoteRead | transport.RemoteWrite},
			transport.AttrState|transport.AttrPKeyIndex|transport.AttrPort|transport.AttrAccessFlags)
	})
	if err != nil {
		return r.perror("ibv_modify_qp", err)
	}

	r.printf("\tConnecting")
	// rdma_connect for each at once; RTR, RTS and the RTU (cmtime's
	// connect_response) are Dial's, timed within cm connect.
	r.start(stepConnect)
	if ret := r.dialAll(ctx, n, cm.ConnParams{ResponderResources: 1, InitiatorDepth: 1}, true); ret != 0 {
		return ret
	}
	r.end(stepConnect)
	r.end(stepFullConnect)
	if err := o.sendRecv(byte(stepConnect)); err != nil {
		return r.syncFail(err)
	}

	r.printf("\tDisconnecting")
	r.start(stepDisconnect)
	r.each(n, func(i int) {
		r.startC(i, stepDisconnect)
		r.conns[i].c.Close()
		r.endC(i, stepDisconnect)
	})
	r.end(stepDisconnect)
	if err := o.sendRecv(byte(stepDisconnect)); err != nil {
		return r.syncFail(err)
	}
	// The DREPs (or the DREQs' last retries) before the QPs go: not
	// timed, cmtime does not wait for them.
	if err := r.waitEnded(ctx); err != nil {
		return r.syncFail(err)
	}
	r.printf("\tDestroying QPs")
	r.destroyQPs(n)
	r.printf("\tDestroying IDs")
	return 0
}

// bind is the bind addr step, one connection after the other as cmtime
// binds its IDs: goroce has no ID to bind, it checks that -b is one of
// the device's addresses, as rdma_bind_addr would.
func (r *run) bind(n int) error {
	r.start(stepBind)
	defer r.end(stepBind)
	for i := range n {
		r.startC(i, stepBind)
		if _, ok := r.env.Dev.GIDIndex(r.cfg.Bind); !ok {
			return fmt.Errorf("%v is none of the device's addresses", r.cfg.Bind)
		}
		r.endC(i, stepBind)
	}
	return nil
}

// dialAll connects every connection at once and waits for all; each one's
// cm connect (and for 56 its full connect) ends with its Dial. A failure
// prints cmtime's event line; 56 ends the test at the first.
func (r *run) dialAll(ctx context.Context, n int, p cm.ConnParams, v56 bool) int {
	laddr := netip.AddrPort{}
	if r.cfg.Bind.IsValid() {
		laddr = netip.AddrPortFrom(r.cfg.Bind, 0)
	}
	raddr := netip.AddrPortFrom(r.cfg.Addr, r.cfg.Port)
	r.mu.Lock()
	r.verbs()
	r.mu.Unlock()
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, n)
	for i := range n {
		qc := cm.QPConfig{PD: r.pd, Init: r.qpInit(), QP: r.conns[i].q}
		r.startC(i, stepConnect)
		go func() {
			c, err := r.env.CM.Dial(dctx, laddr, raddr, qc, p)
			r.endC(i, stepConnect)
			if v56 {
				r.endC(i, stepFullConnect)
			}
			r.mu.Lock()
			r.conns[i].c, r.conns[i].fail = c, err
			r.mu.Unlock()
			errs <- err
		}()
	}
	ret := 0
	for range n {
		err := <-errs
		if err == nil || (v56 && ret != 0) {
			continue
		}
		// 56 exits at the first; 44 prints each and goes on.
		ret = r.connectFailed(err)
		if v56 {
			cancel()
		}
	}
	return ret
}

// connectFailed prints cmtime's line for a connection's error event.
func (r *run) connectFailed(err error) int {
	var rej *cm.RejectError
	switch {
	case errors.As(err, &rej):
		r.printf("event: RDMA_CM_EVENT_REJECTED, error: %d", rej.Reason)
	case errors.Is(err, cm.ErrTimeout):
		r.printf("event: RDMA_CM_EVENT_UNREACHABLE, error: %d", -110)
	default:
		return r.perror("rdma_connect", err)
	}
	return exitFailure
}

// waitEnded waits until every connection of the test has ended.
func (r *run) waitEnded(ctx context.Context) error {
	for _, c := range r.conns {
		if c.c == nil {
			continue
		}
		select {
		case <-c.c.Done():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// destroyQPs is destroy_qps: each connection's QP (the client's own, or
// the one goroce's CM made where cmtime has none), timed one by one.
func (r *run) destroyQPs(n int) {
	r.start(stepDestroyQP)
	for i := range n {
		r.startC(i, stepDestroyQP)
		if c := r.conns[i].c; c != nil {
			r.env.Dev.DestroyQP(c.QP())
		} else if q := r.conns[i].q; q != nil {
			r.env.Dev.DestroyQP(q)
		}
		r.endC(i, stepDestroyQP)
	}
	r.end(stepDestroyQP)
}

// legacyClient is rdma-core 44's run_client: the steps one after the
// other for all connections, no socket, one table.
func (r *run) legacyClient(ctx context.Context) int {
	n := r.cfg.Connections
	r.reset(n)
	r.printf("creating id")
	if r.cfg.Bind.IsValid() {
		r.printf("binding source address")
		if err := r.bind(n); err != nil {
			return r.perror("failure bind addr", err)
		}
	}
	r.printf("resolving address")
	r.printf("resolving route")
	r.printf("creating qp")
	r.verbs()
	r.start(stepCreateQP)
	for i := range n {
		r.startC(i, stepCreateQP)
		q, err := r.env.Dev.CreateQP(r.pd, r.qpInit())
		if err != nil {
			return r.perror("failure creating qp", err)
		}
		r.conns[i].q = q
		r.endC(i, stepCreateQP)
	}
	r.end(stepCreateQP)
	r.printf("connecting")
	r.start(stepConnect)
	// 44's conn_param: one READ each way, retry count -r.
	ret := r.dialAll(ctx, n, cm.ConnParams{ResponderResources: 1, InitiatorDepth: 1, RetryCount: uint8(min(r.cfg.Retries, 7))}, false)
	r.end(stepConnect)
	r.printf("disconnecting")
	r.start(stepDisconnect)
	var wg sync.WaitGroup
	for i := range n {
		c := r.conns[i].c
		if c == nil {
			continue
		}
		r.startC(i, stepDisconnect)
		c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			// 44 counts a disconnection at its DISCONNECTED event: the
			// DREP, or the DREQ's last retry.
			select {
			case <-c.Done():
				r.endC(i, stepDisconnect)
			case <-ctx.Done():
			}
		}()
	}
	wg.Wait()
	r.end(stepDisconnect)
	for i := range n {
		if c := r.conns[i].c; c != nil {
			r.env.Dev.DestroyQP(c.QP())
		} else if q := r.conns[i].q; q != nil && r.conns[i].fail == nil {
			r.env.Dev.DestroyQP(q)
		}
	}
	// rdma_destroy_id: nothing of goroce's to destroy; not timed.
	r.printf("destroying id")
	r.out.Lock()
	report44(r.env.Stdout, r.cfg.Bind.IsValid(), r.total, r.perConn())
	r.out.Unlock()
	if ctx.Err() != nil {
		return exitFailure
	}
	return ret
}

// ---- the server ----

func (r *run) server(ctx context.Context) int {
	bind := netip.IPv4Unspecified()
	if r.cfg.Bind.IsValid() {
		bind = r.cfg.Bind
		if _, ok := r.env.Dev.GIDIndex(bind); !ok && !bind.IsUnspecified() {
			return r.perror("rdma_bind_addr", fmt.Errorf("Cannot assign requested address (%v is none of the device's addresses)", bind))
		}
	}
	r.verbs()
	// rdma_accept's conn_param (56: one READ each way; 44 passes none and
	// takes the REQ's). 56 sets retry and RNR retry counts 0, which
	// goroce's CM reads as 7.
	params := cm.ConnParams{ResponderResources: 1, InitiatorDepth: 1}
	if r.cfg.Version == V44 {
		params = cm.ConnParams{}
	}
	qc := cm.QPConfig{PD: r.pd, Init: r.qpInit(), Prepare: func(*transport.QP) error {
		r.request()
		return nil
	}}
	l, err := r.env.CM.Listen(netip.AddrPortFrom(bind, r.cfg.Port), cm.ListenConfig{QP: qc, Params: params,
		Backlog: max(r.cfg.Connections, 16)})
	if err != nil {
		return r.perror("rdma_listen", err)
	}
	defer l.Close()
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	accepted := make(chan *cm.Conn)
	go func() {
		for {
			c, err := l.Accept(actx)
			if err != nil {
				return
			}
			select {
			case accepted <- c:
			case <-actx.Done():
				c.Close()
				return
			}
		}
	}()
	var socks chan net.Conn
	var tl net.Listener
	if r.cfg.Version != V44 {
		tl, err = r.env.Listen("tcp4", net.JoinHostPort(r.tcpBind(), strconv.Itoa(int(r.cfg.Port))))
		if err != nil {
			return r.perror("oob_server_setup", err)
		}
		defer tl.Close()
		socks = make(chan net.Conn, 1)
		go func() {
			if s, err := tl.Accept(); err == nil {
				socks <- s
			}
		}()
	}
	if r.env.Listening != nil {
		r.env.Listening(l.Addr())
	}
	select {
	case s := <-socks:
		tl.Close()
		defer context.AfterFunc(ctx, func() { s.Close() })()
		r.mu.Lock()
		r.v56 = true
		r.mu.Unlock()
		defer s.Close()
		return r.rounds(func(n int) int { return r.serverTest(ctx, oob{s}, accepted, n) },
			"Server warmup", "Accept (%d) QPs test", "Accept (%d) simulated QPs test (delay %d us)",
			"Accept (%d) test - no QPs")
	case c := <-accepted:
		if r.cfg.Version == V56 {
			c.Close()
			r.say("an RDMA CM connection came before the out-of-band socket: the client is no rdma-core 56 cmtime")
			return exitFailure
		}
		if tl != nil {
			tl.Close()
		}
		return r.legacyServer(ctx, c, accepted)
	case <-ctx.Done():
		return 0
	}
}

// tcpBind is the TCP socket's address: -b, or every address.
func (r *run) tcpBind() string {
	if r.cfg.Bind.IsValid() && r.cfg.Bind.Is4() {
		return r.cfg.Bind.String()
	}
	return "0.0.0.0"
}

// request is a connection request reaching the server (56's
// RDMA_CM_EVENT_CONNECT_REQUEST): the first of a test starts its cm
// connect step. goroce's CM calls it with the connection's QP in RTS,
// just before its REP goes.
func (r *run) request() {
	r.mu.Lock()
	first := r.reqs == 0 && r.v56
	r.reqs++
	alloc := first && !r.allocated
	if first {
		r.total[stepConnect][0] = r.clk.now()
		r.allocated = true
	}
	r.mu.Unlock()
	if first {
		r.printf("\tAccepting")
	}
	if alloc {
		// cmtime opens its PD and CQ with the first QP; roced's exist
		// since it listens, the line is printed where cmtime prints it.
		r.printf("\tAllocating verbs resources")
	}
}

// serverTest is 56's server_connect: accept n connections, tell the
// client when all are established, disconnect each as the client does,
// tell the client, destroy.
func (r *run) serverTest(ctx context.Context, o oob, accepted <-chan *cm.Conn, n int) int {
	r.reset(n)
	if err := o.recvSend(0); err != nil {
		return r.syncFail(err)
	}
	for i := range n {
		select {
		case c := <-accepted:
			r.mu.Lock()
			r.conns[i].c = c
			r.mu.Unlock()
		case <-ctx.Done():
			return exitFailure
		}
	}
	r.end(stepConnect)
	if err := o.recvSend(byte(stepConnect)); err != nil {
		return r.syncFail(err)
	}
	// The client's DREQs: goroce's CM answers each with its DREP as it
	// comes, and the connection ends (RDMA_CM_EVENT_DISCONNECTED);
	// cmtime's rdma_disconnect then has nothing left to do, nor has
	// roced's Close, but both are timed.
	var wg sync.WaitGroup
	for i := range n {
		c := r.conns[i].c
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-c.Done():
			case <-ctx.Done():
				return
			}
			r.mu.Lock()
			first := r.discs == 0
			r.discs++
			if first {
				r.total[stepDisconnect][0] = r.clk.now()
			}
			r.mu.Unlock()
			if first {
				r.printf("\tDisconnecting")
			}
			r.startC(i, stepDisconnect)
			c.Close()
			r.endC(i, stepDisconnect)
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return exitFailure
	}
	r.end(stepDisconnect)
	if err := o.recvSend(byte(stepDisconnect)); err != nil {
		return r.syncFail(err)
	}
	r.destroyQPs(n)
	return 0
}

// legacyServer is rdma-core 44's run_server: accept whatever comes,
// destroy each connection once the client has disconnected it, print
// nothing, until killed.
func (r *run) legacyServer(ctx context.Context, first *cm.Conn, accepted <-chan *cm.Conn) int {
	var wg sync.WaitGroup
	serve := func(c *cm.Conn) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-c.Done():
			case <-ctx.Done():
				c.Close()
				<-c.Done()
			}
			r.env.Dev.DestroyQP(c.QP())
		}()
	}
	serve(first)
	for {
		select {
		case c := <-accepted:
			serve(c)
		case <-ctx.Done():
			wg.Wait()
			return 0
		}
	}
}
