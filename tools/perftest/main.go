package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/endpoint"
	"github.com/goroce/goroce/nic/fault"
	"github.com/goroce/goroce/tools/internal/serverwait"
	"github.com/goroce/goroce/transport"
)

// ptListening is called once a server listens (tests start the client
// then; a probe connection would take the server's only accept).
var ptListening = func(port int) {}

// ptLinger keeps the device open a moment after a run whose last step is
// traffic (write_lat has no closing handshake): the peer may still wait
// for our acknowledgement of its last message.
const ptLinger = 200 * time.Millisecond

// ptFail is a run's end on an error: the lines the tool writes on stderr
// and its exit status.
type ptFail struct {
	code  int
	lines []string
}

func (f *ptFail) Error() string { return strings.Join(f.lines, "\n") }

func failWith(lines ...string) *ptFail { return &ptFail{code: 1, lines: lines} }

// ptRun is one run of a perftest command.
type ptRun struct {
	test   Test
	cfg    Config
	out    io.Writer
	errw   io.Writer
	ep     *endpoint.Endpoint
	sess   *Session
	pc     *ptCtx
	mtu    MTU
	poster *recvPoster
	// mine is this side's last bandwidth report (zero on a passive
	// server, as the tools send uninitialised or zeroed memory).
	mine       BWReport
	headerDone bool
	limitsOK   bool
	// cmr is the connection manager side of a -R run.
	cmr *ptCM
}

// Main runs perftest's test t (ib_write_bw ... ib_atomic_lat) with the
// command line args (without the program's name), as roced's command of
// the test's name (write_bw ... atomic_lat) does: the tools' flags, their
// exchange over TCP (or the RDMA CM with -R) in the dialect of the version
// the peer speaks, the same traffic with the same QP attributes on
// goroce's engine, so either side of a run can be the real tool. It prints
// on stdout and stderr what the tool prints (its usage text, banner,
// address lines and result table, its error messages) and returns the
// tool's exit status: 0; 1 for a failure, a bad command line, -h and -V
// (as the tools leave), or a result below -w or -y; 17 for send_bw's
// failed traffic loop.
//
// ctx, SIGINT or SIGTERM ends the run through its context, so that the
// device closes and --pcap's file is flushed: the capture of a run that
// hung and was killed by timeout(1) is the one most needed.
func Main(ctx context.Context, t Test, args []string, stdout, stderr io.Writer) int {
	cfg, err := ParseFlags(t, args)
	if err != nil {
		if errors.Is(err, ErrUsage) {
			ptUsage(stderr, t)
		}
		fmt.Fprintln(stderr, " "+strings.TrimPrefix(err.Error(), t.Binary()+": "))
		fmt.Fprintln(stderr, " Parser function exited with Error")
		return 1
	}
	// The tools leave with status 1 after -h and -V too.
	if cfg.Help {
		ptUsage(stdout, t)
		return 1
	}
	if cfg.Version {
		fmt.Fprintf(stdout, "Version: %s\n", cfg.Claim)
		return 1
	}
	r := &ptRun{test: t, cfg: cfg, out: stdout, errw: stderr, limitsOK: true}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = r.run(ctx)
	r.close(err == nil)
	if err == nil {
		if !r.limitsOK {
			return 1
		}
		return 0
	}
	return r.fail(err)
}

// fail prints err as the tool would and returns the exit status.
func (r *ptRun) fail(err error) int {
	var f *ptFail
	var ce *compError
	var se *stallError
	var me *MismatchError
	code := 1
	switch {
	case errors.As(err, &f):
		r.eprint(f.lines...)
		code = f.code
	case errors.As(err, &me):
		r.eprint(me.Lines()...)
	case errors.As(err, &ce):
		r.eprint(ce.lines()...)
	case errors.As(err, &se):
		r.eprint(se.lines()...)
	default:
		r.eprint(" " + err.Error())
	}
	// send_bw leaves a failed traffic loop with 17.
	if r.test == SendBW && (ce != nil || se != nil) {
		code = 17
	}
	return code
}

func (r *ptRun) print(lines ...string) {
	for _, l := range lines {
		fmt.Fprintln(r.out, l)
	}
}

func (r *ptRun) eprint(lines ...string) {
	for _, l := range lines {
		if l != "" {
			fmt.Fprintln(r.errw, l)
		}
	}
}

// refuse rejects what roced's engine or this command does not do, rather
// than ignoring it.
func (r *ptRun) refuse() error {
	c := &r.cfg
	switch {
	case c.Method == RunInfinitely:
		return failWith(" --run_infinitely is not supported by roced")
	case c.Output != "":
		return failWith(" --output is not supported by roced")
	case c.IBPort != 1:
		return failWith(fmt.Sprintf(" Port %d: roced devices have one port", c.IBPort), " Couldn't get context for the device")
	case c.PKeyIndex != 0:
		return failWith(fmt.Sprintf(" P_Key index %d: roced's P_Key table has one entry", c.PKeyIndex))
	}
	return nil
}

// open opens the RDMA endpoint; peer is the host the traffic goes to.
func (r *ptRun) open(peer string, gid int) error {
	ep, err := endpoint.Open(endpoint.Config{Link: string(r.cfg.Link), Dev: r.cfg.Device, GID: gid, Peer: peer, Pcap: r.cfg.Pcap,
		Faults: r.cfg.Faults, FaultLog: r.errw})
	if err != nil {
		return failWith(" "+err.Error(), " Couldn't get context for the device")
	}
	r.ep = ep
	ep.WarnStats(r.errw, "roced "+r.test.String())
	return nil
}

// close tears the run down; ok says it went through (a -R client then
// waits for the server to disconnect, as perftest's does).
func (r *ptRun) close(ok bool) {
	if r.pc != nil && r.cfg.WaitDestroy > 0 {
		time.Sleep(time.Duration(r.cfg.WaitDestroy) * time.Second)
	}
	if r.cmr != nil {
		r.cmClose(ok) // before the QPs go: the connections still use them
	}
	if r.pc != nil {
		r.pc.close()
	}
	if r.sess != nil {
		r.sess.Conn().Close()
	}
	if r.ep != nil {
		if l := r.ep.FaultSummary(); l != "" {
			fmt.Fprintln(r.errw, l)
		}
		r.ep.Close()
	}
}

// run is the tools' main(): set up, exchange, connect, then follow the
// plan of exchanges and traffic for this test, role and pair of versions.
func (r *ptRun) run(ctx context.Context) error {
	c := &r.cfg
	if err := r.refuse(); err != nil {
		return err
	}
	userMTU, userGID := c.MTU, c.GIDIndex
	// A client knows its peer now; so does a server told which device to
	// use. Any other server opens its device once the client connects,
	// on the interface that reaches the client.
	// A -R server has no TCP connection to learn the interface from.
	if !c.IsServer() || c.Device != "" || c.RDMACM {
		if err := r.open(c.ServerName, userGID); err != nil {
			return err
		}
	}
	var port MTU
	if r.ep != nil {
		port = MTU(r.ep.Device.ActiveMTU())
	}
	notes := c.Resolve(port, transport.MaxRdAtomic, c.Claim)
	// The notes are printed in order, except a last dashed line: that is
	// check_link's inline notice, which comes after 6.29's polling
	// notice, with its explanation on stderr (roced, like rxe, is a
	// device perftest does not know to do inline sends).
	inline := len(notes) > 0 && notes[len(notes)-1] == ResultLine()
	if inline {
		notes = notes[:len(notes)-1]
	}
	r.print(notes...)
	if c.Claim.Float() >= V629.Float() {
		r.print(DisablingDynamicPolling)
	}
	if inline {
		r.print(ResultLine())
		r.eprint(InlineNotice)
	}

	if c.IsServer() {
		r.print(WaitingBanner()...)
	}
	switch {
	case c.RDMACM:
		if err := r.openComm(ctx); err != nil {
			return err
		}
	case c.IsServer():
		ln, err := Listen(ctx, c.Port)
		if err != nil {
			return failWith(" "+err.Error(), " Unable to init the socket connection")
		}
		ptListening(c.Port)
		if r.sess, err = Accept(ctx, ln, c.Claim); err != nil {
			return failWith(" "+err.Error(), " Unable to init the socket connection")
		}
	default:
		var err error
		if r.sess, err = Dial(ctx, c.ServerName, c.Port, c.Claim); err != nil {
			return failWith(fmt.Sprintf("Couldn't connect to %s:%d", c.ServerName, c.Port),
				"Unable to open file descriptor for socket connection Unable to init the socket connection")
		}
	}
	if r.ep == nil {
		host, _, _ := net.SplitHostPort(r.sess.Conn().RemoteAddr().String())
		if err := r.open(host, userGID); err != nil {
			return err
		}
	}
	c.GIDIndex = int(r.ep.GIDIndex)
	exchange := func(err error) error {
		if err == nil {
			return nil
		}
		return failWith(" "+err.Error(), " Failed to exchange data between server and clients")
	}

	if err := r.sess.ExchangeVersions(ctx); err != nil {
		return exchange(err)
	}
	if _, err := r.sess.ExchangeSysData(ctx, DefaultSysData); err != nil {
		return exchange(err)
	}
	active := MTU(r.ep.Device.ActiveMTU())
	mine := active
	if userMTU != 0 {
		if mine = MTUFromBytes(userMTU); mine > active {
			r.print("Requested mtu is higher than active mtu ", fmt.Sprintf("Changing to active mtu - %d", active))
			mine = active
		}
	}
	mtu, err := r.sess.ExchangeMTU(ctx, mine)
	if err != nil {
		return exchange(err)
	}
	r.mtu = mtu
	c.MTU = mtu.Bytes()
	udNotes, err := c.FitUD(mtu)
	r.eprint(udNotes...)
	if err != nil {
		return failWith(" "+err.Error()+" ", " Couldn't get context for the device")
	}
	neg, err := r.sess.Negotiate(ctx, c.Params(ptDeviceAttr(r.ep.Device)), c.OutReads)
	if err != nil {
		var me *MismatchError
		if errors.As(err, &me) {
			return err
		}
		return exchange(err)
	}
	if neg.Lowered {
		c.OutReads = neg.OutReads
		r.print(OutReadsLowered)
	}
	r.print(c.Banner(RunInfo{Device: r.ep.Netdev, MTU: mtu}, c.Claim)...)

	if r.pc, err = newPtCtx(c, r.ep.Device, r.ep.GIDIndex); err != nil {
		return failWith(" "+err.Error(), " Couldn't create IB resources")
	}
	for _, rec := range r.pc.my { // none yet with -R: printed once connected
		r.print(c.AddressLines("local", rec)...)
	}
	return r.walk(ctx, Plan(c.Shape(mtu), r.sess.Local, r.sess.Peer))
}

// walk performs the plan's steps after the MTU (and negotiation) steps.
func (r *ptRun) walk(ctx context.Context, steps []Step) error {
	c := &r.cfg
	addressed := 0
	prepared := -1 // index of the traffic step whose receives are posted
	lastTraffic := false
	for i, st := range steps {
		lastTraffic = false
		switch st.Kind {
		case StepVersion, StepSysData, StepMTU, StepNegotiate:
			continue
		case StepCMConnect:
			early, err := r.cmConnect(ctx)
			if err != nil {
				return err
			}
			if early >= 0 {
				prepared = early
			}
			for _, rec := range r.pc.my {
				r.print(c.AddressLines("local", rec)...)
			}
		case StepRecord:
			if st.Zero {
				// create_rdma_cm_connection's handshakes of the zeroed
				// my_dest[0], before and after the QPs connect.
				if len(r.pc.qps) == 0 && r.cmr.l == nil {
					if err := r.cmReady(steps, i); err != nil {
						return err
					}
				}
				if _, err := r.sess.ExchangeRecord(ctx, Record{}); err != nil {
					return failWith(" "+err.Error(), "Failed to create RDMA CM connection with resources.")
				}
				continue
			}
			// Receives must be posted before the handshake that lets the
			// peer start sending.
			if i+1 < len(steps) && steps[i+1].Kind == StepTraffic && prepared != i+1 && addressed == c.NumQPs {
				if err := r.prepare(steps[i+1]); err != nil {
					return err
				}
				prepared = i + 1
			}
			rem, err := r.sess.ExchangeRecord(ctx, r.pc.my[st.QP])
			if err != nil {
				return failWith(" "+err.Error(), " Failed to exchange data between server and clients")
			}
			if addressed < c.NumQPs {
				r.pc.rem = append(r.pc.rem, rem)
				r.print(c.AddressLines("remote", rem)...)
				if addressed++; addressed == c.NumQPs && c.RDMACM {
					// The CM connected the QPs: the records' QPN and PSN
					// go unused (ctx_connect is skipped); write_lat follows
					// the peer's PSNs from the one the CM gave.
					a, _ := r.pc.qps[0].Query()
					r.pc.peerPSN = a.RQPSN
				} else if addressed == c.NumQPs {
					for q, rem := range r.pc.rem {
						if err := r.pc.connect(q, rem, transport.MTU(r.mtu)); err != nil {
							return failWith(" "+err.Error(), " Unable to Connect the HCA's through the link")
						}
					}
				}
			}
		case StepTraffic:
			if prepared != i {
				if err := r.prepare(st); err != nil {
					return err
				}
				prepared = i
			}
			if err := r.traffic(ctx, st); err != nil {
				return err
			}
			lastTraffic = true
		case StepBWReport:
			if err := r.exchangeReport(ctx); err != nil {
				return err
			}
		case StepClose:
			r.print(ResultLine())
			if err := r.sess.Close(ctx, 2*time.Second); err != nil {
				return failWith(" "+err.Error(), "Failed to close connection between server and client")
			}
			return nil
		}
	}
	// write_lat: no closing handshake.
	r.print(ResultLine())
	if lastTraffic {
		time.Sleep(ptLinger)
	}
	return nil
}

// prepare readies a traffic step before the handshake that precedes it:
// the receive WQEs of the receiving sides (ctx_set_recv_wqes).
func (r *ptRun) prepare(st Step) error {
	if !r.pc.receives() || st.Passive {
		return nil
	}
	r.poster = newRecvPoster(r.pc, st.Size)
	if err := r.poster.fill(); err != nil {
		return failWith(" "+err.Error(), " Failed to post receive recv_wqes")
	}
	return nil
}

// header prints the result table's title once, before the first traffic.
func (r *ptRun) header() {
	if r.headerDone {
		return
	}
	r.headerDone = true
	r.print(r.cfg.ResultHeader(r.cfg.Claim)...)
}

// traffic runs one traffic step and prints what the tool prints after it.
func (r *ptRun) traffic(ctx context.Context, st Step) error {
	c := &r.cfg
	passiveLat := (c.Test == ReadLat || c.Test == AtomicLat) && c.IsServer()
	if !passiveLat {
		r.header()
	}
	if st.Passive {
		return nil // the peer drives; the next handshake waits for it
	}
	t, stop := newTraffic(ctx, r.pc)
	defer stop()
	if c.Test.BW() {
		var s bwSamples
		var err error
		switch {
		case r.poster != nil && c.Duplex:
			s, err = t.bwBidir(st.Size, r.poster)
		case r.poster != nil:
			s, err = t.bwRecv(st.Size, r.poster)
		default:
			if c.WarmUp && c.Test.Verb() != VerbSend {
				if err := t.warmUp(st.Size); err != nil {
					return failWith(" "+err.Error(), "Problems with warm up")
				}
			}
			s, err = t.bwSend(st.Size)
		}
		if err != nil {
			return r.trafficError(err, "Failed to complete run_iter_bw function successfully")
		}
		r.mine = bwReport(s, c.ReportFmt == ReportGbits)
		if !c.Duplex {
			r.printBW(r.mine)
		}
		return nil
	}
	var run latRun
	var err error
	switch c.Test {
	case WriteLat:
		run, err = t.latWrite(st.Size, r.poster)
	case SendLat:
		run, err = t.latSendRecv(st.Size, r.poster)
	default:
		run, err = t.latReadAtomic(st.Size)
	}
	if err != nil {
		return r.trafficError(err, "Failed to complete run_iter_lat function successfully")
	}
	return r.printLat(run)
}

func (r *ptRun) trafficError(err error, what string) error {
	var ce *compError
	var se *stallError
	if errors.As(err, &ce) || errors.As(err, &se) {
		return err
	}
	if errors.Is(err, errStalled) {
		return failWith(fmt.Sprintf(" No progress for %v: the peer stopped answering", ptStall), " "+what)
	}
	return failWith(" "+err.Error(), " "+what)
}

// printBW is print_full_bw_report for this side's figures, with the
// -w / -y verification.
func (r *ptRun) printBW(rep BWReport) {
	r.print(r.cfg.BWRow(rep, r.cfg.Claim))
	r.checkLimits(rep)
}

func (r *ptRun) checkLimits(rep BWReport) {
	c := &r.cfg
	if c.LimitBW > 0 && rep.BWAvg < c.LimitBW {
		r.eprint("Error: BW result is below bw limit")
		r.limitsOK = false
	}
	if c.LimitRate > 0 && rep.MsgRate < c.LimitRate {
		r.eprint("Error: Msg rate  is below msg_rate limit")
		r.limitsOK = false
	}
}

// exchangeReport is xchg_bw_reports and what follows it: a passive server
// prints the client's figures, a bidirectional run the two sides' sum.
func (r *ptRun) exchangeReport(ctx context.Context) error {
	c := &r.cfg
	rem, err := r.sess.ExchangeBWReport(ctx, r.mine)
	if err != nil {
		return failWith(" "+err.Error(), " Failed to exchange data between server and clients")
	}
	if !c.Duplex {
		if c.IsServer() {
			r.print(c.BWRow(rem, c.Claim))
		}
		return nil
	}
	sum := r.mine
	sum.BWPeak += rem.BWPeak
	sum.BWAvg += rem.BWAvg
	sum.MsgRate += rem.MsgRate
	r.printBW(sum)
	if c.ReportBoth {
		line := ResultLine()
		r.print(line, "", " Local results: ", line)
		r.print(c.ResultHeader(c.Claim)[1:]...)
		r.print(c.BWRow(r.mine, c.Claim), line, "", " Remote results: ", line)
		r.print(c.ResultHeader(c.Claim)[1:]...)
		r.print(c.BWRow(rem, c.Claim))
	}
	return nil
}

// printLat is print_report_lat (or _lat_duration) with -U and -H.
func (r *ptRun) printLat(run latRun) error {
	c := &r.cfg
	if c.TestType == Duration {
		r.print(c.LatRow(latDurationReport(run.s.size, run.s.iters, run.window, run.s.roundTrip)))
		return nil
	}
	res, err := latReport(run.s)
	if err != nil {
		return failWith(" " + err.Error())
	}
	unit := "usec"
	if c.Cycles {
		unit = "cycles"
	}
	list := func(v []float64) {
		r.print("#, " + unit)
		for i, x := range v {
			r.print(strconv.Itoa(i+1) + ", " + strconv.FormatFloat(x, 'g', 6, 64))
		}
	}
	if c.Unsorted {
		list(res.unsorted)
	}
	if c.Histogram {
		list(res.sorted)
	}
	if c.Unsorted || c.Histogram {
		r.print(c.ResultHeader(c.Claim)...)
	}
	r.print(c.LatRow(res.LatReport))
	return nil
}

// ptUsage is the tools' usage text for the flags roced implements.
func ptUsage(w io.Writer, t Test) {
	name := "roced " + t.String()
	fmt.Fprintf(w, "Usage:\n  %-22s start a server and wait for connection\n  %-22s connect to server at <host>\n\n", name, name+" <host>")
	fmt.Fprint(w, `Options (perftest's, as far as they apply to roced):
  -a, --all                 Run sizes from 2 till 2^23
  -b, --bidirectional       Measure bidirectional bandwidth (bw tests)
  -c, --connection=<RC/UC/UD>  Connection type (UC: not read/atomic; UD: send only)
  -C, -H, -U                Report cycles, histogram, unsorted (lat tests)
  -d, --ib-dev=<dev>        roced: the local interface or IP address to use
  -D, --duration=<sec>      Run for a time instead of -n iterations
  -e, --events              Sleep on CQ events (not write)
  -f, --margin=<sec>        Margins of the -D sample window
  -F, --CPU-freq            Accepted; roced measures with the monotonic clock
  -i, --ib-port=<port>      Port (1)
  -I, --inline_size=<size>  Accepted; roced sends nothing inline
  -l, --post_list=<n>       Post lists of n work requests (bw tests)
  -m, --mtu=<mtu>           MTU 256..4096 (default the port's active MTU)
  -n, --iters=<iters>       Number of exchanges (at least 5)
  -N, --noPeak              No peak bandwidth (bw tests)
  -o, --outs=<num>          Outstanding reads/atomics (read, atomic)
  -p, --port=<port>         TCP port (18515)
  -q, --qp=<num>            Number of QPs (bw tests)
  -Q, --cq-mod=<num>        A completion every <num> messages (bw tests)
  -r, --rx-depth=<dep>      Receive queue depth (send, write with imm)
  -s, --size=<size>         Message size (K and M suffixes)
  -S, --sl=<sl>             Service level
  -t, --tx-depth=<dep>      Send queue depth
  -u, --qp-timeout=<t>      QP timeout, 4.096 us * 2^t (14)
  -w, --limit_bw=<value>    Fail below this average bandwidth
  -x, --gid-index=<index>   GID index (-x 1: the IPv4 GID, as on rxe)
  -y, --limit_msgrate=<v>   Fail below this message rate
  -A, --atomic_type=<type>  CMP_AND_SWAP or FETCH_AND_ADD (atomic tests)
  -V, --version             Print the version roced claims
      --report_gbits        Report Gbit/s instead of MiB/s
      --report-both         With -b, report both sides as well
      --write_with_imm      RDMA WRITE with immediate (write tests, 6.24+)
      --use-srq             Receive through a shared receive queue (send tests)
      --perform_warm_up     Warm up before measuring (write, read, atomic bw)
      --latency_gap=<usec>  Pause between latency posts
      --tclass, --flow_label, --wait_destroy, --ipv6  As perftest's
  -R, --rdma_cm             Connect the QPs through the RDMA CM (RC), with the
                            data exchange over the RDMA CM too (no TCP)
  -z, --comm_rdma_cm        Not supported alone (-R implies it)

goroce's own:
      --link=udp|afpacket|afxdp  How RoCEv2 reaches the wire (udp)
      --perftest_version=V  Version claimed as a client, ceiling as a server,
                            layout of the output (6.29; 6.06 and 6.24 too)
      --pcap=FILE           Write every RoCEv2 frame to a pcap/pcapng file
`+fault.Usage)
	fmt.Fprintln(w, serverwait.Usage)
}
