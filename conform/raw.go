package conform

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/rawpeer"
	"github.com/goroce/goroce/ladder"
	"github.com/goroce/goroce/nic"
)

// backstop bounds the wait for a packet or completion the peer must send.
// It is never how silence is proven (a fence is): running out of it makes a
// case's verdict "error", unless the case already has its answer.
const backstop = 10 * time.Second

// errBackstop says the peer sent nothing where something had to come.
var errBackstop = errors.New("the peer sent nothing before the backstop")

// errStopped says a wait ended because the peer's command exited.
var errStopped = errors.New("the peer's command exited")

// rawEnd is the suite's own endpoint: the tests' scripted raw peer
// (internal/rawpeer), which sends packets built field by field, right or
// deliberately wrong, and reads what the peer sends back, with the
// suite's log and filters on top.
type rawEnd struct {
	*rawpeer.Peer
	// swallow, if set, sees each packet next is about to return and
	// takes it out of the stream by returning true (a remote peer's own
	// requests, which the session acknowledges).
	swallow func(bth.Packet) bool

	// lastAt and lastOp are when the packet next returned last came
	// in, and its opcode.
	lastAt time.Time
	lastOp bth.OpCode

	mu  sync.Mutex
	log ladder.Ladder // every packet sent and received, for the report
}

// record adds a datagram the endpoint sent or received to its log, with
// comments that explain it.
func (r *rawEnd) record(dg []byte, comments ...string) {
	f, err := bth.DecodeIP(dg)
	if err != nil {
		return
	}
	r.mu.Lock()
	r.log.Add(ladder.Packet{Time: time.Now(), Frame: f, Comments: comments})
	r.mu.Unlock()
}

// connect tells the log that a and b are the two QPs of a connection.
func (r *rawEnd) connect(a, b ladder.Endpoint) {
	r.mu.Lock()
	r.log.Connect(a, b)
	r.mu.Unlock()
}

// reset forgets the packets logged so far (a new case on the same link).
func (r *rawEnd) reset() {
	r.mu.Lock()
	r.log = ladder.Ladder{}
	r.mu.Unlock()
}

// diagram lays out the packets exchanged so far.
func (r *rawEnd) diagram() *ladder.Diagram {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.log.Diagram()
}

func newRawEnd(link nic.Link, src, dst netip.Addr) *rawEnd {
	r := &rawEnd{}
	r.Peer = rawpeer.New(link, src, dst, 0xc0de, 4096, func(dg []byte) {
		if _, isMarker := rawpeer.MarkOf(dg); !isMarker { // the end's own, not the exchange's
			r.record(dg)
		}
	})
	return r
}

// pkt describes one packet the suite sends.
type pkt struct {
	op      bth.OpCode
	qpn     uint32 // destination QP
	psn     uint32
	ackReq  bool
	payload []byte
	exts    []rawpeer.Hdr
	// hdr changes the encoded BTH before the ICRC is computed.
	hdr func(b bth.BTH)
	// trunc, if positive, keeps that many bytes of the packet before its
	// ICRC, which is then computed over the shortened packet.
	trunc int
	// after changes the sealed packet (its RoCE part: BTH through ICRC)
	// and returns it: a spoiled ICRC, a cut.
	after func(roce []byte) []byte
	// comment explains the packet in the report's ladder.
	comment string
}

// The extended headers a packet sets.
var (
	withRETH   = rawpeer.RETH
	withAtomic = rawpeer.AtomicETH
	withAETH   = rawpeer.AETH
	withOrig   = rawpeer.OrigData
)

// build returns the datagram of p, at nic.Headroom in its buffer.
func (r *rawEnd) build(p pkt) []byte {
	return r.Build(rawpeer.Packet{Op: p.op, DestQP: p.qpn, PSN: p.psn, AckReq: p.ackReq, Payload: p.payload,
		Headers: p.exts, BTH: p.hdr, Trunc: p.trunc, After: p.after})
}

// send sends packets in order.
func (r *rawEnd) send(ps ...pkt) error {
	for _, p := range ps {
		b := r.build(p)
		var comments []string
		if p.comment != "" {
			comments = append(comments, p.comment)
		}
		r.record(append([]byte(nil), b[nic.Headroom:]...), comments...)
		if err := r.SendBuilt(b); err != nil {
			return fmt.Errorf("sending %v: %w", p.op, err)
		}
	}
	return nil
}

// next returns the next packet the peer sent to the suite's QP qpn
// (packets to other QPs of the suite's, left over from earlier exchanges,
// are skipped), waiting at most until the backstop.
func (r *rawEnd) next(qpn uint32) (bth.Packet, error) {
	return r.nextOf(qpn, qpn)
}

// nextOf is next for packets to either of two QPs.
func (r *rawEnd) nextOf(qpn, qpn2 uint32) (bth.Packet, error) {
	return r.nextWithin(qpn, qpn2, backstop, nil)
}

// nextWithin is nextOf waiting at most d (errBackstop after it), or
// until stop closes (errStopped).
//
// stop is the peer's end (its command exited), which can be seen before
// what the peer sent just before it (the NAK of a case whose error also
// ends the tool, CI saw it so) has come through the reader: then a marker
// goes to this end's own address (rawpeer.Mark), and the packets read
// before it are still returned; errStopped comes with the marker. A link
// that does not deliver the marker leaves d to decide.
func (r *rawEnd) nextWithin(qpn, qpn2 uint32, d time.Duration, stop <-chan struct{}) (bth.Packet, error) {
	deadline := time.After(d)
	var mark uint32
	stopped := false
	for {
		select {
		case <-stop:
			stop = nil
			m, err := r.Mark()
			if err != nil {
				return bth.Packet{}, errStopped
			}
			mark, stopped = m, true
		case rf, ok := <-r.Rx:
			if !ok {
				return bth.Packet{}, errors.New("the link closed")
			}
			f, err := bth.DecodeIP(rf.Datagram)
			if err != nil {
				return bth.Packet{}, fmt.Errorf("the peer sent an undecodable packet: %w", err)
			}
			if !f.VerifyICRC() {
				return bth.Packet{}, errors.New("the peer sent a packet with a bad ICRC")
			}
			p, err := bth.Parse(f.RoCE())
			if err != nil {
				return bth.Packet{}, fmt.Errorf("the peer sent a malformed packet: %w", err)
			}
			if h := p.BTH(); h.DestQP() == rawpeer.MarkerQP {
				if stopped && uint32(h.PSN()) == mark {
					return bth.Packet{}, errStopped
				}
				continue // an earlier call's marker
			}
			if d := p.BTH().DestQP(); d != qpn && d != qpn2 {
				continue
			}
			if r.swallow != nil && r.swallow(p) {
				continue
			}
			r.lastAt, r.lastOp = rf.At, p.OpCode()
			return p, nil
		case <-deadline:
			if stopped {
				return bth.Packet{}, errStopped
			}
			return bth.Packet{}, errBackstop
		}
	}
}

// describe names a packet for a report: the one packet format (roced
// decode's line) and its PSN relative to ref, as the cases count them.
func describe(p bth.Packet, ref uint32) string {
	return fmt.Sprintf("%s (psn %+d)", p.Summary(), psnDiff(uint32(p.BTH().PSN()), ref))
}

// psnDiff returns a-b in 24-bit PSN arithmetic, between -2^23 and 2^23.
func psnDiff(a, b uint32) int {
	d := int32((a-b)&bth.PSNMask) << 8 >> 8
	return int(d)
}
