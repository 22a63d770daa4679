package transport

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/goroce/goroce/bth"
)

// The completer (IBA 9.7.5.1 and 9.9; rxe_comp.c) matches ACKs, NAKs, READ
// responses and atomic ACKs against the outstanding send WQEs, completes
// them in order, and decides when to go back and retransmit: on a local ACK
// timeout, a PSN sequence error NAK, an RNR NAK (after its timer), or when a
// later response shows that READ responses were lost. Retries count against
// retry_cnt and rnr_retry, which any forward progress resets.

type completer struct {
	psn      bth.PSN // oldest PSN not yet acknowledged
	retryCnt uint8   // retries left (retry_cnt)
	rnrRetry uint8   // RNR retries left (rnr_retry; 7 means unlimited)
	deadline time.Time
	armed    bool
	gapPSN   bth.PSN // a retry for lost READ responses was started at this PSN
	gapRetry bool
	retryPSN bth.PSN // the last retry went back to this PSN ...
	retryNew bool    // ... and no sign of loss has come since (reorderEcho)
}

func (c *completer) resetRetries(a *QPAttr) {
	c.retryCnt = a.RetryCnt
	c.rnrRetry = a.RNRRetry
}

// rto is the local ACK timeout: 4.096 µs × 2^timeout; 0 waits forever
// (IBA 9.7.6.1.3).
func (q *QP) rto() time.Duration {
	t := q.attr.Timeout
	if t == 0 {
		return 0
	}
	return time.Duration(4096<<t) * time.Nanosecond
}

// armRTO (re)starts the local ACK timer. Rather than reset a timer per
// packet, it moves a deadline the timer checks when it fires.
func (q *QP) armRTO() {
	d := q.rto()
	if d == 0 {
		return
	}
	q.comp.deadline = q.clock.Now().Add(d)
	if !q.comp.armed {
		q.comp.armed = true
		if q.rtoTimer == nil {
			q.rtoTimer = q.clock.AfterFunc(d, q.onRTO)
		} else {
			q.rtoTimer.Reset(d)
		}
	}
}

func (q *QP) onRTO() {
	q.mu.Lock()
	defer q.unlock()
	q.comp.armed = false
	if q.destroyed || (q.state != RTS && q.state != SQD) || !q.outstanding() || q.req.rnrWait {
		return // the RNR timer restarts sending and with it this timer
	}
	if now := q.clock.Now(); now.Before(q.comp.deadline) {
		q.comp.armed = true
		q.rtoTimer.Reset(q.comp.deadline.Sub(now))
		return
	}
	q.env.Counters.Timeouts.Add(1)
	if q.retry(q.comp.psn, "the local ACK timer expired") {
		q.req.probe = true
		q.run()
	}
}

func (q *QP) onRNRTimer() {
	q.mu.Lock()
	defer q.unlock()
	if !q.req.rnrWait {
		return
	}
	q.req.rnrWait = false
	q.run()
}

// retry goes back to psn (go-back-N) if retries are left, else completes
// the oldest WQE with a retry-exceeded error. It reports whether it retried.
// trigger says what asked for the retry, for the QP's Death.
func (q *QP) retry(psn bth.PSN, trigger string) bool {
	if q.comp.retryCnt == 0 {
		q.env.Counters.RetryExceededErr.Add(1)
		q.toError(q.sqAt(q.sqHead), RetryExcErr, why{cause: CauseRetryExceeded, psn: psn, hasPSN: true,
			detail: fmt.Sprintf("%s with no retry left (retry_cnt %d, local ACK timeout %d: %v)", trigger, q.attr.RetryCnt, q.attr.Timeout, q.rto())})
		return false
	}
	q.comp.retryCnt--
	q.comp.retryPSN, q.comp.retryNew = psn, true
	q.rewind(psn)
	q.armRTO()
	return true
}

// rewind makes the requester send again from psn, which lies in a started
// WQE (normally the oldest): go-back-N.
func (q *QP) rewind(psn bth.PSN) {
	q.seek(psn)
	q.req.noAck = 0
}

// seek positions the requester at psn: inside the started WQE that holds
// it, or at the first WQE not yet started when psn is past them all. An
// acknowledgement can overtake a rewind (a late ACK for packets about to be
// resent), so the requester must be able to move forward as well as back.
func (q *QP) seek(psn bth.PSN) {
	r := &q.req
	for i := q.sqHead; i != q.sqTail; i++ {
		w := q.sqAt(i)
		if w.isLocal() && w.state == wqeDone {
			continue // executed already: never again
		}
		if w.state != wqeStarted {
			r.cur, r.off, r.psn = i, 0, psn
			return
		}
		if psn.Before(w.firstPSN) || psn.After(w.lastPSN) {
			continue
		}
		r.cur, r.off, r.psn = i, 0, psn
		if !w.isAtomic() {
			r.off = uint32(psn.Diff(w.firstPSN)) * uint32(q.mtu)
		}
		return
	}
	r.cur, r.off, r.psn = q.sqTail, 0, psn
}

// progress notes forward progress: retry counters reset (IBA 9.7.6.1.3
// counts consecutive retries) and the timer restarts or stops.
//
// A response can overtake a rewind: the requester was sent back to a PSN
// whose ACK or READ response was already on its way. If the requester now
// lies behind what is acknowledged, it moves forward to comp.psn. Without
// this, a READ's last response arriving after a rewind into that READ
// retired the WQE (retire moves req.cur past it) but left req.psn at the
// rewind point, and the next WQE started on PSNs the READ had used: the
// responder took its request for a duplicate and the QP retried until
// retry_cnt ran out.
func (q *QP) progress() {
	if q.req.psn.Before(q.comp.psn) {
		q.seek(q.comp.psn)
	}
	q.retireLocal()
	q.comp.resetRetries(&q.attr)
	q.comp.gapRetry = false
	q.req.probe = false
	if q.outstanding() {
		q.armRTO()
	}
	q.checkDrained()
}

// handleResponse processes an ACK, NAK, READ response or atomic ACK.
func (q *QP) handleResponse(p bth.Packet) {
	psn := p.BTH().PSN()
	c := q.env.Counters
	// A response for a PSN never sent is a ghost (IBA 9.9.4.1): drop it.
	if !psn.Before(q.req.hiPSN) {
		c.GhostResponses.Add(1)
		return
	}
	switch p.Info().Kind {
	case bth.KindAcknowledge:
		syn := p.AETH().Syndrome()
		switch syn.Class() {
		case bth.ClassACK:
			q.ackThrough(psn)
		case bth.ClassRNRNAK:
			if q.ackThrough(psn.Add(-1)) {
				q.rnrNAK(psn, syn.Value())
			}
		case bth.ClassNAK:
			if !q.ackThrough(psn.Add(-1)) {
				return
			}
			switch code := syn.NAKCode(); code {
			case bth.NAKPSNSequenceError:
				// The responder expects psn: everything before it arrived
				// (the NAK acknowledges it) and we resend from there.
				c.RcvdSeqErr.Add(1)
				if psn == q.comp.psn && q.outstanding() && !q.reorderEcho(psn) {
					c.CompleterRetryErr.Add(1)
					q.retry(psn, "a PSN sequence error NAK came back")
				}
			case bth.NAKInvalidRequest:
				q.remoteError(psn, RemInvReqErr, code)
			case bth.NAKRemoteAccessError:
				q.remoteError(psn, RemAccessErr, code)
			case bth.NAKRemoteOperational:
				q.remoteError(psn, RemOpErr, code)
			default:
				q.remoteError(psn, RemInvRDReqErr, code)
			}
		default:
			c.Malformed.Add(1)
		}
	case bth.KindReadResponse:
		q.readResponse(p, psn)
	case bth.KindAtomicAcknowledge:
		q.atomicAck(p, psn)
	}
}

// reorderEcho reports whether a loss signal at psn (a sequence NAK, or a
// READ response past a gap) is the second sign of one reordered packet,
// which a retry already answered. When packet k arrives late, the receiver
// sees the packet that overtook it (a responder NAKs k; our completer
// sees a READ response gap at k), drops what follows, takes k when it
// comes, and at the next packet, one sent long before, sees k+1 missing.
// The retry for the first sign has asked for k+1 and all after it again:
// going back once more would send the same window twice, and against rxe
// on a slow guest those copies (256 requests per NAK; a replay of every
// outstanding READ per gap) queued up until our retries ran out (rxe's own
// completer starts no second retry on a NAK: comp.started_retry). Were
// the repeated k+1 lost, the local ACK timer goes back for it. Any other
// sign, and the next one, go back at once.
func (q *QP) reorderEcho(psn bth.PSN) bool {
	echo := q.comp.retryNew && psn == q.comp.retryPSN.Next()
	q.comp.retryNew = false
	return echo
}

// ackThrough acknowledges every PSN up to and including psn: SEND and WRITE
// WQEs it covers complete. It reports false if the QP left RTS/SQD or the
// acknowledgement showed lost READ or atomic responses (and a retry began).
func (q *QP) ackThrough(psn bth.PSN) bool {
	if psn.Before(q.comp.psn.Add(-1)) {
		q.env.Counters.DuplicateResponses.Add(1)
		return true // stale
	}
	advanced := false
	for q.sqHead != q.sqTail {
		w := q.sqAt(q.sqHead)
		if w.isLocal() && w.state == wqeDone {
			q.retire(Success) // executed; it waited for those before it
			continue
		}
		if w.state != wqeStarted || psn.Before(w.firstPSN) {
			break
		}
		if w.isReadOrAtomic() {
			if psn.Before(q.comp.psn) {
				break // acknowledges no more than we have received
			}
			// The responder has gone past a READ or atomic whose response we
			// lack: its responses were lost. Ask again (IBA 9.7.5.1.3), once
			// per gap rather than for every later packet of the same burst.
			if q.comp.psn.Before(w.firstPSN) {
				q.comp.psn = w.firstPSN
			}
			if !q.comp.gapRetry || q.comp.gapPSN != q.comp.psn {
				// An echo was asked for already; either way the rest of
				// the burst that shows this gap must not ask again.
				echo := q.reorderEcho(q.comp.psn)
				q.comp.gapRetry, q.comp.gapPSN = true, q.comp.psn
				if !echo {
					q.env.Counters.CompleterRetryErr.Add(1)
					q.retry(q.comp.psn, "a READ response skipped PSNs")
				}
			}
			return false
		}
		if psn.Before(w.lastPSN) {
			break // part of a long message
		}
		q.retire(Success)
		advanced = true
	}
	if psn.Next().After(q.comp.psn) {
		q.comp.psn = psn.Next()
		advanced = true
	}
	if advanced {
		q.progress()
	}
	return q.state == RTS || q.state == SQD
}

// readResponse places one READ response packet.
func (q *QP) readResponse(p bth.Packet, psn bth.PSN) {
	c := q.env.Counters
	// A response implicitly acknowledges the requests before it (IBA 9.7.5.1.2).
	if !q.ackThrough(psn.Add(-1)) {
		return
	}
	if q.sqHead == q.sqTail {
		c.DuplicateResponses.Add(1)
		return
	}
	w := q.sqAt(q.sqHead)
	if psn != q.comp.psn {
		c.DuplicateResponses.Add(1) // before comp.psn: a gap was handled by ackThrough
		return
	}
	if w.wr.Opcode != WRRDMARead || w.state != wqeStarted || psn.After(w.lastPSN) {
		c.Malformed.Add(1)
		return
	}
	mtu := uint32(q.mtu)
	off := uint32(psn.Diff(w.firstPSN)) * mtu
	want := min(mtu, w.length-off)
	pos := p.Info().Pos
	isLast := psn == w.lastPSN
	// The READ's first PSN must open a response (FIRST or ONLY); a FIRST
	// later in the READ is the start of a replay we asked for.
	badFirst := psn == w.firstPSN && pos != bth.PosFirst && pos != bth.PosOnly
	if uint32(p.PayloadLen()) != want || isLast != (pos == bth.PosLast || pos == bth.PosOnly) || badFirst {
		c.Malformed.Add(1)
		return
	}
	if err := q.scatter(w.wr.SGL, off, p.Payload()); err != nil {
		q.toError(w, LocProtErr, why{cause: CauseLocalError, psn: psn, hasPSN: true,
			detail: "the READ response's data could not be written to the work request's SGL", err: err})
		return
	}
	q.comp.psn = psn.Next()
	if isLast {
		q.retire(Success)
	}
	q.progress()
}

// atomicAck completes an atomic operation with the original remote value.
func (q *QP) atomicAck(p bth.Packet, psn bth.PSN) {
	c := q.env.Counters
	if !q.ackThrough(psn.Add(-1)) {
		return
	}
	if psn != q.comp.psn || q.sqHead == q.sqTail {
		c.DuplicateResponses.Add(1)
		return
	}
	w := q.sqAt(q.sqHead)
	if !w.isAtomic() || w.state != wqeStarted || w.firstPSN != psn {
		c.Malformed.Add(1)
		return
	}
	// Atomics operate on host-order (little-endian) 64-bit words, as rxe does.
	var v [8]byte
	binary.LittleEndian.PutUint64(v[:], p.AtomicAckETH().OrigData())
	if err := q.scatter(w.wr.SGL, 0, v[:]); err != nil {
		q.toError(w, LocProtErr, why{cause: CauseLocalError, psn: psn, hasPSN: true,
			detail: "the atomic's original value could not be written to the work request's SGL", err: err})
		return
	}
	q.comp.psn = psn.Next()
	q.retire(Success)
	q.progress()
}

// rnrNAK handles an RNR NAK for psn: wait the timer it names, then resend
// from psn; rnr_retry 7 retries for ever (IBA 9.7.5.2.8).
func (q *QP) rnrNAK(psn bth.PSN, timer uint8) {
	q.env.Counters.RcvdRNRErr.Add(1)
	if psn != q.comp.psn || !q.outstanding() {
		return
	}
	if q.comp.rnrRetry == 0 {
		q.env.Counters.RetryRNRExceededErr.Add(1)
		q.toError(q.sqAt(q.sqHead), RNRRetryExcErr, why{cause: CauseRNRRetryExceeded, psn: psn, hasPSN: true,
			detail: fmt.Sprintf("an RNR NAK (timer %d: %v) with no RNR retry left (rnr_retry %d): the responder had no receive WQE posted", timer, bth.RNRTimer(timer), q.attr.RNRRetry)})
		return
	}
	if q.comp.rnrRetry != 7 {
		q.comp.rnrRetry--
	}
	q.rewind(psn)
	q.req.rnrWait = true
	if q.rnrTimer == nil {
		q.rnrTimer = q.clock.AfterFunc(bth.RNRTimer(timer), q.onRNRTimer)
	} else {
		q.rnrTimer.Reset(bth.RNRTimer(timer))
	}
}

// remoteError completes the WQE holding psn with the error the NAK names
// and moves the QP to ERR (IBA 9.9.3: class C errors end the connection).
func (q *QP) remoteError(psn bth.PSN, st WCStatus, code bth.NAKCode) {
	if q.sqHead == q.sqTail {
		return
	}
	q.toError(q.sqAt(q.sqHead), st, why{cause: nakCause(code), psn: psn, hasPSN: true,
		detail: fmt.Sprintf("the responder answered PSN 0x%06x with %v", uint32(psn), bth.NAKSyndrome(code))})
}
