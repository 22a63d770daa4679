package conform

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/manualclock"
	"github.com/goroce/goroce/ladder"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

// setup is what a case changes in the peer's QP and resources.
type setup struct {
	access   transport.Access // the peer QP's access flags (0: every remote right)
	noRecv   bool             // post no receive
	retry    uint8            // retry_cnt (0: 2)
	rnrRetry uint8            // rnr_retry (0: 2)
	minRNR   uint8            // the responder's RNR timer code (0: 12)
}

const (
	allAccess = transport.LocalWrite | transport.RemoteWrite | transport.RemoteRead | transport.RemoteAtomic
	regionLen = 64 << 10
	recvLen   = 4096
	nRecv     = 4
	// timeout is the peer's local ACK timeout exponent: 4.096 µs × 2^14.
	timeout = 14
	// rto is longer than that timeout: advancing the clock by it fires
	// the timer once.
	rto = 100 * time.Millisecond
	// rawQPN is the suite's QP number; aliveQPN its QP for the check that
	// the peer still serves a fresh QP.
	rawQPN   = 0x99
	fenceQPN = 0x5e
	aliveQPN = 0x3a1
	rawPSN   = 0x100000 // the first PSN the suite sends
	mtu      = 1024
)

// conn is one connection between a peer QP and the suite.
type conn struct {
	q        *transport.QP
	scq, rcq *transport.CQ
	qpn      uint32 // the suite's QP number
	ePSN     uint32 // the next PSN the suite sends: the peer's expected PSN
	peerPSN  uint32 // the first PSN the peer sends
}

// session is one case's run against a goroce peer: a device over the
// in-memory link, its clock, and the suite's endpoint.
type session struct {
	clk *manualclock.Clock
	dev *transport.Device
	pd  *transport.PD
	mr  *transport.MR
	raw *rawEnd
	set setup
	c   *conn // the connection a case works on
	f   *conn // the fence's connection
	// peer is set when the peer is another host's tool (RunPeer): then
	// dev, pd, mr, clk and f are nil, and c.q too.
	peer *remote
}

// peerQPN is the number of the peer's QP the case works on.
func (s *session) peerQPN() uint32 {
	if s.peer != nil {
		return s.peer.qpn
	}
	return s.c.q.QPN()
}

// va is an address off bytes into the peer's region.
func (s *session) va(off uint64) uint64 {
	if s.peer != nil {
		return s.peer.va + off%peerSpan
	}
	return s.mr.Addr() + off
}

// rkey is the R_Key of the peer's region.
func (s *session) rkey() uint32 {
	if s.peer != nil {
		return s.peer.rkey
	}
	return s.mr.RKey()
}

// pastEnd is an address d bytes from the end of the peer's region. A
// remote peer's exchange does not say how long its region is: there it
// is 1 GiB past the address the peer gave, far outside any tool's buffer.
func (s *session) pastEnd(d int) uint64 {
	if s.peer != nil {
		return s.peer.va + 1<<30 + uint64(d)
	}
	return s.mr.Addr() + uint64(regionLen+d)
}

// qpState is the peer QP's state: read from the device, or for a remote
// peer what the last fence showed.
func (s *session) qpState() transport.QPState {
	if s.peer != nil {
		return s.peer.state
	}
	return s.c.q.State()
}

// msnBefore is how many messages the peer's responder completed on the
// case's QP before the case (a remote peer's primer).
func (s *session) msnBefore() uint32 {
	if s.peer != nil {
		return 1
	}
	return 0
}

var (
	peerAddr = netip.MustParseAddr("10.0.0.1")
	rawAddr  = netip.MustParseAddr("10.0.0.9")
)

// newSelfSession opens a goroce device over a fresh in-memory network,
// with its timers on a fake clock, and connects one RC QP to the suite.
func newSelfSession(set setup) (*session, error) {
	net := mem.NewNet(1)
	pl, err := net.Attach(peerAddr, mem.Options{})
	if err != nil {
		return nil, err
	}
	rl, err := net.Attach(rawAddr, mem.Options{})
	if err != nil {
		pl.Close()
		return nil, err
	}
	clk := manualclock.New()
	dev, err := transport.Open(pl, transport.Options{Clock: clk})
	if err != nil {
		pl.Close()
		rl.Close()
		return nil, err
	}
	s := &session{clk: clk, dev: dev, raw: newRawEnd(rl, rawAddr, peerAddr), set: set}
	s.pd = dev.AllocPD()
	if s.mr, err = s.pd.Register(make([]byte, regionLen), allAccess); err != nil {
		s.close()
		return nil, err
	}
	if s.f, err = s.connect(fenceQPN, setup{access: transport.LocalWrite, noRecv: true}); err != nil {
		s.close()
		return nil, err
	}
	if s.c, err = s.connect(rawQPN, set); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// connect creates a peer QP and connects it to the suite's QP rqpn.
func (s *session) connect(rqpn uint32, set setup) (*conn, error) {
	c := &conn{qpn: rqpn, ePSN: rawPSN, scq: s.dev.CreateCQ(64), rcq: s.dev.CreateCQ(64)}
	var err error
	c.q, err = s.dev.CreateQP(s.pd, transport.QPInitAttr{Type: transport.RC, SendCQ: c.scq, RecvCQ: c.rcq,
		Cap: transport.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, err
	}
	local, err := s.dev.LocalEndpoint(c.q)
	if err != nil {
		return nil, err
	}
	c.peerPSN = local.PSN
	remote := transport.Endpoint{QPN: rqpn, PSN: rawPSN, GID: bth.GIDFromAddr(rawAddr), MTU: transport.MTU1024}
	o := transport.ConnectOptions{Access: set.access, Timeout: timeout, RetryCnt: set.retry, RNRRetry: set.rnrRetry,
		MinRNRTimer: set.minRNR, PathMTU: transport.MTU1024}
	if o.Access == 0 {
		o.Access = allAccess
	}
	if o.RetryCnt == 0 {
		o.RetryCnt = 2
	}
	if o.RNRRetry == 0 {
		o.RNRRetry = 2
	}
	if err := s.dev.Connect(c.q, local, remote, o); err != nil {
		return nil, err
	}
	s.raw.connect(ladder.Endpoint{Addr: rawAddr, QPN: rqpn}, ladder.Endpoint{Addr: peerAddr, QPN: c.q.QPN()})
	if !set.noRecv {
		for i := range nRecv {
			if err := c.q.PostRecv(&transport.RecvWR{WRID: uint64(100 + i), SGL: []transport.SGE{s.mr.SGE(i*recvLen, recvLen)}}); err != nil {
				return nil, err
			}
		}
	}
	return c, nil
}

// fencePkt is the fence: a SEND far behind the expected PSN of a second
// connection to the peer, which the peer acknowledges again (C9-105) after
// whatever earlier packets made it send. On its own connection, its answer
// is told apart from any answer to a case's stimulus, and the case's QP
// may be in any state, ERR included. This relies on the peer handling
// packets to its QPs in the order they come, which goroce does (one
// receive loop per device).
func (s *session) fencePkt() pkt {
	f := s.f
	return pkt{op: bth.RCSendOnly, qpn: f.q.QPN(), psn: f.ePSN - 1<<20, ackReq: true,
		comment: "the suite's fence: a SEND long behind on a second connection, whose ACK comes after the peer's answers to everything before it"}
}

// nextOrFence returns the peer's next packet to the case's QP or the fence's.
func (s *session) nextOrFence() (p bth.Packet, fence bool, err error) {
	p, err = s.raw.nextOf(s.c.qpn, s.f.qpn)
	if err != nil {
		return p, false, err
	}
	if p.BTH().DestQP() == s.f.qpn {
		if p.OpCode() != bth.RCAcknowledge || !p.AETH().Syndrome().IsACK() {
			return p, true, fmt.Errorf("the fence was answered with %v", describe(p, s.f.ePSN))
		}
		return p, true, nil
	}
	return p, false, nil
}

// fenced sends the fence twice, the second time once the first answer
// came back, and returns every packet the peer sent to the case's QP
// before the second answer. A peer may hold an acknowledgement until the
// end of the burst of packets it took in (goroce does): everything the
// first burst made it send is out before it takes in the second fence.
func (s *session) fenced() ([]bth.Packet, error) {
	if s.peer != nil {
		return s.peerFenced()
	}
	var got []bth.Packet
	for range 2 {
		if err := s.raw.send(s.fencePkt()); err != nil {
			return got, err
		}
		for {
			p, fence, err := s.nextOrFence()
			if err != nil {
				return got, err
			}
			if fence {
				break
			}
			got = append(got, p)
		}
	}
	return got, nil
}

// exchange sends the stimulus and returns every packet the peer sent in
// answer, fenced.
func (s *session) exchange(stim ...pkt) ([]bth.Packet, error) {
	if err := s.raw.send(stim...); err != nil {
		return nil, err
	}
	return s.fenced()
}

// respOutcome describes the peer's answers as a responder, relative to
// the expected PSN before the stimulus (ref).
func (s *session) respOutcome(got []bth.Packet, ref uint32) Outcome {
	o := Outcome{Reply: Silent, State: s.qpState(), Status: AnyStatus, Count: len(got), CheckCount: true}
	if len(got) > 0 {
		p := got[0]
		o.PSN, o.CheckPSN = psnDiff(uint32(p.BTH().PSN()), ref), true
		switch p.OpCode() {
		case bth.RCAcknowledge:
			syn := p.AETH().Syndrome()
			switch {
			case syn.IsACK():
				o.Reply = ACK
			case syn.IsRNRNAK():
				o.Reply = RNRNAK
			default:
				o.Reply, o.NAK = NAK, syn.NAKCode()
			}
		case bth.RCAtomicAcknowledge:
			o.Reply = AtomicAck
		default:
			if isReadResponse(p.OpCode()) {
				o.Reply = ReadResponse
				break
			}
			o.Reply = Reply(p.OpCode().String())
		}
	}
	if len(got) > 1 {
		d := "then"
		for _, p := range got[1:] {
			d += " " + describe(p, ref) + ","
		}
		o.Detail = d[:len(d)-1]
	}
	if s.peer != nil && s.peer.stateWhy != "" {
		if o.Detail != "" {
			o.Detail += "; "
		}
		o.Detail += s.peer.stateWhy
	}
	return o
}

// respond runs a responder case's stimulus and describes what came back.
func (s *session) respond(stim ...pkt) (Outcome, error) {
	ref := s.c.ePSN
	got, err := s.exchange(stim...)
	if err != nil {
		return Outcome{}, err
	}
	return s.respOutcome(got, ref), nil
}

// req builds a request from the suite at the peer's expected PSN plus d.
func (s *session) req(op bth.OpCode, d int, payload []byte, exts ...func([]byte, *bth.Info)) pkt {
	return pkt{op: op, qpn: s.peerQPN(), psn: s.c.ePSN + uint32(d), ackReq: true, payload: payload, exts: exts}
}

// --- the peer as requester ---

// post posts a signaled send work request on the peer's QP.
func (s *session) post(wr transport.SendWR) error {
	wr.Flags |= transport.Signaled
	if wr.WRID == 0 {
		wr.WRID = 1
	}
	return s.c.q.PostSend(&wr)
}

// sendWR is a 64-byte SEND from the peer's region, 32 KiB in (past the
// receive buffers).
func (s *session) sendWR() transport.SendWR {
	return transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{s.mr.SGE(32<<10, 64)}}
}

// request reads the peer's next request packet.
func (s *session) request() (bth.Packet, error) {
	p, err := s.raw.next(s.c.qpn)
	if err != nil {
		return p, fmt.Errorf("waiting for the peer's request: %w", err)
	}
	if p.OpCode() == bth.RCAcknowledge || p.OpCode() == bth.RCAtomicAcknowledge {
		return p, fmt.Errorf("the peer sent %v where a request was due", describe(p, s.c.peerPSN))
	}
	return p, nil
}

// answer sends the suite's response to the peer's requester, stamping
// when the send began and when it returned: the answer left between the
// two. A busy host can preempt the suite on either side of the send, and
// on loopback the peer can react, and the suite's receiver stamp that
// reaction, before the send returns.
func (s *session) answer(op bth.OpCode, psn uint32, payload []byte, exts ...func([]byte, *bth.Info)) error {
	if s.peer != nil {
		s.peer.answeredAt = time.Now()
	}
	err := s.raw.send(pkt{op: op, qpn: s.peerQPN(), psn: psn, payload: payload, exts: exts})
	if s.peer != nil {
		s.peer.answerOut = time.Now()
	}
	return err
}

// ack answers with an ACK of PSN psn carrying MSN msn.
func (s *session) ack(psn, msn uint32) error {
	return s.answer(bth.RCAcknowledge, psn, nil, withAETH(ackSyn, msn))
}

// nak answers with an Acknowledge carrying syndrome syn.
func (s *session) nak(psn uint32, syn bth.Syndrome) error {
	return s.answer(bth.RCAcknowledge, psn, nil, withAETH(syn, 0))
}

// reqOutcome fences the peer and describes what its requester did in
// reaction to the suite's answers: sent requests again (from which PSN,
// relative to ref), completed its work request, or still waits.
func (s *session) reqOutcome(ref uint32) (Outcome, error) {
	c := s.c
	o := Outcome{Reply: Waiting, Status: AnyStatus}
	resent, err := s.fenced()
	if err != nil {
		return o, err
	}
	for _, p := range resent {
		if p.OpCode() == bth.RCAcknowledge || p.OpCode() == bth.RCAtomicAcknowledge || isReadResponse(p.OpCode()) {
			return o, fmt.Errorf("the peer's responder sent %v", describe(p, ref))
		}
	}
	o.State = c.q.State()
	wc := make([]transport.WC, 1)
	if n, _ := c.scq.Poll(wc); n == 1 {
		o.Status = wc[0].Status
		o.Reply = Completed
	}
	o.Count, o.CheckCount = len(resent), true
	if len(resent) > 0 {
		o.Reply = Retransmit
		o.PSN, o.CheckPSN = psnDiff(uint32(resent[0].BTH().PSN()), ref), true
	}
	return o, nil
}

func isReadResponse(op bth.OpCode) bool {
	switch op {
	case bth.RCReadResponseFirst, bth.RCReadResponseMiddle, bth.RCReadResponseLast, bth.RCReadResponseOnly:
		return true
	}
	return false
}

// waitCompletion waits for the peer's send completion (one must come).
func (s *session) waitCompletion() (transport.WC, error) {
	ctx, cancel := context.WithTimeout(context.Background(), backstop)
	defer cancel()
	wc := make([]transport.WC, 1)
	if _, err := s.c.scq.PollWait(ctx, wc); err != nil {
		return transport.WC{}, fmt.Errorf("waiting for the peer's completion: %w", err)
	}
	return wc[0], nil
}

// alive checks that the peer still serves a fresh QP: a SEND each way on a
// new connection, acknowledged and completed.
func (s *session) alive() error {
	c, err := s.connect(aliveQPN, setup{access: transport.LocalWrite})
	if err != nil {
		return err
	}
	old := s.c
	s.c = c
	defer func() { s.c = old }()
	if err := s.raw.send(s.req(bth.RCSendOnly, 0, []byte("alive?"))); err != nil {
		return err
	}
	p, err := s.raw.next(c.qpn)
	if err != nil {
		return err
	}
	if p.OpCode() != bth.RCAcknowledge || !p.AETH().Syndrome().IsACK() || uint32(p.BTH().PSN()) != c.ePSN {
		return fmt.Errorf("fresh QP answered a SEND with %v", describe(p, c.ePSN))
	}
	if err := s.post(s.sendWR()); err != nil {
		return err
	}
	if p, err = s.request(); err != nil {
		return err
	}
	if err := s.ack(uint32(p.BTH().PSN()), 1); err != nil {
		return err
	}
	wc, err := s.waitCompletion()
	if err != nil {
		return err
	}
	if wc.Status != transport.Success {
		return fmt.Errorf("fresh QP's SEND completed with %v", wc.Status)
	}
	return nil
}
