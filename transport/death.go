package transport

import (
	"fmt"
	"strings"
	"time"

	"github.com/goroce/goroce/bth"
)

// Why a QP died. A QP that enters ERR keeps the cause (Death): what
// happened (a NAK received, a timer that ran out, a local error, the
// consumer's modify), the rule that makes it fatal, the work request it
// ended, and the last packets the QP sent and received, so that "why did
// my QP die?" has an answer after the fact. The flight recorder behind the
// packets (traceRing) costs a copy of each packet's headers, nothing more.

// Cause is what moved a QP to the error state.
type Cause uint8

// The causes, in the order an RC requester, an RC responder, and the
// consumer meet them.
const (
	CauseNone              Cause = iota
	CauseRetryExceeded           // the requester's retries ran out (local ACK timeouts, sequence NAKs)
	CauseRNRRetryExceeded        // RNR NAKs outlasted rnr_retry
	CauseRemoteInvalidReq        // a NAK Invalid Request came back
	CauseRemoteAccess            // a NAK Remote Access Error came back
	CauseRemoteOperational       // a NAK Remote Operational Error came back
	CauseRemoteInvalidRD         // a NAK Invalid RD Request (or a reserved code) came back
	CauseLocalError              // a work request failed locally (a bad lkey, a response that does not fit)
	CauseResponderError          // as responder, this QP met a request it must refuse and NAKed it
	CauseModified                // the consumer moved the QP to ERR (ibv_modify_qp, rdma_disconnect)
	CauseDeviceClosed            // the device closed under the QP
)

var causeNames = [...]string{
	CauseNone:              "none",
	CauseRetryExceeded:     "transport retry counter exceeded",
	CauseRNRRetryExceeded:  "RNR retry counter exceeded",
	CauseRemoteInvalidReq:  "NAK Invalid Request received",
	CauseRemoteAccess:      "NAK Remote Access Error received",
	CauseRemoteOperational: "NAK Remote Operational Error received",
	CauseRemoteInvalidRD:   "NAK Invalid RD Request received",
	CauseLocalError:        "local error",
	CauseResponderError:    "request refused by this QP as responder",
	CauseModified:          "moved to ERR by the consumer",
	CauseDeviceClosed:      "device closed",
}

// The rule each cause follows, as the IBA (volume 1, release 1.4) states
// it: what a reader looks up to see that dying was right.
var causeRules = [...]string{
	CauseRetryExceeded:     "IBA 9.7.6.1.3: on a local ACK timeout (or a sequence NAK) the requester retries retry_cnt times, then completes the WQE in error and the QP enters ERR (10.3.1.7)",
	CauseRNRRetryExceeded:  "IBA 9.7.5.2.8: an RNR NAK is retried rnr_retry times (7: for ever), then the WQE completes with an RNR retry error and the QP enters ERR",
	CauseRemoteInvalidReq:  "IBA 9.9.3 / 9.7.5.2.3: a NAK Invalid Request is a class C error: the WQE completes in error and the connection ends",
	CauseRemoteAccess:      "IBA 9.9.3 / 9.7.5.2.4: a NAK Remote Access Error (bad R_Key, range or rights at the responder) is a class C error: the connection ends",
	CauseRemoteOperational: "IBA 9.9.3 / 9.7.5.2.5: a NAK Remote Operational Error is a class C error: the connection ends",
	CauseRemoteInvalidRD:   "IBA 9.9.3: a NAK with this code ends the connection",
	CauseLocalError:        "IBA 10.3.1.6 / 10.8.3: a work request that fails locally on a reliable QP completes in error and moves the QP to ERR",
	CauseResponderError:    "IBA 9.9.3.1: a responder that detects a class C error NAKs it and enters ERR",
	CauseModified:          "IBA 10.3.1.7 / 11.2.5: ModifyQP to ERR flushes every outstanding work request",
	CauseDeviceClosed:      "the device's resources were released (ibv_close_device)",
}

// String names the cause in words.
func (c Cause) String() string {
	if int(c) < len(causeNames) {
		return causeNames[c]
	}
	return fmt.Sprintf("cause %d", c)
}

// Rule returns the rule of the specification that makes c fatal.
func (c Cause) Rule() string {
	if int(c) < len(causeRules) {
		return causeRules[c]
	}
	return ""
}

// why is what a caller of toError knows of the cause.
type why struct {
	cause  Cause
	psn    bth.PSN // the PSN concerned, when hasPSN
	hasPSN bool
	detail string // more, in words
	err    error  // the error behind it, when there is one
}

// Death is why a QP entered the error state: Death() returns it, and a
// post refused because the QP is in ERR wraps it (errors.As).
type Death struct {
	// QPN is the QP that died.
	QPN uint32
	// Type is its transport service.
	Type QPType
	// Cause is what moved it to ERR; Rule the specification's rule for it.
	Cause Cause
	// Rule cites the rule that makes the cause fatal.
	Rule string
	// Status is the completion status of the work request the cause
	// ended (WRFlushErr when it ended none).
	Status WCStatus
	// WRID is that work request's ID, when HasWR.
	WRID uint64
	// Opcode is that work request's operation, when HasWR.
	Opcode WROpcode
	// HasWR says the cause ended a work request (WRID, Opcode, Status).
	HasWR bool
	// Length is that work request's length in bytes.
	Length uint32
	// RemoteAddr is its remote buffer's address, for an RDMA READ or
	// WRITE or an atomic.
	RemoteAddr uint64
	// RKey is its remote buffer's key, for the same operations.
	RKey uint32
	// PSN is the packet sequence number concerned, when HasPSN: the
	// request a NAK or a timeout was about, or the one refused.
	PSN bth.PSN
	// HasPSN says PSN is set.
	HasPSN bool
	// Detail says more in words: the NAK's syndrome, the timer, the key.
	Detail string
	// Err is the error behind the cause, when there is one.
	Err error
	// At is when the QP died, on the QP's clock.
	At time.Time
	// Trace holds the last packets the QP sent and received before it
	// died (at most TraceLen), oldest first.
	Trace []TracedPacket
}

// TraceLen is how many of its last packets a QP keeps for its Death.
const TraceLen = 8

// TraceSnap is how much of each traced packet is kept, from its IP header:
// the IPv6 and UDP headers, the BTH and the longest extended headers
// (a RETH with immediate data, an AtomicETH).
const TraceSnap = 96

// TracedPacket is one packet of a Death's Trace: the datagram from its IP
// header, cut after TraceSnap bytes.
type TracedPacket struct {
	// Out says the QP sent it; otherwise it received it.
	Out bool
	// Len is the datagram's whole length.
	Len int
	// Head is its first bytes (at most TraceSnap).
	Head []byte
}

// Datagram returns the packet as long as it was, the bytes past Head
// zero, as a capture with a snap length keeps it.
func (t TracedPacket) Datagram() []byte {
	b := make([]byte, max(t.Len, len(t.Head)))
	copy(b, t.Head)
	return b
}

// Error says why the QP died, in one line.
func (d *Death) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v QP 0x%06x entered ERR: %v", d.Type, d.QPN, d.Cause)
	if d.HasPSN {
		fmt.Fprintf(&b, " (PSN 0x%06x)", uint32(d.PSN))
	}
	if d.Detail != "" {
		b.WriteString(": ")
		b.WriteString(d.Detail)
	}
	if d.HasWR {
		fmt.Fprintf(&b, "; work request %d (%v of %d bytes", d.WRID, d.Opcode, d.Length)
		if d.RKey != 0 || d.RemoteAddr != 0 {
			fmt.Fprintf(&b, " at va 0x%x rkey 0x%x", d.RemoteAddr, d.RKey)
		}
		fmt.Fprintf(&b, ") completed with %v", d.Status)
	}
	return b.String()
}

// Unwrap returns the error behind the cause, if any.
func (d *Death) Unwrap() error { return d.Err }

// Explain writes d in full: the cause, the rule, and the last packets
// as lines (the ladder package draws them as a ladder).
func (d *Death) Explain() string {
	var b strings.Builder
	b.WriteString(d.Error())
	b.WriteString("\n  rule: ")
	b.WriteString(d.Rule)
	b.WriteByte('\n')
	if d.Err != nil {
		fmt.Fprintf(&b, "  error: %v\n", d.Err)
	}
	fmt.Fprintf(&b, "  last %d packets of the QP:\n", len(d.Trace))
	for _, t := range d.Trace {
		dir := "<-"
		if t.Out {
			dir = "->"
		}
		fmt.Fprintf(&b, "    %s %s\n", dir, describe(t))
	}
	return b.String()
}

// describe gives one traced packet's opcode, PSN and key fields, in the
// one packet format (roced decode's line).
func describe(t TracedPacket) string {
	f, err := bth.DecodeSealed(t.Datagram())
	if err != nil {
		return fmt.Sprintf("%d bytes: %v", t.Len, err)
	}
	p, err := bth.Parse(f.RoCE())
	if err != nil {
		return fmt.Sprintf("%d bytes: %v", t.Len, err)
	}
	return p.Summary()
}

// traceRing is a QP's flight recorder: its last TraceLen packets, each cut
// at TraceSnap. Allocated at the QP's first packet, so that a QP that
// never carries traffic costs nothing. It keeps their order, not their
// times: a clock read is most of what a record would cost (about 40 ns
// under load on a 2-core machine, BenchmarkRecord), where the copy is 6 ns.
type traceRing struct {
	n    uint32 // packets recorded, free-running
	pkts [TraceLen]struct {
		out  bool
		len  int
		snap int
		head [TraceSnap]byte
	}
}

// record keeps datagram (from its IP header) as the QP's latest packet.
func (q *QP) record(out bool, datagram []byte) {
	t := q.trace
	if t == nil {
		t = new(traceRing)
		q.trace = t
	}
	e := &t.pkts[t.n%TraceLen]
	t.n++
	e.out = out
	e.len = len(datagram)
	e.snap = copy(e.head[:], datagram)
}

// snapshot copies the recorder's packets, oldest first.
func (t *traceRing) snapshot() []TracedPacket {
	if t == nil {
		return nil
	}
	n := min(t.n, TraceLen)
	out := make([]TracedPacket, 0, n)
	for i := t.n - n; i != t.n; i++ {
		e := &t.pkts[i%TraceLen]
		out = append(out, TracedPacket{Out: e.out, Len: e.len, Head: append([]byte(nil), e.head[:e.snap]...)})
	}
	return out
}

// die records why the QP is entering ERR; toError calls it first.
func (q *QP) die(failed *sendWQE, status WCStatus, w why) {
	d := &Death{QPN: q.qpn, Type: q.typ, Cause: w.cause, Rule: w.cause.Rule(), Status: WRFlushErr,
		PSN: w.psn, HasPSN: w.hasPSN, Detail: w.detail, Err: w.err, At: q.clock.Now(), Trace: q.trace.snapshot()}
	if failed != nil {
		d.Status, d.WRID, d.Opcode, d.HasWR = status, failed.wr.WRID, failed.wr.Opcode, true
		d.Length = failed.length
		if k := failed.op().kind; k == bth.KindWrite || k == bth.KindReadRequest || k == bth.KindCompareSwap || k == bth.KindFetchAdd {
			d.RemoteAddr, d.RKey = failed.wr.RemoteAddr, failed.wr.RKey
		}
	}
	q.death = d
	if q.env.Died != nil {
		q.env.Died(q, d)
	}
}

// Death returns why the QP entered ERR, or nil while it has not (or after
// it was reset).
func (q *QP) Death() *Death {
	q.mu.Lock()
	defer q.unlock()
	return q.death
}

// nakCause is the cause a NAK code gives the requester that receives it.
func nakCause(code bth.NAKCode) Cause {
	switch code {
	case bth.NAKInvalidRequest:
		return CauseRemoteInvalidReq
	case bth.NAKRemoteAccessError:
		return CauseRemoteAccess
	case bth.NAKRemoteOperational:
		return CauseRemoteOperational
	}
	return CauseRemoteInvalidRD
}
