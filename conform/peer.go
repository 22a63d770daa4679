package conform

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/ladder"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/tools/perftest"
	"github.com/goroce/goroce/tools/pingpong"
	"github.com/goroce/goroce/transport"
)

// PeerConfig says how RunPeer reaches a peer on another host (or in
// another process) and starts its tools.
type PeerConfig struct {
	// Link is the suite's own link, a UDP link on Local normally
	// (udp.Open): the raw endpoint sends and reads RoCEv2 through it.
	Link nic.Link
	// Local is the suite's address: its GID, and the source of its
	// packets.
	Local netip.Addr
	// Host is the peer's host name or address, for the tools' TCP
	// exchanges.
	Host string
	// Exec is the prefix that runs a command on the peer (["ssh",
	// "hca1"], the lab's ["rxe-peer.sh", "exec"], or [] to run it
	// locally): each peer command is started as Exec followed by its
	// words. Nil: print each command to Prompt for a person to run, and
	// wait for it to listen.
	Exec []string
	// Prompt receives the printed commands when Exec is nil.
	Prompt io.Writer
	// Roced, if set, is a roced binary on the peer whose tools
	// (roced rc_pingpong, roced read_bw) stand in for rdma-core's and
	// perftest's.
	Roced string
	// Python, if set, is the path on the peer of goroce's requester
	// script (RequesterScript, which needs python3-pyverbs there): the
	// requester cases no tool's client plays run it. Empty: those cases
	// report error, saying so.
	Python string
	// Dev is the peer tools' -d (empty: their default device).
	Dev string
	// GID is the peer tools' GID index (-g, -x).
	GID int
	// Port is the first TCP port; case i uses Port+2i and Port+2i+1.
	Port int
	// Start bounds the wait for a peer tool to listen (0: 60 s; a person
	// gets 10 minutes).
	Start time.Duration
	// DeadWait is how long the fence waits before the suite takes a QP
	// that answers nothing, not even the fence, to be in the error state
	// (0: 2 s). Silence of a live QP is always proven by the fence.
	DeadWait time.Duration
	// Timeout is the timeout(1) every peer command runs under (0: 60 s).
	Timeout time.Duration
}

func (c *PeerConfig) start() time.Duration {
	switch {
	case c.Start > 0:
		return c.Start
	case c.Exec == nil:
		return 10 * time.Minute
	}
	return 60 * time.Second
}

// timeout is the timeout(1) of every peer command.
func (c *PeerConfig) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return 60 * time.Second
}

func (c *PeerConfig) deadWait() time.Duration {
	if c.DeadWait > 0 {
		return c.DeadWait
	}
	return 2 * time.Second
}

// peerTool is a tool whose exchange gives the suite a peer QP.
type peerTool int

const (
	toolNone peerTool = iota
	// ibv_rc_pingpong's server: an RC QP with receives posted and no
	// remote access, and a pingpong record (QPN, PSN, GID).
	toolPingpong
	// perftest's servers (ib_write_bw, ib_read_bw, ib_atomic_bw): an RC
	// QP with the one remote right its test needs, as many responder
	// resources as the device has, no receive posted, and a perftest
	// record with its region's R_Key and address.
	toolWriteBW
	toolReadBW
	toolAtomicBW
	// goroce's own requester (requester.py, through pyverbs) for the
	// requester cases no tool's client plays: it speaks ibv_rc_pingpong's
	// exchange as its client.
	toolPyverbs
)

// minRNR is the RNR timer code the tools give their QPs (both use 12).
const toolMinRNR = 12

// command is the peer tool's command line for a case's QP (alive: the
// check that the peer still serves a fresh QP, which ends by itself).
func (c *PeerConfig) command(t peerTool, port int, alive bool) []string {
	w := []string{"timeout", strconv.Itoa(int(c.timeout().Seconds()))}
	dev := func() {
		if c.Dev != "" {
			w = append(w, "-d", c.Dev)
		}
	}
	switch t {
	case toolPingpong:
		if c.Roced != "" {
			w = append(w, c.Roced, "rc_pingpong")
		} else {
			w = append(w, "ibv_rc_pingpong")
		}
		dev()
		iters := "1000"
		if alive {
			iters = "1"
		}
		w = append(w, "-g", strconv.Itoa(c.GID), "-p", strconv.Itoa(port), "-s", "4096", "-n", iters, "-e")
	case toolWriteBW, toolReadBW, toolAtomicBW:
		t := t.perftest()
		if c.Roced != "" {
			w = append(w, c.Roced, t.String())
		} else {
			w = append(w, t.Binary())
		}
		dev()
		w = append(w, "-x", strconv.Itoa(c.GID), "-p", strconv.Itoa(port), "-n", "5", "-F")
	}
	return w
}

// perftest is the perftest test of a perftest tool.
func (t peerTool) perftest() perftest.Test {
	switch t {
	case toolReadBW:
		return perftest.ReadBW
	case toolAtomicBW:
		return perftest.AtomicBW
	}
	return perftest.WriteBW
}

// peerProc is one peer command.
type peerProc struct {
	words []string
	cmd   *exec.Cmd
	done  chan struct{} // closed when it exited; never with a person
	mu    sync.Mutex
	out   bytes.Buffer
	err   error
}

func (p *peerProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

// output is what the command printed so far, on one line.
func (p *peerProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(strings.Fields(p.out.String()), " ")
}

// exited says how the command ended ("" while it runs or with a person).
func (p *peerProc) exited() string {
	if p.cmd == nil {
		return ""
	}
	select {
	case <-p.done:
	default:
		return ""
	}
	st := "exit 0"
	if p.err != nil {
		st = p.err.Error()
	}
	if o := p.output(); o != "" {
		st += ": " + o
	}
	return st
}

// shellLine is words as a line a POSIX shell splits back into them: a
// word with anything but letters, digits and -_./=:,@+% is single-quoted.
func shellLine(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		safe := w != ""
		for _, r := range w {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,@+%", r)) {
				safe = false
				break
			}
		}
		if safe {
			q[i] = w
			continue
		}
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// startPeer starts a peer command, or prints it for a person.
func (c *PeerConfig) startPeer(words []string) (*peerProc, error) {
	p := &peerProc{words: words, done: make(chan struct{})}
	if c.Exec == nil {
		w := c.Prompt
		if w == nil {
			w = io.Discard
		}
		fmt.Fprintf(w, "run on the peer: %s\n", shellLine(words))
		return p, nil
	}
	argv := append(append([]string(nil), c.Exec...), words...)
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the peer's command %q: %w", strings.Join(argv, " "), err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// stop waits up to grace for the command to end, then ends its process
// group.
func (p *peerProc) stop(grace time.Duration) {
	if p == nil || p.cmd == nil {
		return
	}
	select {
	case <-p.done:
		return
	case <-time.After(grace):
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// dial connects to the peer tool's TCP port once it listens.
func (c *PeerConfig) dial(p *peerProc, port int) (net.Conn, error) {
	deadline := time.Now().Add(c.start())
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(c.Host, strconv.Itoa(port)))
		cancel()
		if err == nil {
			return conn, nil
		}
		if st := p.exited(); st != "" {
			return nil, fmt.Errorf("the peer's command ended before it listened (%s)", st)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the peer's command did not listen on %s port %d in %v: %w", c.Host, port, c.start(), err)
		}
		time.Sleep(150 * time.Millisecond)
	}
}

// remote is the session's view of a peer QP on another host.
type remote struct {
	cfg  *PeerConfig
	tool peerTool
	proc *peerProc
	qpn  uint32 // the peer's QP
	rkey uint32 // its region's R_Key (perftest)
	va   uint64 // its region's address (perftest)
	// minRNR is the RNR timer code the tool gave its QP.
	minRNR uint8
	// primer is the request the suite sent first and the peer answered:
	// the fence sends it again, and the peer must answer it again (a
	// SEND or WRITE acknowledged again, C9-105; a READ or atomic replayed
	// from its responder resources) after everything it sent before.
	primer pkt
	// answers is how many packets a preparing step expects its request
	// to draw, awaited before the fence goes.
	answers int
	// state is what the last fence showed: RTS if it was answered, Err
	// if nothing came (stateWhy says so).
	state    transport.QPState
	stateWhy string
	// reqPSN and msn follow the peer's own requests (rc_pingpong's
	// SENDs), which the suite acknowledges.
	reqPSN uint32
	msn    uint32
	// caseAnswers is answers for the case's own stimulus; stepping says
	// a preparing step set answers for its exchange instead.
	caseAnswers int
	stepping    bool
	// onClose ends the tool's exchange (a perftest server's connection).
	onClose func()
	// client is set when the peer's tool is a client, its QP the
	// requester the case tests; lastAt is when each PSN of its requests
	// came last, hi the highest PSN it sent (seen: any).
	client *peerReq
	pongs  int // the SENDs rc_pingpong's client waits for, not sent yet
	// answeredAt and answerOut are when the suite's last answer to the
	// peer's requests began to be sent and when the send returned.
	// timerPSN, when set, is the PSN the peer's local ACK timer would
	// send first, which the suite's answer acknowledges (timerResend).
	answeredAt  time.Time
	answerOut   time.Time
	timerPSN    uint32
	timerPSNSet bool
	lastAt      map[uint32]time.Time
	hi          uint32
	seen        bool
}

// span is how far from the peer's address its region surely reaches:
// perftest registers at least a page past the address it sends.
const peerSpan = 4096

// peerFenced is fenced for a remote peer: the fence is the primer sent
// again, on the case's own QP (a peer need not keep the order of packets
// across QPs; rxe does not), and its answer is the last one the stimulus
// can draw.
func (s *session) peerFenced() ([]bth.Packet, error) {
	r := s.peer
	answers := r.caseAnswers
	if r.stepping {
		answers, r.stepping = r.answers, false
	}
	// The fence's answer (a positive ACK) looks like any other, a peer
	// may coalesce ACKs of packets that came together (goroce does), and
	// a duplicate READ or atomic as fence could make a responder abandon
	// the responses it is sending: so the answers the case expects are
	// awaited before the fence goes, which then orders anything more.
	var got []bth.Packet
	for len(got) < answers {
		p, err := s.raw.nextWithin(s.c.qpn, s.c.qpn, s.cfgDeadWait(), r.proc.done)
		if err != nil {
			break
		}
		got = append(got, p)
	}
	fence := r.primer
	fence.comment = "the suite's fence: the primer again, which the peer must answer again after everything before it"
	if err := s.raw.send(fence); err != nil {
		return nil, err
	}
	for {
		p, err := s.raw.nextWithin(s.c.qpn, s.c.qpn, s.cfgDeadWait(), r.proc.done)
		if err != nil {
			if errors.Is(err, errBackstop) || errors.Is(err, errStopped) {
				r.state = transport.Err
				r.stateWhy = fmt.Sprintf("the fence went unanswered for %v: the QP is taken to be in the error state", s.cfgDeadWait())
				if errors.Is(err, errStopped) {
					r.stateWhy = "the peer's command ended (" + r.proc.exited() + "): its QP is gone"
				}
				return got, nil
			}
			return got, err
		}
		if s.isFenceAnswer(p) {
			r.state, r.stateWhy = transport.RTS, ""
			return got, nil
		}
		got = append(got, p)
	}
}

// isFenceAnswer reports whether p has the form of the fence's answer: a
// positive ACK (a SEND or WRITE primer), or the READ response or Atomic
// Acknowledge replayed at the primer's PSN.
func (s *session) isFenceAnswer(p bth.Packet) bool {
	r := s.peer
	switch r.primer.op {
	case bth.RCReadRequest:
		return p.OpCode() == bth.RCReadResponseOnly && uint32(p.BTH().PSN()) == r.primer.psn
	case bth.RCFetchAdd:
		return p.OpCode() == bth.RCAtomicAcknowledge && uint32(p.BTH().PSN()) == r.primer.psn
	}
	return p.OpCode() == bth.RCAcknowledge && p.AETH().Syndrome().IsACK()
}

func (s *session) cfgDeadWait() time.Duration { return s.peer.cfg.deadWait() }

// swallowPeerRequest acknowledges a request of the peer's own requester
// (rc_pingpong's server answers each SEND with one of its own), so that
// the peer never retries nor runs out of retries during a case, and
// keeps it out of the answers a case judges.
func (s *session) swallowPeerRequest(p bth.Packet) bool {
	op := p.OpCode()
	if op == bth.RCAcknowledge || op == bth.RCAtomicAcknowledge || isReadResponse(op) {
		return false
	}
	r := s.peer
	psn := uint32(p.BTH().PSN())
	if psn == r.reqPSN {
		r.reqPSN = (r.reqPSN + 1) & bth.PSNMask
		switch op {
		case bth.RCSendOnly, bth.RCSendLast, bth.RCSendOnlyImm, bth.RCSendLastImm, bth.RCSendOnlyInv, bth.RCSendLastInv,
			bth.RCWriteOnly, bth.RCWriteLast, bth.RCWriteOnlyImm, bth.RCWriteLastImm:
			r.msn++
		}
	}
	if p.BTH().AckReq() {
		_ = s.raw.send(pkt{op: bth.RCAcknowledge, qpn: r.qpn, psn: psn, exts: []func([]byte, *bth.Info){withAETH(ackSyn, r.msn)},
			comment: "the suite acknowledges the peer's own request"})
	}
	return true
}

// peerEnv is what RunPeer shares between cases.
type peerEnv struct {
	cfg *PeerConfig
	raw *rawEnd
}

// newPeerSession starts the case's peer tool, takes its QP through the
// tool's exchange and primes it.
func (e *peerEnv) newPeerSession(c *Case, i int, need peerNeed) (*session, error) {
	cfg := e.cfg
	port := cfg.Port + 2*i
	proc, err := cfg.startPeer(cfg.command(need.tool, port, false))
	if err != nil {
		return nil, err
	}
	r := &remote{cfg: cfg, tool: need.tool, proc: proc, minRNR: toolMinRNR, state: transport.RTS}
	s := &session{raw: e.raw, set: c.setup, peer: r}
	// A QP number and first PSN of the suite's own per case: packets
	// left over from an earlier case's peer go to another QPN.
	s.c = &conn{qpn: rawQPN + 0x100 + uint32(i), ePSN: (rawPSN + uint32(i)<<12) & bth.PSNMask}
	fail := func(err error) (*session, error) {
		s.close()
		return nil, err
	}
	conn, err := cfg.dial(proc, port)
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var peerGID [16]byte
	switch need.tool {
	case toolPingpong:
		rem, err := pingpong.Client(ctx, conn, pingpong.RC, []pingpong.Dest{{QPN: s.c.qpn, PSN: s.c.ePSN, GID: bth.GIDFromAddr(cfg.Local)}})
		conn.Close()
		if err != nil {
			return fail(err)
		}
		r.qpn, s.c.peerPSN, peerGID = rem[0].QPN, rem[0].PSN, rem[0].GID
	case toolWriteBW, toolReadBW, toolAtomicBW:
		rec, err := e.perftestExchange(ctx, conn, s, need.tool.perftest())
		if err != nil {
			conn.Close()
			return fail(err)
		}
		// The tool waits on the connection for the end of its test:
		// closing it at the end of the case ends the tool.
		r.onClose = func() { conn.Close() }
		r.qpn, s.c.peerPSN, r.rkey, r.va, peerGID = rec.QPN, rec.PSN, rec.RKey, rec.VAddr, rec.GID
	}
	if bth.GID(peerGID).Addr() == (netip.Addr{}) || peerGID == ([16]byte{}) {
		return fail(errors.New("the peer sent no GID (is its GID index right?)"))
	}
	r.reqPSN = s.c.peerPSN
	e.raw.Dst = bth.GID(peerGID).Addr()
	e.raw.swallow = s.swallowPeerRequest
	e.raw.reset()
	e.raw.connect(ladder.Endpoint{Addr: cfg.Local, QPN: s.c.qpn}, ladder.Endpoint{Addr: e.raw.Dst, QPN: r.qpn})
	if err := s.prime(); err != nil {
		return fail(err)
	}
	return s, nil
}

// perftestExchange runs the client's side of perftest's exchange up to
// the traffic and returns the server's record.
func (e *peerEnv) perftestExchange(ctx context.Context, conn net.Conn, s *session, t perftest.Test) (perftest.Record, error) {
	cfg, err := perftest.ParseFlags(t, []string{"-x", strconv.Itoa(e.cfg.GID), "-n", "5", e.cfg.Host})
	if err != nil {
		return perftest.Record{}, err
	}
	cfg.Resolve(perftest.MTU(3), 16, cfg.Claim)
	sess := perftest.NewSession(conn, perftest.Client, cfg.Claim)
	if err := sess.ExchangeVersions(ctx); err != nil {
		return perftest.Record{}, err
	}
	if _, err := sess.ExchangeSysData(ctx, perftest.DefaultSysData); err != nil {
		return perftest.Record{}, err
	}
	pmtu, err := sess.ExchangeMTU(ctx, perftest.MTUFromBytes(mtu))
	if err != nil {
		return perftest.Record{}, err
	}
	if pmtu.Bytes() != mtu {
		return perftest.Record{}, fmt.Errorf("the peer's MTU is %d: the suite's cases are written for %d", pmtu.Bytes(), mtu)
	}
	cfg.MTU = pmtu.Bytes()
	if _, err := sess.Negotiate(ctx, cfg.Params(perftest.DeviceAttr{MaxQPRdAtom: 16}), cfg.OutReads); err != nil {
		return perftest.Record{}, err
	}
	before, _ := perftest.RecordCounts(perftest.Plan(cfg.Shape(pmtu), sess.Local, sess.Peer))
	mine := perftest.Record{OutReads: uint16(cfg.OutReads), QPN: s.c.qpn, PSN: s.c.ePSN, GID: bth.GIDFromAddr(e.cfg.Local)}
	var first perftest.Record
	for i := range before {
		rec, err := sess.ExchangeRecord(ctx, mine)
		if err != nil {
			return perftest.Record{}, err
		}
		if i == 0 {
			first = rec
		}
	}
	return first, nil
}

// prime sends the primer, a request the peer must execute and answer
// (a 64-byte SEND to rc_pingpong; to a perftest server an 8-byte WRITE, READ or FETCH_ADD of 0, what its QP allows),
// whose repetition is every fence of the case.
func (s *session) prime() error {
	r := s.peer
	p := s.req(bth.RCSendOnly, 0, pay(64))
	want := bth.RCAcknowledge
	switch r.tool {
	case toolWriteBW:
		p = s.req(bth.RCWriteOnly, 0, pay(8), withRETH(r.va+peerSpan-8, r.rkey, 8))
	case toolReadBW:
		p = s.req(bth.RCReadRequest, 0, nil, withRETH(r.va+peerSpan-8, r.rkey, 8))
		want = bth.RCReadResponseOnly
	case toolAtomicBW:
		p = s.req(bth.RCFetchAdd, 0, nil, withAtomic(r.va+peerSpan-8, r.rkey, 0, 0))
		want = bth.RCAtomicAcknowledge
	}
	p.comment = "the suite's primer: a request the peer must execute; the fence repeats it"
	if err := s.raw.send(p); err != nil {
		return err
	}
	got, err := s.raw.nextWithin(s.c.qpn, s.c.qpn, backstop, r.proc.done)
	if err != nil {
		if st := r.proc.exited(); st != "" {
			return fmt.Errorf("the primer went unanswered; the peer's command ended (%s)", st)
		}
		return fmt.Errorf("the primer (%v) went unanswered: %w", p.op, err)
	}
	if got.OpCode() != want || uint32(got.BTH().PSN()) != p.psn {
		return fmt.Errorf("the primer (%v) was answered with %v", p.op, describe(got, p.psn))
	}
	if !got.AETH().Syndrome().IsACK() {
		return fmt.Errorf("the primer (%v) was answered with %v", p.op, describe(got, p.psn))
	}
	r.primer = p
	s.c.ePSN = (s.c.ePSN + 1) & bth.PSNMask
	return nil
}

// closePeer ends the case's peer tool: a perftest server ends when its
// connection closes; rc_pingpong's server, still waiting for SENDs, ends
// when its QP fails, so the suite sends it a SEND MIDDLE out of sequence
// (an invalid request: the QP goes to the error state and its receives
// are flushed, which ends the tool).
func (s *session) closePeer() {
	r := s.peer
	if r.client != nil {
		s.closeClient()
		return
	}
	if r.onClose != nil {
		r.onClose()
	}
	if r.tool == toolPingpong && r.proc.exited() == "" && s.raw != nil {
		// The peer's expected PSN is the suite's, or a little past it
		// when the case's last request was taken: a MIDDLE at each.
		for d := range uint32(3) {
			_ = s.raw.send(pkt{op: bth.RCSendMiddle, qpn: r.qpn, psn: (s.c.ePSN + d) & bth.PSNMask, payload: pay(mtu),
				comment: "the suite ends the peer's tool: an invalid request that fails its QP"})
		}
	}
	r.proc.stop(10 * time.Second)
}

// alivePeer checks that the peer still serves a fresh QP: a new
// rc_pingpong with one iteration, a SEND each way, acknowledged, and
// the tool's exit status 0 (with Exec).
func (e *peerEnv) alivePeer(i int) error {
	cfg := e.cfg
	port := cfg.Port + 2*i + 1
	proc, err := cfg.startPeer(cfg.command(toolPingpong, port, true))
	if err != nil {
		return err
	}
	defer proc.stop(10 * time.Second)
	s := &session{raw: e.raw, peer: &remote{cfg: cfg, tool: toolPingpong, proc: proc}}
	s.c = &conn{qpn: aliveQPN + 0x1000 + uint32(i), ePSN: (rawPSN + 0x800 + uint32(i)<<12) & bth.PSNMask}
	conn, err := cfg.dial(proc, port)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rem, err := pingpong.Client(ctx, conn, pingpong.RC, []pingpong.Dest{{QPN: s.c.qpn, PSN: s.c.ePSN, GID: bth.GIDFromAddr(cfg.Local)}})
	conn.Close()
	if err != nil {
		return err
	}
	s.peer.qpn, s.peer.reqPSN = rem[0].QPN, rem[0].PSN
	// The SEND the peer answers with is the swallowed request.
	var peerSent bool
	e.raw.swallow = func(p bth.Packet) bool {
		ok := s.swallowPeerRequest(p)
		if ok && p.BTH().AckReq() {
			peerSent = true
		}
		return ok
	}
	defer func() { e.raw.swallow = nil }()
	if err := e.raw.send(s.req(bth.RCSendOnly, 0, []byte("alive?"))); err != nil {
		return err
	}
	// Both must come: the ACK of the suite's SEND, and the peer's own
	// SEND (which the swallow acknowledges), in either order.
	deadline := time.Now().Add(backstop)
	acked := false
	for !acked || !peerSent {
		if time.Now().After(deadline) {
			return fmt.Errorf("a fresh QP did not complete a SEND each way (ACK %v, its SEND %v)", acked, peerSent)
		}
		p, err := e.raw.nextWithin(s.c.qpn, s.c.qpn, 200*time.Millisecond, nil)
		if errors.Is(err, errBackstop) {
			continue
		}
		if err != nil {
			return err
		}
		if p.OpCode() != bth.RCAcknowledge || !p.AETH().Syndrome().IsACK() || uint32(p.BTH().PSN()) != s.c.ePSN {
			return fmt.Errorf("a fresh QP answered a SEND with %v", describe(p, s.c.ePSN))
		}
		acked = true
	}
	if proc.cmd == nil {
		return nil // a person runs the tool: the packets are the proof
	}
	// The packets proved the QP; the tool's end comes back through the
	// peer's exec (spooled in the lab, a second or more under TCG). Until
	// it comes, the suite keeps acknowledging the peer's SEND: an ACK of
	// its that was lost has it send again, and a QP whose send never
	// completes would never let the tool end. The wait is bounded by
	// the timeout(1) the command runs under.
	deadline = time.Now().Add(cfg.timeout() + 5*time.Second)
	for {
		_, err := e.raw.nextWithin(s.c.qpn, s.c.qpn, time.Until(deadline), proc.done)
		if errors.Is(err, errStopped) {
			break
		}
		if errors.Is(err, errBackstop) {
			return fmt.Errorf("the fresh QP's rc_pingpong did not end in %v", cfg.timeout()+5*time.Second)
		}
		if err != nil {
			return err
		}
	}
	if proc.err != nil {
		return fmt.Errorf("the fresh QP's rc_pingpong failed: %s", proc.exited())
	}
	return nil
}

// close ends a session: its peer tool for a remote peer, else the device.
func (s *session) close() {
	if s.peer != nil {
		s.closePeer()
		return
	}
	s.dev.Close()
	s.raw.Link.Close()
}

// RunPeer runs cases against a peer on another host (or process): for
// each case it starts the case's peer tool afresh (a new QP: a case may
// leave the previous one dead), takes the QP through the tool's own
// exchange, plays the case with the raw endpoint on cfg.Link, and then
// checks with a fresh rc_pingpong that the peer still serves. Cases that
// cannot be played through a tool's exchange get the verdict error with
// what they need. progress, if not nil, is called with each result.
func RunPeer(cases []Case, cfg PeerConfig, progress func(Result)) []Result {
	if cfg.Port == 0 {
		cfg.Port = pingpong.DefaultPort
	}
	raw := newRawEnd(cfg.Link, cfg.Local, netip.Addr{})
	if sp, ok := cfg.Link.(interface{ SrcPort(uint32) uint16 }); ok {
		raw.SrcPort = sp.SrcPort(rawQPN)
	}
	e := &peerEnv{cfg: &cfg, raw: raw}
	var rs []Result
	for i := range cases {
		r := e.run(&cases[i], i)
		if progress != nil {
			progress(r)
		}
		rs = append(rs, r)
	}
	return rs
}

func (e *peerEnv) run(c *Case, i int) Result {
	need := peerNeeds(c)
	if need.tool == toolNone {
		r := judge(c, Outcome{}, errors.New(need.why), false)
		r.PeerTool = "none"
		return r
	}
	if need.tool == toolPyverbs && e.cfg.Python == "" {
		r := judge(c, Outcome{}, errors.New(whyNoPython), false)
		r.PeerTool, r.PeerWhy = need.name(), need.why
		return r
	}
	if need.req != nil && e.cfg.Exec == nil {
		// A requester case is judged by how the peer's tool ended (its
		// exit status and completion status), which only a command the
		// suite runs shows.
		r := judge(c, Outcome{}, errors.New("needs the peer tool's exit and completion status, which printed commands do not give back: run it with --peer-exec"), false)
		r.PeerTool, r.PeerWhy = need.name(), need.why
		return r
	}
	if need.req != nil && need.req.expected != nil {
		cc := *c
		cc.Expected = need.req.expected
		c = &cc
	}
	var s *session
	var err error
	if need.req != nil {
		s, err = e.newReqSession(c, i, need)
	} else {
		s, err = e.newPeerSession(c, i, need)
	}
	if err != nil {
		r := judge(c, Outcome{}, fmt.Errorf("setting up the peer: %w", err), false)
		r.PeerTool, r.PeerWhy = need.name(), need.why
		r.Ladder = e.raw.diagram()
		return r
	}
	if len(c.Expected) > 0 {
		s.peer.caseAnswers = c.Expected[0].answers()
	}
	run := c.run
	if need.req != nil {
		run = need.req.play
	}
	got, err := run(s)
	lad := e.raw.diagram()
	s.close()
	e.raw.swallow = nil
	aerr := e.alivePeer(i)
	r := judge(c, got, err, aerr == nil)
	r.Ladder = lad
	r.PeerTool, r.PeerWhy = need.name(), need.why
	if aerr != nil {
		r.Observed += "; then the peer failed a fresh QP: " + aerr.Error()
		if r.Verdict == Pass {
			r.Verdict = Deviation
		}
	}
	return r
}

// answers is how many packets a peer that does what o says sends.
func (o Outcome) answers() int {
	switch {
	case o.Reply == Silent:
		return 0
	case o.CheckCount:
		return o.Count
	}
	return 1
}
