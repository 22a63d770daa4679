package pingpong

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/endpoint"
	"github.com/goroce/goroce/nic/fault"
	"github.com/goroce/goroce/tools/internal/serverwait"
	"github.com/goroce/goroce/transport"
)

// ppListening is called once a server listens on port: the tests start
// their client then, where a person starts the real client after the
// server (a probe connection would take the server's only accept).
var ppListening = func(port int) {}

// errReported ends a run whose reason is already on stderr, in the tool's
// words; the exit status is 1, as the tools return 1 on every failure.
var errReported = errors.New("pingpong: failed")

// Main runs tool, one of rdma-core's four example programs, with the
// command line args (without the program's name), as roced's command of
// the tool's name does: the same flags, QP setup, TCP exchange and
// send/receive loop as the real program, goroce's engine in place of
// libibverbs. It prints on stdout and stderr what the real program prints
// (its usage text, address and result lines, its error messages; roced's
// own lines name the program "roced rc_pingpong" and so on) and returns
// its exit status: 0, or 1 on every failure, as the programs return.
//
// It blocks as the real program does (a server waits for its client, UC
// and UD wait for lost messages forever) until ctx ends. SIGINT and
// SIGTERM end the run too, through its context, so the pcap file (--pcap)
// is flushed and the link closed.
func Main(ctx context.Context, tool Tool, args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	argv0 := "roced " + tool.String()
	cfg, err := ParseFlags(tool, args)
	if err != nil {
		// ParseFlags says "ibv_rc_pingpong: usage: REASON" or
		// "ibv_rc_pingpong: REASON".
		msg := strings.TrimPrefix(err.Error(), tool.Binary()+": ")
		if errors.Is(err, ErrUsage) {
			// getopt's complaint on stderr, the usage text on stdout.
			fmt.Fprintf(stderr, "%s: %s\n", argv0, strings.TrimPrefix(msg, ErrUsage.Error()+": "))
			ppUsage(stdout, tool, argv0)
		} else {
			fmt.Fprintln(stderr, msg)
		}
		return 1
	}
	if cfg.Size > transport.MaxMsgSize {
		// Refused before a server waits for a client it could never serve.
		fmt.Fprintf(stderr, "%s: -s %d: larger than the largest message (%d bytes)\n", argv0, cfg.Size, transport.MaxMsgSize)
		return 1
	}
	r := &ppRun{cfg: cfg, stdout: stdout, stderr: stderr}
	err = r.run(ctx)
	r.close()
	if err != nil {
		if !errors.Is(err, errReported) {
			fmt.Fprintf(stderr, "%s: %v\n", argv0, err)
		}
		return 1
	}
	if cfg.IsServer() && cfg.Check {
		// -c's findings follow the result lines, and change nothing to
		// the exit status.
		for _, l := range r.checkBuffer() {
			fmt.Fprintln(stdout, l)
		}
	}
	return 0
}

// failf prints one of the tool's error lines and returns errReported.
func (r *ppRun) failf(format string, a ...any) error {
	fmt.Fprintf(r.stderr, format+"\n", a...)
	return errReported
}

// run is the tool's main(): checks, device, QPs, the exchange, the loop.
func (r *ppRun) run(ctx context.Context) error {
	cfg := &r.cfg
	if cfg.Tool == RC {
		odp := cfg.ODP || cfg.ImplicitOD // -O implies -o in the tool
		if odp && cfg.DM {
			return r.failf("DM memory region can't be on demand")
		}
		if !odp && cfg.Prefetch {
			return r.failf("prefetch is valid only with on-demand memory region")
		}
	}
	if err := r.open(); err != nil {
		return err
	}
	if err := r.initCtx(); err != nil {
		return err
	}
	if err := r.postRecvs(); err != nil {
		return err
	}
	if cfg.Events {
		r.cq.ReqNotify(false)
	}
	r.makeLocal()
	for _, d := range r.local {
		fmt.Fprintln(r.stdout, LocalAddressLine(cfg.Tool, d))
	}
	if err := r.exchange(ctx); err != nil {
		return err
	}
	for _, d := range r.remote {
		fmt.Fprintln(r.stdout, RemoteAddressLine(d))
	}
	if !cfg.IsServer() {
		if err := r.connect(r.remote); err != nil {
			return err
		}
	}
	if err := r.start(); err != nil {
		return err
	}
	begin := time.Now()
	if err := r.loop(ctx); err != nil {
		return err
	}
	for _, l := range ResultLines(cfg.Size, cfg.Iters, time.Since(begin)) {
		fmt.Fprintln(r.stdout, l)
	}
	return nil
}

// open opens the endpoint -d, -g and --link name. Where the real tool
// opens an IB device, roced opens a link and a goroce device over it.
func (r *ppRun) open() error {
	cfg := &r.cfg
	ep, err := endpoint.Open(endpoint.Config{Link: string(cfg.Link), Dev: cfg.Device,
		GID: cfg.GIDIndex, Peer: cfg.ServerName, Pcap: cfg.Pcap, Faults: cfg.Faults, FaultLog: r.stderr})
	switch {
	case err == nil:
	case errors.Is(err, endpoint.ErrGIDIndex):
		if cfg.Tool == UD || cfg.Tool == SRQ {
			return r.failf("Could not get local gid for gid index %d (%v)", cfg.GIDIndex, err)
		}
		return r.failf("can't read sgid of index %d (%v)", cfg.GIDIndex, err)
	case cfg.Device != "" && errors.Is(err, endpoint.ErrNoDevice):
		return r.failf("IB device %s not found (%v)", cfg.Device, err)
	case errors.Is(err, endpoint.ErrNoDevice):
		return r.failf("No IB devices found (%v)", err)
	default:
		// The device exists but cannot be opened (its address cannot be
		// bound, say): the tool's message for a failed ibv_open_device.
		return r.failf("Couldn't get context for %s (%v)", cfg.Device, err)
	}
	r.ep, r.dev = ep, ep.Device
	ep.WarnStats(r.stderr, "roced "+cfg.Tool.String())
	if cfg.IBPort != 1 {
		// The device has one port; the tool fails at its first modify.
		return r.failf("Failed to modify QP to INIT")
	}
	return nil
}

// exchange runs the TCP exchange of QP addresses; the server connects its
// QPs to the client's before it answers, as pp_server_exch_dest does.
func (r *ppRun) exchange(ctx context.Context) error {
	cfg := &r.cfg
	if !cfg.IsServer() {
		conn, err := Dial(ctx, cfg.ServerName, cfg.Port)
		if err != nil {
			return r.failf("Couldn't connect to %s:%d", cfg.ServerName, cfg.Port)
		}
		defer conn.Close()
		remote, err := Client(ctx, conn, cfg.Tool, r.local)
		if err != nil {
			fmt.Fprintf(r.stderr, "client read/write: %v\n", err)
			return r.failf("Couldn't read/write remote address")
		}
		r.remote = remote
		return nil
	}
	ln, err := Listen(ctx, cfg.Port)
	if err != nil {
		return r.failf("Couldn't listen to port %d (%v)", cfg.Port, err)
	}
	ppListening(cfg.Port)
	conn, err := AcceptOne(ctx, ln)
	if err != nil {
		return r.failf("accept() failed (%v)", err)
	}
	defer conn.Close()
	// Which step failed decides the message, as in the C function.
	var read, connectFailed bool
	remote, err := Server(ctx, conn, cfg.Tool, r.local, func(remote []Dest) error {
		read = true
		if err := r.connect(remote); err != nil {
			connectFailed = true
			return err
		}
		return nil
	})
	switch {
	case err == nil:
		r.remote = remote
		return nil
	case !read:
		fmt.Fprintf(r.stderr, "server read: %v\n", err)
		return r.failf("Couldn't read remote address")
	case connectFailed:
		return r.failf("Couldn't connect to remote QP")
	default:
		return r.failf("Couldn't send/recv local address (%v)", err)
	}
}

// Tool sets for the usage text.
const (
	ppRC  = 1 << RC
	ppUC  = 1 << UC
	ppUD  = 1 << UD
	ppSRQ = 1 << SRQ
	ppAll = ppRC | ppUC | ppUD | ppSRQ
)

// ppUsageLines are the tools' usage texts after the two "Usage:" lines,
// each line with the tools that print it, then what roced adds.
var ppUsageLines = []struct {
	tools int
	text  string
}{
	{ppAll, ""},
	{ppAll, "Options:"},
	{ppAll, "  -p, --port=<port>      listen on/connect to port <port> (default 18515)"},
	{ppAll, "  -d, --ib-dev=<dev>     use IB device <dev> (default first device found)"},
	{ppAll, "  -i, --ib-port=<port>   use port <port> of IB device (default 1)"},
	{ppAll &^ ppUD, "  -s, --size=<size>      size of message to exchange (default 4096)"},
	{ppUD, "  -s, --size=<size>      size of message to exchange (default 2048)"},
	{ppAll &^ ppUD, "  -m, --mtu=<size>       path MTU (default 1024)"},
	{ppSRQ, "  -q, --num-qp=<num>     number of QPs to use (default 16)"},
	{ppAll, "  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)"},
	{ppAll &^ ppSRQ, "  -n, --iters=<iters>    number of exchanges (default 1000)"},
	{ppSRQ, "  -n, --iters=<iters>    number of exchanges per QP(default 1000)"},
	{ppAll &^ ppUD, "  -l, --sl=<sl>          service level value"},
	{ppUD, "  -l, --sl=<SL>          send messages with service level <SL> (default 0)"},
	{ppAll, "  -e, --events           sleep on CQ events (default poll)"},
	{ppAll, "  -g, --gid-idx=<gid index> local port gid index"},
	{ppRC | ppSRQ, "  -o, --odp\t\t    use on demand paging"},
	{ppRC, "  -O, --iodp\t\t    use implicit on demand paging"},
	{ppRC, "  -P, --prefetch\t    prefetch an ODP MR"},
	{ppRC, "  -t, --ts\t            get CQE with timestamp"},
	{ppRC, "  -c, --chk\t            validate received buffer"},
	{ppAll &^ ppRC, "  -c, --chk              validate received buffer"},
	{ppRC, "  -j, --dm\t            use device memory"},
	{ppRC, "  -N, --new_send            use new post send WR API"},
	{ppAll, ""},
	{ppAll, "roced:"},
	{ppAll, "  -d, --ib-dev=<if|addr> the local interface or IP address (default: the route to"},
	{ppAll, "                         <host>; for a server, the default route's interface"},
	{ppAll, "                         or the only one besides lo with an address)"},
	{ppAll, "      --link=<link>      udp (default), afpacket or afxdp"},
	{ppAll, "      --pcap=<file>      write every RoCEv2 frame sent and received to <file>"},
	{ppAll &^ ppUD, "      --qp-timeout=<t>   RC local ACK timeout, 4.096 us * 2^t (14, as the tools)"},
	{ppAll, strings.TrimSuffix(fault.Usage, "\n")},
	{ppAll, serverwait.Usage},
	{ppAll, "  -g 1 selects the IPv4 GID as on rxe; without -g the tools exchange no GID and"},
	{ppAll, "  RoCE cannot connect, as with the real tools."},
	{ppRC, "  -o, -O, -t and -j are refused with rxe's words: goroce has no ODP, completion"},
	{ppRC, "  timestamps or device memory. -N is accepted (same traffic)."},
	{ppSRQ, "  -o is refused with rxe's words: goroce has no ODP."},
}

// ppUsage prints the tool's usage text (the real tools print it on stdout)
// followed by what roced adds.
func ppUsage(w io.Writer, tool Tool, argv0 string) {
	fmt.Fprintln(w, "Usage:")
	fmt.Fprintf(w, "  %s            start a server and wait for connection\n", argv0)
	fmt.Fprintf(w, "  %s <host>     connect to server at <host>\n", argv0)
	for _, l := range ppUsageLines {
		if l.tools&(1<<tool) != 0 {
			fmt.Fprintln(w, l.text)
		}
	}
}
