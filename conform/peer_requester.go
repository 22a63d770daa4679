package conform

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/ladder"
	"github.com/goroce/goroce/tools/perftest"
	"github.com/goroce/goroce/tools/pingpong"
	"github.com/goroce/goroce/transport"
)

// The peer as requester. The peer runs a tool's CLIENT (ibv_rc_pingpong
// HOST, ib_write_bw HOST, ...), whose QP is then the requester; the suite
// plays the tool's server through the raw endpoint: it serves the tool's
// TCP exchange and answers the requests as the case says. What the peer
// did is read from the packets it sent (each request's PSN and when it
// came) and from how the tool ended: its exit status and the completion
// status it printed ("Failed status transport retry counter exceeded
// (12) for wr_id 2", perftest's "Failed status 12: wr_id 0 syndrom
// 0x81").

// The tools' requester attributes: ibv_rc_pingpong's pp_connect_ctx and
// perftest's ctx_modify_qp_to_rts set timeout 14 (perftest's -u default),
// retry_cnt 7 and rnr_retry 7 (7: RNR retries without end); roced's
// stand-ins set the same.
const (
	toolTimeout  = 14
	toolRetryCnt = 7
)

// localACKTimeout is the tools' local ACK timeout, 4.096 µs × 2^14 (the
// requester may wait up to four times as long, never less).
var localACKTimeout = 4096 * time.Nanosecond << toolTimeout

// timerResend says whether a request the peer sent again (ev) was sent
// by its local ACK timer rather than in reaction to the suite's last
// answer. The suite sees when packets arrive (and, under load, when its
// goroutine got to stamp them), not when the peer's timer started: in the
// lab, with this host's cores held by other work, the suite's answer went
// up to 100 ms after the request came, and a request was seen 45 ms late.
// So a resend is the timer's if it came before the answer began to go,
// or so soon after it was out (within a quarter of the timeout) that it
// was on its way already, at the timer's cadence (three quarters of the
// timeout or more after the request's previous transmission). The
// windows after the answer count from when its send returned, so that a
// suite preempted before its send does not make a prompt reaction late.
//
// A play that knows which request the peer's timer would send (timerPSN:
// the oldest one the suite had not acknowledged before its answer, which
// a requester resends first, C9-112 / 9.7.6.1.3, and which that answer
// acknowledges) rules out the timer for any other PSN: an answer the busy
// host sent late no longer turns the reaction it caused into a timer's
// resend. And since no reaction to the answer sends timerPSN again, a
// resend of it at the timer's cadence is the timer's however long after
// the answer it came: a loaded peer can read the answer only after its
// timer fired (CI: ib_write_bw's stand-in resent it 17 ms or more after
// the NAK was out, then reacted to the NAK).
func (s *session) timerResend(ev peerEvent) bool {
	r := s.peer
	if r.timerPSNSet {
		return ev.psn == r.timerPSN && (ev.at.Before(r.answeredAt) || timerCadence(ev))
	}
	return ev.at.Before(r.answeredAt) || s.sinceAnswer(ev) < localACKTimeout/4 && timerCadence(ev)
}

// sinceAnswer is how long after the suite's last answer was out ev came
// (negative: while the send was under way).
func (s *session) sinceAnswer(ev peerEvent) time.Duration { return ev.at.Sub(s.peer.answerOut) }

// reaction says whether a request the peer sent again (ev) was sent in
// reaction to the suite's last answer: not the timer's, and within a
// quarter of the timeout after the answer (a round trip: a millisecond or
// two).
func (s *session) reaction(ev peerEvent) bool {
	return !s.timerResend(ev) && s.sinceAnswer(ev) < localACKTimeout/4
}

// reqRNRCode is the RNR timer the remote req-rnr-waits-timer case sends:
// long enough (about 40 ms) that a resend before it is told apart from
// the round trip.
var reqRNRCode = bth.RNRTimerCode(40 * time.Millisecond)

// settleLimit bounds how long the suite waits for a requester to end its
// work request on its own: the tools' 7 retries of 4 × 67 ms are well
// within it.
const settleLimit = 40 * time.Second

// resendLimit is how many requests sent again end the wait for a
// requester to give up: four times what its retry_cnt allows, so that a
// requester that retries without end is seen as such in a few seconds.
const resendLimit = 4 * toolRetryCnt

// peerReq says how a requester case runs against a peer's tool.
type peerReq struct {
	tool  peerTool
	size  int // the client's -s
	iters int // the client's -n
	// mode is requester.py's MODE, for toolPyverbs.
	mode string
	// pongs is how many SENDs the suite sends rc_pingpong's client at
	// once (its iterations end only when a SEND came each way); -1: the
	// case sends them itself.
	pongs int
	why   string
	play  func(s *session) (Outcome, error)
	// expected replaces the case's expectations, written for --self's
	// retry_cnt and rnr_retry of 2, where the tool's 7 decide.
	expected []Outcome
}

// Why a tool fits the requester cases that use it.
const (
	whyReqSend        = "needs a SEND from the peer's requester: ibv_rc_pingpong's client sends one per iteration, one outstanding at a time (timeout 14, retry_cnt 7, rnr_retry 7); the suite plays its server"
	whyReqSendMulti   = "needs a SEND of three packets: ibv_rc_pingpong's client with -s 3072 at path MTU 1024; the suite plays its server"
	whyReqWrites      = "needs several requests outstanding at once: ib_write_bw's client posts its -n 5 WRITEs of 64 bytes without waiting; the suite plays its server"
	whyReqRead        = "needs a READ from the peer's requester: ib_read_bw's client; the suite plays its server and answers the first READ as the case says"
	whyReqAtomic      = "needs a FETCH_ADD from the peer's requester: ib_atomic_bw's client (-A FETCH_AND_ADD); the suite plays its server and answers each with an Atomic Acknowledge"
	whyReqUnsolicited = "needs a requester with nothing outstanding, then a new request: ibv_rc_pingpong's client with -n 2 waits for the suite's SEND between its two; the suite plays its server"
	whyReqSendRead    = "needs a SEND followed by a READ on one QP, which no tool's requester mixes (rc_pingpong sends only SENDs, ib_read_bw only READs): goroce's requester.py over pyverbs (--peer-python) posts both; the suite plays an rc_pingpong server"
	whyReqRNRRetry    = "needs a requester with rnr_retry below 7, which no tool sets (ibv_rc_pingpong and perftest set 7, RNR retries without end): goroce's requester.py over pyverbs (--peer-python) sets 2; the suite plays an rc_pingpong server"
)

// whyNoPython is the error of a requester.py case run without the script.
const whyNoPython = "needs goroce's requester script on the peer, run with python3 over pyverbs (python3-pyverbs): put it there (roced conform --requester-script > requester.py) and name it with --peer-python PATH"

// retryExhausted is the end of a request nobody answers, with the tools'
// retry_cnt.
var retryExhausted = Outcome{Reply: Completed, Count: toolRetryCnt, CheckCount: true, State: transport.Err, Status: transport.RetryExcErr}

// peerReqs maps each requester case a tool can play to how.
var peerReqs = map[string]peerReq{
	"req-ack-completes": {tool: toolPingpong, why: whyReqSend, play: func(s *session) (Outcome, error) {
		return s.answerFirstReact(func(psn uint32) error { return s.peerAck(psn) }, true)
	}},
	"req-ghost-ack-ahead": {tool: toolPingpong, why: whyReqSend, play: func(s *session) (Outcome, error) {
		return s.answerFirst(func(psn uint32) error { return s.ack(psn+5, 1) })
	}},
	"req-stale-ack-behind": {tool: toolPingpong, why: whyReqSend, play: func(s *session) (Outcome, error) {
		return s.answerFirst(func(psn uint32) error { return s.ack(psn-1, 0) })
	}},
	"req-unsolicited-ack": {tool: toolPingpong, iters: 2, pongs: -1, why: whyReqUnsolicited, play: (*session).peerUnsolicited},
	"req-ghost-read-response": {tool: toolPingpong, why: whyReqSend, play: func(s *session) (Outcome, error) {
		return s.answerFirst(func(psn uint32) error {
			return s.answer(bth.RCReadResponseOnly, psn+3, pay(64), withAETH(ackSyn, 1))
		})
	}},
	"req-ack-wrong-msn": {tool: toolPingpong, why: whyReqSend, play: func(s *session) (Outcome, error) {
		return s.answerFirst(func(psn uint32) error { return s.ack(psn, 1000) })
	}},
	"req-coalesced-ack":   {tool: toolWriteBW, size: 64, iters: 5, why: whyReqWrites, play: (*session).peerCoalesced},
	"req-ack-mid-message": {tool: toolPingpong, size: 3 * mtu, why: whyReqSendMulti, play: (*session).peerMidMessage},
	"req-nak-seq-retransmits": {tool: toolWriteBW, size: 64, iters: 5, why: whyReqWrites + "; the NAK goes to the last WRITE, so that one request is acknowledged by it and one sent again, as in --self's two",
		play: (*session).peerNAKSeq},
	"req-nak-invalid-request":    nakReq(bth.NAKSyndrome(bth.NAKInvalidRequest)),
	"req-nak-remote-access":      nakReq(bth.NAKSyndrome(bth.NAKRemoteAccessError)),
	"req-nak-remote-operational": nakReq(bth.NAKSyndrome(bth.NAKRemoteOperational)),
	"req-nak-invalid-rd-request": nakReq(bth.NAKSyndrome(bth.NAKInvalidRDRequest)),
	"req-nak-reserved-code":      nakReq(bth.NAKSyndrome(bth.NAKCode(9))),
	"req-silence-retry-exhausted": {tool: toolPingpong, why: whyReqSend, expected: []Outcome{retryExhausted}, play: func(s *session) (Outcome, error) {
		psn, err := s.peerRequest()
		if err != nil {
			return Outcome{}, err
		}
		return s.peerSettle(psn, nil)
	}},
	"req-timeout-retransmits":   {tool: toolPingpong, why: whyReqSend, play: (*session).peerTimeoutRetransmits},
	"req-rnr-retry-7-unlimited": {tool: toolPingpong, why: whyReqSend, play: (*session).peerRNRStorm},
	"req-ghost-nak-seq": {tool: toolPingpong, why: whyReqSend, play: func(s *session) (Outcome, error) {
		return s.answerFirst(func(psn uint32) error { return s.nak(psn+7, bth.NAKSyndrome(bth.NAKPSNSequenceError)) })
	}},
	"req-ghost-rnr-nak": {tool: toolPingpong, why: whyReqSend, play: func(s *session) (Outcome, error) {
		return s.answerFirst(func(psn uint32) error { return s.nak(psn+7, bth.RNRNAKSyndrome(1)) })
	}},
	"req-rnr-waits-timer": {tool: toolPingpong, why: whyReqSend, play: (*session).peerRNRWaits},
	"req-read-response-short": {tool: toolReadBW, size: 64, iters: 5, why: whyReqRead, play: func(s *session) (Outcome, error) {
		return s.peerReadAnswer(func(psn uint32) error {
			return s.answer(bth.RCReadResponseOnly, psn, pay(32), withAETH(ackSyn, 1))
		})
	}},
	"req-read-response-long": {tool: toolReadBW, size: 64, iters: 5, why: whyReqRead, play: func(s *session) (Outcome, error) {
		return s.peerReadAnswer(func(psn uint32) error {
			return s.answer(bth.RCReadResponseOnly, psn, pay(128), withAETH(ackSyn, 1))
		})
	}},
	"req-read-response-middle-first": {tool: toolReadBW, size: 2 * mtu, iters: 5, why: whyReqRead + " (-s 2048: two response packets at MTU 1024)",
		play: func(s *session) (Outcome, error) {
			return s.peerReadAnswer(func(psn uint32) error {
				if err := s.answer(bth.RCReadResponseMiddle, psn, pay(mtu)); err != nil {
					return err
				}
				return s.answer(bth.RCReadResponseLast, psn+1, pay(mtu), withAETH(ackSyn, 1))
			})
		}},
	"req-atomic-ack-for-send": {tool: toolPingpong, why: whyReqSend, play: func(s *session) (Outcome, error) {
		psn, err := s.peerRequest()
		if err != nil {
			return Outcome{}, err
		}
		if err := s.answer(bth.RCAtomicAcknowledge, psn, nil, withAETH(ackSyn, 1), withOrig(7)); err != nil {
			return Outcome{}, err
		}
		return s.peerSettle(psn, nil)
	}},
	"req-atomic-ack-completes": {tool: toolAtomicBW, size: 8, iters: 5, why: whyReqAtomic, play: (*session).peerAtomics},
	// The SEND is not acknowledged; the READ response for the PSN after it
	// acknowledges it (C9-138, IBA 9.7.5.1.3: a response implicitly
	// acknowledges the requests before it): both complete, the SEND
	// first, and nothing is sent again.
	"req-implicit-ack-by-read-response": {tool: toolPyverbs, mode: "send-read", pongs: -1, why: whyReqSendRead,
		play: func(s *session) (Outcome, error) {
			psn, err := s.peerRequest()
			if err != nil {
				return Outcome{}, err
			}
			rd, err := s.peerRequest()
			if err != nil {
				return Outcome{}, err
			}
			if op := s.raw.lastOp; op != bth.RCReadRequest || rd != (psn+1)&bth.PSNMask {
				return Outcome{}, fmt.Errorf("requester.py sent %v at psn %+d where its READ was due at +1", op, psnDiff(rd, psn))
			}
			if err := s.answer(bth.RCReadResponseOnly, rd, pay(64), withAETH(ackSyn, 2)); err != nil {
				return Outcome{}, err
			}
			return s.peerSettle(psn, nil)
		}},
	// Every transmission of the SEND gets an RNR NAK; rnr_retry 2 allows
	// two more (C9-151), then the work request ends in error.
	"req-rnr-retry-exhausted": {tool: toolPyverbs, mode: "rnr-retry-2", pongs: -1, why: whyReqRNRRetry,
		play: func(s *session) (Outcome, error) {
			psn, err := s.peerRequest()
			if err != nil {
				return Outcome{}, err
			}
			rnr := func(psn uint32) error { return s.nak(psn, bth.RNRNAKSyndrome(1)) }
			if err := rnr(psn); err != nil {
				return Outcome{}, err
			}
			return s.peerSettle(psn, func(ev peerEvent) error { return rnr(ev.psn) })
		}},
}

// nakReq answers rc_pingpong's SEND with syndrome syn and waits for the
// end of its work request.
func nakReq(syn bth.Syndrome) peerReq {
	return peerReq{tool: toolPingpong, why: whyReqSend, play: func(s *session) (Outcome, error) {
		psn, err := s.peerRequest()
		if err != nil {
			return Outcome{}, err
		}
		// The NAKed request is the only one outstanding, so it is the
		// one the peer's timer would send again: a loaded peer whose
		// timer fired before it read the NAK resends it at the timer's
		// cadence, however long after the NAK went (timerResend).
		s.peer.timerPSN, s.peer.timerPSNSet = psn, true
		if err := s.nak(psn, syn); err != nil {
			return Outcome{}, err
		}
		return s.peerSettle(psn, nil)
	}}
}

// requesterNeeds is peerNeeds for a requester case.
func requesterNeeds(c *Case) peerNeed {
	r, ok := peerReqs[c.ID]
	if !ok {
		return peerNeed{toolNone, "needs a way to play it against a peer's tool: none written for this case", nil}
	}
	return peerNeed{r.tool, r.why, &r}
}

// clientCommand is the peer's client command line for a requester case:
// the tool connects to the suite's address.
func (c *PeerConfig) clientCommand(r *peerReq, port int) []string {
	if r.tool == toolPyverbs {
		dev := c.Dev
		if dev == "" {
			dev = "-"
		}
		return []string{"timeout", strconv.Itoa(int(c.timeout().Seconds())), "python3", c.Python, r.mode,
			c.Local.String(), strconv.Itoa(port), dev, strconv.Itoa(c.GID)}
	}
	w := c.command(r.tool, port, false)
	// command gives the server's line: replace its sizes and add the
	// suite's address as the tool's host operand.
	var out []string
	for i := 0; i < len(w); i++ {
		switch w[i] {
		case "-s", "-n":
			i++
			continue
		case "-e":
			continue
		}
		out = append(out, w[i])
	}
	size, iters := r.size, r.iters
	if size == 0 {
		size = 64
	}
	if iters == 0 {
		iters = 1
	}
	out = append(out, "-s", strconv.Itoa(size), "-n", strconv.Itoa(iters))
	if r.tool == toolAtomicBW {
		out = append(out, "-A", "FETCH_AND_ADD")
	}
	return append(out, c.Local.String())
}

// newReqSession listens for the case's peer client, starts it, serves its
// exchange as the tool's server and sends the SENDs rc_pingpong's client
// waits for.
func (e *peerEnv) newReqSession(c *Case, i int, need peerNeed) (*session, error) {
	cfg := e.cfg
	port := cfg.Port + 2*i
	rq := need.req
	r := &remote{cfg: cfg, tool: need.tool, client: rq, state: transport.RTS, lastAt: map[uint32]time.Time{}}
	s := &session{raw: e.raw, set: c.setup, peer: r}
	s.c = &conn{qpn: rawQPN + 0x100 + uint32(i), ePSN: (rawPSN + uint32(i)<<12) & bth.PSNMask}
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Local.String(), strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("listening for the peer's client: %w", err)
	}
	defer ln.Close()
	e.raw.reset()
	e.raw.swallow = s.swallowPeerACK
	if r.proc, err = cfg.startPeer(cfg.clientCommand(rq, port)); err != nil {
		return nil, err
	}
	fail := func(err error) (*session, error) {
		s.close()
		return nil, err
	}
	conn, err := e.accept(ln, r.proc)
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	local := bth.GIDFromAddr(cfg.Local)
	connect := func(qpn, psn uint32, gid [16]byte) error {
		if bth.GID(gid).Addr() == (netip.Addr{}) || gid == ([16]byte{}) {
			return errors.New("the peer sent no GID (is its GID index right?)")
		}
		r.qpn, s.c.peerPSN = qpn, psn
		e.raw.Dst = bth.GID(gid).Addr()
		e.raw.connect(ladder.Endpoint{Addr: cfg.Local, QPN: s.c.qpn}, ladder.Endpoint{Addr: e.raw.Dst, QPN: qpn})
		return nil
	}
	switch need.tool {
	case toolPingpong, toolPyverbs:
		_, err := pingpong.Server(ctx, conn, pingpong.RC, []pingpong.Dest{{QPN: s.c.qpn, PSN: s.c.ePSN, GID: local}},
			func(rem []pingpong.Dest) error { return connect(rem[0].QPN, rem[0].PSN, rem[0].GID) })
		conn.Close()
		if err != nil {
			return fail(err)
		}
	default:
		if err := e.perftestServe(ctx, conn, s, rq, connect); err != nil {
			conn.Close()
			return fail(err)
		}
	}
	if need.tool == toolPingpong && rq.pongs >= 0 {
		r.pongs = max(rq.iters, 1)
	}
	return s, nil
}

// accept takes the peer client's connection, or fails when its command
// ends first or it does not come in time.
func (e *peerEnv) accept(ln net.Listener, p *peerProc) (net.Conn, error) {
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	select {
	case r := <-ch:
		return r.c, r.err
	case <-p.done:
		ln.Close()
		return nil, fmt.Errorf("the peer's client ended before it connected (%s)", p.exited())
	case <-time.After(e.cfg.start()):
		ln.Close()
		return nil, fmt.Errorf("the peer's client did not connect to %v in %v", ln.Addr(), e.cfg.start())
	}
}

// perftestServe runs a perftest server's side of the exchange up to the
// traffic, and leaves a goroutine that serves its end (the BW report, the
// closing handshake) once the client gets there.
func (e *peerEnv) perftestServe(ctx context.Context, conn net.Conn, s *session, rq *peerReq,
	connect func(qpn, psn uint32, gid [16]byte) error) error {
	t := rq.tool.perftest()
	cfg, err := perftest.ParseFlags(t, []string{"-x", strconv.Itoa(e.cfg.GID), "-s", strconv.Itoa(rq.size),
		"-n", strconv.Itoa(rq.iters), "-F"})
	if err != nil {
		return err
	}
	cfg.Resolve(perftest.MTU(3), 16, cfg.Claim)
	sess := perftest.NewSession(conn, perftest.Server, cfg.Claim)
	if err := sess.ExchangeVersions(ctx); err != nil {
		return err
	}
	if _, err := sess.ExchangeSysData(ctx, perftest.DefaultSysData); err != nil {
		return err
	}
	pmtu, err := sess.ExchangeMTU(ctx, perftest.MTUFromBytes(mtu))
	if err != nil {
		return err
	}
	if pmtu.Bytes() != mtu {
		return fmt.Errorf("the peer's MTU is %d: the suite's cases are written for %d", pmtu.Bytes(), mtu)
	}
	cfg.MTU = pmtu.Bytes()
	if perftest.Negotiates(sess.Local, sess.Peer) {
		if _, err := sess.Negotiate(ctx, cfg.Params(perftest.DeviceAttr{MaxQPRdAtom: 16}), cfg.OutReads); err != nil {
			return err
		}
	}
	steps := perftest.Plan(cfg.Shape(pmtu), sess.Local, sess.Peer)
	// The suite's region: an address and R_Key the peer's requests carry
	// and nobody checks (the suite answers as the case says).
	mine := perftest.Record{OutReads: uint16(cfg.OutReads), QPN: s.c.qpn, PSN: s.c.ePSN, GID: bth.GIDFromAddr(e.cfg.Local),
		RKey: 0x1234, VAddr: 0x10000}
	i := 0
	for ; i < len(steps) && steps[i].Kind != perftest.StepTraffic; i++ {
		if steps[i].Kind != perftest.StepRecord {
			continue
		}
		rec, err := sess.ExchangeRecord(ctx, mine)
		if err != nil {
			return err
		}
		if s.peer.qpn == 0 {
			if err := connect(rec.QPN, rec.PSN, rec.GID); err != nil {
				return err
			}
		}
	}
	rest := steps[i:]
	fctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.peer.onClose = func() {
		// The client reaches its end only once its work completed; a
		// client that failed has gone, and its connection with it.
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
		cancel()
		conn.Close()
	}
	go func() {
		defer close(done)
		for _, st := range rest {
			var err error
			switch st.Kind {
			case perftest.StepBWReport:
				_, err = sess.ExchangeBWReport(fctx, perftest.BWReport{})
			case perftest.StepRecord:
				_, err = sess.ExchangeRecord(fctx, mine)
			case perftest.StepClose:
				err = sess.Close(fctx, 2*time.Second)
			}
			if err != nil {
				return
			}
		}
	}()
	return nil
}

// swallowPeerACK takes out of the stream the peer's acknowledgements of
// the suite's own SENDs (rc_pingpong's client waits for one per
// iteration): a requester case judges the peer's requests only.
func (s *session) swallowPeerACK(p bth.Packet) bool {
	return p.OpCode() == bth.RCAcknowledge
}

// pong sends rc_pingpong's client the SEND its iteration waits for.
func (s *session) pong() error {
	p := s.req(bth.RCSendOnly, 0, pay(64))
	p.comment = "the suite's SEND, which the peer's rc_pingpong client waits for besides its own SEND's completion"
	s.c.ePSN = (s.c.ePSN + 1) & bth.PSNMask
	return s.raw.send(p)
}

// peerEvent is the peer requester's next request, or the end of its tool.
type peerEvent struct {
	p      bth.Packet
	psn    uint32
	at     time.Time
	resent bool          // a PSN it sent before
	since  time.Duration // for a resent PSN: since it came last
	exited bool
}

// nextEvent waits for the peer's next request or the end of its tool, at
// most d.
func (s *session) nextEvent(d time.Duration) (peerEvent, error) {
	r := s.peer
	p, err := s.raw.nextWithin(s.c.qpn, s.c.qpn, d, r.proc.done)
	if errors.Is(err, errStopped) {
		return peerEvent{exited: true}, nil
	}
	if err != nil {
		return peerEvent{}, err
	}
	op := p.OpCode()
	if op == bth.RCAtomicAcknowledge || isReadResponse(op) {
		return peerEvent{}, fmt.Errorf("the peer's responder sent %v", describe(p, s.c.peerPSN))
	}
	ev := peerEvent{p: p, psn: uint32(p.BTH().PSN()), at: s.raw.lastAt}
	if last, ok := r.lastAt[ev.psn]; ok {
		ev.resent, ev.since = true, ev.at.Sub(last)
	} else if !r.seen || psnDiff(ev.psn, r.hi) > 0 {
		r.hi, r.seen = ev.psn, true
	}
	r.lastAt[ev.psn] = ev.at
	// rc_pingpong's client moves its QP to RTR only after the exchange:
	// its first request shows that it takes the suite's SENDs now.
	for ; r.pongs > 0; r.pongs-- {
		if err := s.pong(); err != nil {
			return ev, err
		}
	}
	return ev, nil
}

// peerRequest reads the peer's next request, which must be a new one, and
// returns its PSN.
func (s *session) peerRequest() (uint32, error) {
	for {
		ev, err := s.nextEvent(backstop)
		switch {
		case err != nil:
			return 0, fmt.Errorf("waiting for the peer's request: %w", err)
		case ev.exited:
			return 0, fmt.Errorf("the peer's tool ended before it sent its request (%s)", s.peer.proc.exited())
		case ev.resent && timerCadence(ev):
			// Its local ACK timer's resend of a request the suite has
			// answered: a loaded tool can fire its timer before it
			// reads the answer (CI: rc_pingpong's stand-in, in
			// req-unsolicited-ack). The answer covers it; wait on.
			continue
		case ev.resent:
			return 0, fmt.Errorf("the peer sent %v again where a new request was due", describe(ev.p, s.c.peerPSN))
		}
		return ev.psn, nil
	}
}

// timerCadence says whether ev, a request sent again, came at least three
// quarters of the local ACK timeout after it came last: as the peer's
// timer sends it, never sooner.
func timerCadence(ev peerEvent) bool { return ev.since >= localACKTimeout*3/4 }

// peerAck acknowledges the peer's requests up to psn, with the MSN of
// the messages they complete.
func (s *session) peerAck(psn uint32) error {
	r := s.peer
	r.msn++
	return s.ack(psn, r.msn)
}

// ended describes how the peer's tool ended: its completion status from
// what it printed, or success with exit status 0.
func (s *session) ended() (Outcome, error) {
	p := s.peer.proc
	if p.cmd == nil {
		return Outcome{}, errors.New("the tool's end is not visible with printed commands")
	}
	o := Outcome{Reply: Completed, State: transport.RTS, Status: transport.Success}
	if p.err == nil {
		return o, nil
	}
	st, ok := toolStatus(p.output())
	if !ok {
		return Outcome{}, fmt.Errorf("the peer's tool failed without a completion status (%s)", p.exited())
	}
	// A completion in error moves the QP to the error state (IBA
	// 10.8.3.3: any error completion of a send WR).
	o.Status, o.State = st, transport.Err
	return o, nil
}

var (
	pingpongStatus = regexp.MustCompile(`Failed status [^()]*\((\d+)\)`)
	perftestStatus = regexp.MustCompile(`Failed status (\d+):`)
)

// toolStatus finds the completion status a tool printed.
func toolStatus(out string) (transport.WCStatus, bool) {
	for _, re := range []*regexp.Regexp{pingpongStatus, perftestStatus} {
		if m := re.FindStringSubmatch(out); m != nil {
			n, err := strconv.Atoi(m[1])
			if err == nil && n >= 0 && n < 256 {
				return transport.WCStatus(n), true
			}
		}
	}
	return 0, false
}

// peerSettle answers nothing more (but calls on, if set, with each new
// request) and waits for the peer's tool to end, counting how often the
// peer sent a request again after the suite's last answer.
func (s *session) peerSettle(ref uint32, on func(ev peerEvent) error) (Outcome, error) {
	deadline := time.Now().Add(settleLimit)
	sent := 0
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return Outcome{}, fmt.Errorf("the peer's work request did not end in %v (%d requests sent again)", settleLimit, sent)
		}
		ev, err := s.nextEvent(left)
		if errors.Is(err, errBackstop) {
			continue
		}
		if err != nil {
			return Outcome{}, err
		}
		if ev.exited {
			o, err := s.ended()
			o.Count, o.CheckCount = sent, true
			return o, err
		}
		// A resend the timer sent as the suite's answer went was not
		// sent again after it.
		if ev.resent && !s.timerResend(ev) {
			sent++
		}
		if sent > resendLimit {
			return Outcome{Reply: Retransmit, PSN: psnDiff(ev.psn, ref), CheckPSN: true, Count: sent, CheckCount: true, State: transport.RTS, Status: AnyStatus,
				Detail: fmt.Sprintf("still sending requests again after %d, where retry_cnt is %d: its work request does not end", sent, toolRetryCnt)}, nil
		}
		if on != nil {
			if err := on(ev); err != nil {
				return Outcome{}, err
			}
		}
	}
}

// peerReact describes what the peer did next after the suite's answer to
// the request at ref: a request sent again once its local ACK timeout ran
// out shows a request the answer left outstanding (Waiting: nothing
// completed, nothing sent again in reaction); one sent again sooner is a
// reaction to the answer; the tool's end is its work request completed.
func (s *session) peerReact(ref uint32) (Outcome, error) { return s.react(ref, false) }

// react is peerReact; completes says the answer completes the request.
// A loaded tool can then fire its local ACK timer before it reads the
// answer (CI, once, in req-ack-completes: the resend 67 ms after the
// SEND, the ACK long out): its resends of ref at the timer's cadence are
// skipped, up to resendLimit, and noted, since a tool that then completes
// with no other answer completed on this one; one that ignored it retries
// until it fails, a deviation still, as is a resend the timer did not send.
func (s *session) react(ref uint32, completes bool) (Outcome, error) {
	late := 0
	for {
		ev, err := s.nextEvent(backstop)
		if err != nil {
			return Outcome{}, err
		}
		switch {
		case ev.exited:
			o, err := s.ended()
			o.CheckCount = true
			if late > 0 && err == nil {
				o.Detail = fmt.Sprintf("its local ACK timer sent psn +0 again %d time(s) before it read the ACK (a loaded host), and the ACK then completed it", late)
			}
			return o, err
		case !ev.resent:
			return Outcome{}, fmt.Errorf("the peer sent a new request %v where the one at psn +0 was outstanding", describe(ev.p, ref))
		case completes && psnDiff(ev.psn, ref) == 0 && timerCadence(ev) && late < resendLimit:
			late++
			continue
		case s.timerResend(ev) && s.sinceAnswer(ev) < localACKTimeout/4:
			continue // the timer's resend, which crossed the answer
		case !s.reaction(ev):
			return Outcome{Reply: Waiting, CheckCount: true, State: transport.RTS, Status: AnyStatus,
				Detail: fmt.Sprintf("then, at its local ACK timeout (%v), it sent psn %+d again, %v after it came before",
					localACKTimeout.Round(time.Millisecond), psnDiff(ev.psn, ref), ev.since.Round(time.Millisecond))}, nil
		}
		return Outcome{Reply: Retransmit, PSN: psnDiff(ev.psn, ref), CheckPSN: true, Count: 1, CheckCount: true, State: transport.RTS,
			Status: AnyStatus, Detail: fmt.Sprintf("sent again %v after the suite's answer", s.sinceAnswer(ev).Round(time.Millisecond))}, nil
	}
}

// answerFirst answers the peer's first request and describes what the
// peer did next.
func (s *session) answerFirst(answer func(psn uint32) error) (Outcome, error) {
	return s.answerFirstReact(answer, false)
}

// answerFirstReact is answerFirst; completes says the answer completes
// the request (react).
func (s *session) answerFirstReact(answer func(psn uint32) error, completes bool) (Outcome, error) {
	psn, err := s.peerRequest()
	if err != nil {
		return Outcome{}, err
	}
	if err := answer(psn); err != nil {
		return Outcome{}, err
	}
	return s.react(psn, completes)
}

// peerUnsolicited: rc_pingpong's first SEND is acknowledged, an ACK comes
// for the PSN it will send next, and only then the suite's SENDs that
// let it go on: its second SEND must stay outstanding until its local
// ACK timeout, the unsolicited ACK having completed nothing.
func (s *session) peerUnsolicited() (Outcome, error) {
	psn, err := s.peerRequest()
	if err != nil {
		return Outcome{}, err
	}
	if err := s.peerAck(psn); err != nil {
		return Outcome{}, err
	}
	if err := s.ack(psn+1, 2); err != nil {
		return Outcome{}, err
	}
	for range 2 {
		if err := s.pong(); err != nil {
			return Outcome{}, err
		}
	}
	next, err := s.peerRequest()
	if err != nil {
		return Outcome{}, err
	}
	if d := psnDiff(next, psn); d != 1 {
		return Outcome{Reply: Reply(fmt.Sprintf("its next SEND came at psn %+d, not +1", d)), State: transport.RTS, Status: AnyStatus}, nil
	}
	return s.peerReact(next)
}

// peerCoalesced: ib_write_bw's WRITEs all come, and one ACK of the last
// answers them all; the tool must complete them without sending any again.
func (s *session) peerCoalesced() (Outcome, error) {
	first, last, err := s.peerBurst()
	if err != nil {
		return Outcome{}, err
	}
	r := s.peer
	r.msn += uint32(psnDiff(last, first))
	if err := s.peerAck(last); err != nil {
		return Outcome{}, err
	}
	return s.peerSettle(first, nil)
}

// peerBurst reads the -n requests the perftest client posts at once.
func (s *session) peerBurst() (first, last uint32, err error) {
	for i := range s.peer.client.iters {
		psn, err := s.peerRequest()
		if err != nil {
			return 0, 0, err
		}
		if i == 0 {
			first = psn
		}
		last = psn
	}
	return first, last, nil
}

// peerMidMessage: the ACK of the middle packet of a three-packet SEND
// completes nothing; the peer sends the rest again at its timeout.
func (s *session) peerMidMessage() (Outcome, error) {
	psn, err := s.peerRequest()
	if err != nil {
		return Outcome{}, err
	}
	for range 2 {
		if _, err := s.peerRequest(); err != nil {
			return Outcome{}, err
		}
	}
	if err := s.ack(psn+1, 0); err != nil {
		return Outcome{}, err
	}
	return s.peerReact(psn)
}

// peerNAKSeq: a sequence error NAK for the last of the WRITEs; the peer
// sends it again (and nothing else), which the suite then acknowledges.
func (s *session) peerNAKSeq() (Outcome, error) {
	first, last, err := s.peerBurst()
	if err != nil {
		return Outcome{}, err
	}
	ref := (last - 1) & bth.PSNMask
	r := s.peer
	// The NAK acknowledges the WRITEs before it (IBA 9.7.5.1.3). Until it
	// arrives all are outstanding, so the peer's timer would resend the
	// first; its reaction resends the last.
	r.msn += uint32(psnDiff(last, first))
	if first != last {
		r.timerPSN, r.timerPSNSet = first, true
	}
	if err := s.answer(bth.RCAcknowledge, last, nil, withAETH(bth.NAKSyndrome(bth.NAKPSNSequenceError), r.msn)); err != nil {
		return Outcome{}, err
	}
	var resends []peerEvent // sent again, each marked whether the timer's
	var timers []bool
	o, err := s.peerSettle(ref, func(ev peerEvent) error {
		if !ev.resent {
			return fmt.Errorf("the peer sent a new request %v", describe(ev.p, ref))
		}
		resends, timers = append(resends, ev), append(timers, s.timerResend(ev))
		if ev.psn == last {
			return s.peerAck(last)
		}
		return nil
	})
	if err != nil {
		return o, err
	}
	pick, probes := nakSeqReaction(first, last, resends, timers)
	if probes > 0 {
		o.Count -= probes
		o.Detail = fmt.Sprintf("its local ACK timer sent psn %+d again alone %d time(s), beside its reaction to the NAK", psnDiff(first, ref), probes)
	}
	if pick != nil {
		o.Reply = Retransmit
		o.PSN, o.CheckPSN = psnDiff(pick.psn, ref), true
	}
	return o, nil
}

// nakSeqReaction picks, of the requests sent again after a sequence
// error NAK for last (timer[i]: resends[i] was judged the timer's), the
// reaction to the NAK: the first not the timer's. One exception: the
// first WRITE sent again alone, the NAKed one sent again and nothing
// between them is a one-packet probe at the local ACK timeout (goroce's
// completer sends the oldest request so) beside the reaction, whatever a
// loaded host did to the stamps that judge the probe's cadence (CI: the
// first sent again less than three quarters of the timeout after it came
// before); a requester that went back to the first in reaction would send
// the ones between again too. probes is how many such resends of the
// first were counted as sent again.
func nakSeqReaction(first, last uint32, resends []peerEvent, timer []bool) (pick *peerEvent, probes int) {
	var other *peerEvent
	middle := false
	for i := range resends {
		ev := &resends[i]
		if d := psnDiff(ev.psn, first); d > 0 && d < psnDiff(last, first) {
			middle = true
		}
		if timer[i] {
			continue
		}
		if pick == nil {
			pick = ev
		}
		if ev.psn == first {
			probes++
		} else if other == nil {
			other = ev
		}
	}
	if first != last && probes > 0 && !middle && other != nil && other.psn == last {
		return other, probes
	}
	return pick, 0
}

// nextResend waits for the peer to send its outstanding request (at ref)
// again, skipping, if skipTimer, the timer's resends that crossed the
// suite's answer. If the tool ends first, end describes how.
func (s *session) nextResend(ref uint32, skipTimer bool) (ev peerEvent, end *Outcome, err error) {
	for {
		if ev, err = s.nextEvent(backstop); err != nil {
			return ev, nil, err
		}
		switch {
		case ev.exited:
			o, err := s.ended()
			o.CheckCount = true
			return ev, &o, err
		case !ev.resent:
			return ev, nil, fmt.Errorf("the peer sent a new request %v where the one at psn +0 was outstanding", describe(ev.p, ref))
		case skipTimer && s.timerResend(ev) && s.sinceAnswer(ev) < localACKTimeout/4:
			continue
		}
		return ev, nil, nil
	}
}

// peerTimeoutRetransmits: nothing answers the SEND until the peer sends it
// again, which only its local ACK timeout can make it do (the suite sent
// nothing); that is acknowledged, and the request must complete. How long
// after the first the resend came is reported, not judged: what the suite
// sees of it is the peer's timer plus the packets' transit, which under
// TCG varies by tens of milliseconds.
func (s *session) peerTimeoutRetransmits() (Outcome, error) {
	psn, err := s.peerRequest()
	if err != nil {
		return Outcome{}, err
	}
	ev, end, err := s.nextResend(psn, false)
	if err != nil || end != nil {
		return deref(end), err
	}
	if err := s.peerAck(ev.psn); err != nil {
		return Outcome{}, err
	}
	fin, err := s.peerSettle(psn, nil)
	if err != nil {
		return fin, err
	}
	end = &fin
	return Outcome{Reply: Retransmit, PSN: psnDiff(ev.psn, psn), CheckPSN: true, Count: 1 + end.Count, CheckCount: true,
		State: end.State, Status: end.Status, Detail: fmt.Sprintf("%v after it came first", ev.since.Round(time.Millisecond))}, nil
}

// peerRNRStorm answers the SEND and each resend with an RNR NAK (timer
// 0.01 ms), ten times: with rnr_retry 7 the peer must send it every time.
func (s *session) peerRNRStorm() (Outcome, error) {
	psn, err := s.peerRequest()
	if err != nil {
		return Outcome{}, err
	}
	sent := 0
	for range 10 {
		if err := s.nak(psn, bth.RNRNAKSyndrome(1)); err != nil {
			return Outcome{}, err
		}
		_, end, err := s.nextResend(psn, true)
		if err != nil || end != nil {
			o := deref(end)
			o.Count = sent
			return o, err
		}
		sent++
	}
	return Outcome{Reply: Retransmit, PSN: 0, CheckPSN: true, Count: sent, CheckCount: true, State: transport.RTS, Status: AnyStatus}, nil
}

// peerRNRWaits: an RNR NAK with a timer of about 40 ms; the peer must not
// send the request again before it ran out.
func (s *session) peerRNRWaits() (Outcome, error) {
	psn, err := s.peerRequest()
	if err != nil {
		return Outcome{}, err
	}
	if err := s.nak(psn, bth.RNRNAKSyndrome(reqRNRCode)); err != nil {
		return Outcome{}, err
	}
	// From when the NAK began to go: a send the host delayed never makes
	// a resend look early.
	sentAt := s.peer.answeredAt
	ev, end, err := s.nextResend(psn, true)
	if err != nil || end != nil {
		return deref(end), err
	}
	wait := ev.at.Sub(sentAt)
	o := Outcome{Reply: Retransmit, PSN: psnDiff(ev.psn, psn), CheckPSN: true, Count: 1, CheckCount: true, State: transport.RTS, Status: AnyStatus,
		Detail: fmt.Sprintf("%v after the RNR NAK (timer %v)", wait.Round(time.Millisecond), bth.RNRTimer(reqRNRCode))}
	if wait < bth.RNRTimer(reqRNRCode) {
		o.Reply = "retransmission before the RNR timer ran out"
	}
	return o, nil
}

// peerReadAnswer answers the first of ib_read_bw's READs as the case says,
// and none of the others, and waits for the tool's end.
func (s *session) peerReadAnswer(answer func(psn uint32) error) (Outcome, error) {
	psn, err := s.peerRequest()
	if err != nil {
		return Outcome{}, err
	}
	if op := s.raw.lastOp; op != bth.RCReadRequest {
		return Outcome{}, fmt.Errorf("the peer's first request is %v, not a READ", op)
	}
	if err := answer(psn); err != nil {
		return Outcome{}, err
	}
	return s.peerSettle(psn, nil)
}

// peerAtomics answers each of ib_atomic_bw's FETCH_ADDs with an Atomic
// Acknowledge of an original value, until the tool ends.
func (s *session) peerAtomics() (Outcome, error) {
	first, err := s.peerRequest()
	if err != nil {
		return Outcome{}, err
	}
	r := s.peer
	reply := func(psn uint32) error {
		r.msn++
		return s.answer(bth.RCAtomicAcknowledge, psn, nil, withAETH(ackSyn, r.msn), withOrig(0x1122334455667788))
	}
	if err := reply(first); err != nil {
		return Outcome{}, err
	}
	o, err := s.peerSettle(first, func(ev peerEvent) error {
		if ev.resent {
			return nil
		}
		if op := ev.p.OpCode(); op != bth.RCFetchAdd {
			return fmt.Errorf("the peer sent %v where a FETCH_ADD was due", op)
		}
		return reply(ev.psn)
	})
	if err == nil && o.Status == transport.Success {
		o.Detail = "the tool does not show the original values it got (0x1122334455667788 each)"
	}
	return o, err
}

// closeClient ends the case's peer client: its outstanding requests are
// acknowledged, so that it completes and ends by itself.
func (s *session) closeClient() {
	r := s.peer
	if r.proc.exited() == "" && r.seen && s.raw != nil {
		r.msn++
		_ = s.raw.send(pkt{op: bth.RCAcknowledge, qpn: r.qpn, psn: r.hi, exts: []func([]byte, *bth.Info){withAETH(ackSyn, r.msn)},
			comment: "the suite acknowledges everything, so that the peer's tool ends"})
	}
	if r.onClose != nil {
		r.onClose()
	}
	r.proc.stop(10 * time.Second)
}

// deref is *o, or the zero Outcome.
func deref(o *Outcome) Outcome {
	if o == nil {
		return Outcome{}
	}
	return *o
}
