package conform

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

// A requester case posts work on the peer's QP, reads its requests and
// answers them as a hostile responder. The peer's retry_cnt and rnr_retry
// are 2 (setup's defaults), its local ACK timeout 4.096 µs × 2^14, on a
// clock the case moves.

// reqCase is a requester case.
func reqCase(id, rule string, set setup, run func(s *session) (Outcome, error), expected ...Outcome) Case {
	return Case{ID: id, Rule: rule, Role: Requester, Expected: expected, setup: set, run: run}
}

// completedWith is a work request completed with st, nothing sent again.
func completedWith(st transport.WCStatus, state transport.QPState) Outcome {
	return Outcome{Reply: Completed, Count: 0, CheckCount: true, State: state, Status: st}
}

// waitingRTS is a requester that neither completed nor sent anything.
var waitingRTS = Outcome{Reply: Waiting, Count: 0, CheckCount: true, State: transport.RTS, Status: AnyStatus}

// postAndRead posts wr and reads its n request packets; it returns the
// first one's PSN.
func (s *session) postAndRead(wr transport.SendWR, n int) (uint32, error) {
	if err := s.post(wr); err != nil {
		return 0, err
	}
	var first uint32
	for i := range n {
		p, err := s.request()
		if err != nil {
			return 0, err
		}
		if i == 0 {
			first = uint32(p.BTH().PSN())
		}
	}
	return first, nil
}

// settle moves the clock past the peer's local ACK timeout until its
// work request completes (a retry exhausted), answering nothing, and
// describes the end: how often the peer sent its request again and the
// completion. It gives up after limit timeouts.
func (s *session) settle(ref uint32, limit int) (Outcome, error) {
	total := 0
	for range limit {
		o, err := s.reqOutcome(ref)
		if err != nil {
			return o, err
		}
		total += o.Count
		if o.Reply == Completed || o.State == transport.Err {
			o.Count, o.CheckCount = total, true
			return o, nil
		}
		s.clk.Advance(rto)
	}
	return Outcome{}, fmt.Errorf("the peer's work request did not complete after %d timeouts", limit)
}

// readWR is a READ of n bytes of the suite's (imaginary) memory into the
// peer's region.
func (s *session) readWR(n int) transport.SendWR {
	return transport.SendWR{Opcode: transport.WRRDMARead, SGL: []transport.SGE{s.mr.SGE(40<<10, n)}, RemoteAddr: 0x10000, RKey: 0x1234}
}

// rnrStorm posts a SEND and answers each of its requests with an RNR NAK
// (timer 0.01 ms), moving the clock past the timer after each, up to limit
// NAKs or until the work request completes. It counts how often the peer
// sent its request again.
func (s *session) rnrStorm(limit int) (Outcome, error) {
	psn, err := s.postAndRead(s.sendWR(), 1)
	if err != nil {
		return Outcome{}, err
	}
	sent := 0
	for range limit {
		if err := s.nak(psn, bth.RNRNAKSyndrome(1)); err != nil {
			return Outcome{}, err
		}
		o, err := s.reqOutcome(psn)
		if err != nil || o.Reply == Completed || o.State == transport.Err {
			o.Count, o.CheckCount = sent, true
			return o, err
		}
		s.clk.Advance(time.Millisecond)
		if _, err := s.request(); err != nil {
			return Outcome{}, err
		}
		sent++
	}
	return Outcome{Reply: Retransmit, PSN: 0, CheckPSN: true, Count: sent, CheckCount: true,
		State: s.c.q.State(), Status: AnyStatus}, nil
}

// twoSends posts two SENDs and reads their requests; it returns the
// first one's PSN.
func (s *session) twoSends() (uint32, error) {
	psn, err := s.postAndRead(s.sendWR(), 1)
	if err != nil {
		return 0, err
	}
	_, err = s.postAndRead(s.sendWR(), 1)
	return psn, err
}

// answered posts wr on the peer's QP, reads its one request packet,
// answers it with answer (nil: no answer), and describes what the peer did
// then: at once (reqOutcome), or, with settle, once the local ACK timeout
// has run out as often as needed for the work request to complete.
func (s *session) answered(wr transport.SendWR, answer func(psn uint32) error, settle bool) (Outcome, error) {
	psn, err := s.postAndRead(wr, 1)
	if err != nil {
		return Outcome{}, err
	}
	if answer != nil {
		if err := answer(psn); err != nil {
			return Outcome{}, err
		}
	}
	if settle {
		return s.settle(psn, 6)
	}
	return s.reqOutcome(psn)
}

// sendCase is a requester case that answers one SEND.
func sendCase(id, rule string, answer func(s *session, psn uint32) error, settle bool, expected ...Outcome) Case {
	return reqCase(id, rule, setup{}, func(s *session) (Outcome, error) {
		var a func(uint32) error
		if answer != nil {
			a = func(psn uint32) error { return answer(s, psn) }
		}
		return s.answered(s.sendWR(), a, settle)
	}, expected...)
}

// readCase is a requester case that answers one READ of n bytes.
func readCase(id, rule string, n int, answer func(s *session, psn uint32) error, expected ...Outcome) Case {
	return reqCase(id, rule, setup{}, func(s *session) (Outcome, error) {
		return s.answered(s.readWR(n), func(psn uint32) error { return answer(s, psn) }, true)
	}, expected...)
}

// ackSyn is the syndrome of an ACK.
var ackSyn = bth.ACKSyndrome(bth.CreditsInvalid)

// inError is a work request completed with some error, the QP in ERR.
var inError = Outcome{Reply: Completed, State: transport.Err, Status: AnyError}

func requesterCases() []Case {
	// the peer's answer to a NAK that ends the connection
	nakCase := func(id string, code bth.NAKCode, st transport.WCStatus) Case {
		return sendCase(id, "requester: a NAK completes the request in error and the QP enters the error state",
			func(s *session, psn uint32) error { return s.nak(psn, bth.NAKSyndrome(code)) }, false,
			completedWith(st, transport.Err))
	}
	return []Case{
		sendCase("req-ack-completes", "requester: an ACK of the last PSN completes the request",
			func(s *session, psn uint32) error { return s.ack(psn, 1) }, false,
			completedWith(transport.Success, transport.RTS)),
		sendCase("req-ghost-ack-ahead", "requester: an ACK for a PSN never sent is a ghost and is dropped",
			func(s *session, psn uint32) error { return s.ack(psn+5, 1) }, false,
			waitingRTS),
		sendCase("req-stale-ack-behind", "requester: an ACK for a PSN already acknowledged completes nothing",
			func(s *session, psn uint32) error { return s.ack(psn-1, 0) }, false,
			waitingRTS),
		reqCase("req-unsolicited-ack", "requester: an ACK with nothing outstanding is dropped", setup{},
			func(s *session) (Outcome, error) {
				if err := s.ack(s.c.peerPSN, 1); err != nil {
					return Outcome{}, err
				}
				return s.reqOutcome(s.c.peerPSN)
			}, waitingRTS),
		sendCase("req-ghost-read-response", "requester: a READ response nobody asked for is a ghost and is dropped",
			func(s *session, psn uint32) error {
				return s.answer(bth.RCReadResponseOnly, psn+3, pay(64), withAETH(ackSyn, 1))
			}, false,
			waitingRTS),
		// The requester tells what an ACK covers by its PSN; the MSN is
		// the responder's count of messages. An MSN out of step must not
		// make the requester complete in error or lose the connection; a
		// requester that checks it may also ignore the ACK.
		sendCase("req-ack-wrong-msn", "ACK and MSN rules: an ACK carrying an MSN out of step",
			func(s *session, psn uint32) error { return s.ack(psn, 1000) }, false,
			completedWith(transport.Success, transport.RTS), waitingRTS),
		reqCase("req-coalesced-ack", "requester: an ACK acknowledges every earlier PSN (coalescing)", setup{},
			func(s *session) (Outcome, error) {
				psn, err := s.twoSends()
				if err != nil {
					return Outcome{}, err
				}
				if err := s.ack(psn+1, 2); err != nil {
					return Outcome{}, err
				}
				o, err := s.reqOutcome(psn)
				if err == nil && o.Reply == Completed {
					wc := make([]transport.WC, 2)
					if n, _ := s.c.scq.Poll(wc); n != 1 || wc[0].Status != transport.Success {
						o.Reply = Reply(fmt.Sprintf("the second request completed %d times", n))
					}
				}
				return o, err
			}, completedWith(transport.Success, transport.RTS)),
		reqCase("req-ack-mid-message", "requester: a request completes only when its last PSN is acknowledged", setup{},
			func(s *session) (Outcome, error) {
				wr := s.sendWR()
				wr.SGL = []transport.SGE{s.mr.SGE(0, 3*mtu)}
				psn, err := s.postAndRead(wr, 3)
				if err != nil {
					return Outcome{}, err
				}
				if err := s.ack(psn+1, 0); err != nil {
					return Outcome{}, err
				}
				return s.reqOutcome(psn)
			}, waitingRTS),
		reqCase("req-implicit-ack-by-read-response", "requester: a READ response implicitly acknowledges the requests before it", setup{},
			func(s *session) (Outcome, error) {
				psn, err := s.postAndRead(s.sendWR(), 1)
				if err != nil {
					return Outcome{}, err
				}
				rd := s.readWR(64)
				rd.WRID = 2
				if _, err := s.postAndRead(rd, 1); err != nil {
					return Outcome{}, err
				}
				if err := s.answer(bth.RCReadResponseOnly, psn+1, pay(64), withAETH(ackSyn, 2)); err != nil {
					return Outcome{}, err
				}
				o, err := s.reqOutcome(psn)
				if err == nil && o.Reply == Completed {
					wc := make([]transport.WC, 2)
					if n, _ := s.c.scq.Poll(wc); n != 1 || wc[0].Status != transport.Success || wc[0].WRID != 2 {
						o.Reply = Reply(fmt.Sprintf("the READ completed %d times", n))
					}
				}
				return o, err
			}, completedWith(transport.Success, transport.RTS)),
		reqCase("req-nak-seq-retransmits", "requester: a sequence error NAK acknowledges the PSNs before it and the requester resends from its PSN", setup{},
			func(s *session) (Outcome, error) {
				psn, err := s.twoSends()
				if err != nil {
					return Outcome{}, err
				}
				if err := s.nak(psn+1, bth.NAKSyndrome(bth.NAKPSNSequenceError)); err != nil {
					return Outcome{}, err
				}
				return s.reqOutcome(psn)
			}, Outcome{Reply: Retransmit, PSN: 1, CheckPSN: true, Count: 1, CheckCount: true, State: transport.RTS, Status: transport.Success}),
		nakCase("req-nak-invalid-request", bth.NAKInvalidRequest, transport.RemInvReqErr),
		nakCase("req-nak-remote-access", bth.NAKRemoteAccessError, transport.RemAccessErr),
		nakCase("req-nak-remote-operational", bth.NAKRemoteOperational, transport.RemOpErr),
		sendCase("req-nak-invalid-rd-request", "requester: a NAK code RC does not use (invalid RD request) ends the request in error",
			func(s *session, psn uint32) error { return s.nak(psn, bth.NAKSyndrome(bth.NAKInvalidRDRequest)) }, true,
			inError),
		sendCase("req-nak-reserved-code", "requester: a reserved NAK code ends the request in error",
			func(s *session, psn uint32) error { return s.nak(psn, bth.NAKSyndrome(bth.NAKCode(9))) }, true,
			inError),
		sendCase("req-silence-retry-exhausted", "requester retry: after retry_cnt timeouts the request completes with RETRY_EXC_ERR",
			nil, true, Outcome{Reply: Completed, Count: 2, CheckCount: true, State: transport.Err, Status: transport.RetryExcErr}),
		reqCase("req-timeout-retransmits", "requester retry: a local ACK timeout resends the unacknowledged request", setup{},
			func(s *session) (Outcome, error) {
				psn, err := s.postAndRead(s.sendWR(), 1)
				if err != nil {
					return Outcome{}, err
				}
				// Before the timeout, nothing is sent again.
				if o, err := s.reqOutcome(psn); err != nil || o.Reply != Waiting {
					return o, err
				}
				s.clk.Advance(rto)
				o, err := s.reqOutcome(psn)
				if err != nil || o.Reply != Retransmit {
					return o, err
				}
				if err := s.ack(psn, 1); err != nil {
					return o, err
				}
				end, err := s.reqOutcome(psn)
				o.Status = end.Status
				return o, err
			}, Outcome{Reply: Retransmit, PSN: 0, CheckPSN: true, Count: 1, CheckCount: true, State: transport.RTS, Status: transport.Success}),
		reqCase("req-rnr-retry-exhausted", "RNR: after rnr_retry RNR NAKs the request completes with RNR_RETRY_EXC_ERR", setup{},
			func(s *session) (Outcome, error) { return s.rnrStorm(6) },
			Outcome{Reply: Completed, Count: 2, CheckCount: true, State: transport.Err, Status: transport.RNRRetryExcErr}),
		reqCase("req-rnr-retry-7-unlimited", "RNR: rnr_retry 7 retries without end", setup{rnrRetry: 7},
			func(s *session) (Outcome, error) { return s.rnrStorm(10) },
			Outcome{Reply: Retransmit, PSN: 0, CheckPSN: true, Count: 10, CheckCount: true, State: transport.RTS, Status: AnyStatus}),
		sendCase("req-ghost-nak-seq", "requester: a sequence error NAK for a PSN never sent is a ghost and is dropped",
			func(s *session, psn uint32) error { return s.nak(psn+7, bth.NAKSyndrome(bth.NAKPSNSequenceError)) }, false,
			waitingRTS),
		sendCase("req-ghost-rnr-nak", "requester: an RNR NAK for a PSN never sent is a ghost and is dropped",
			func(s *session, psn uint32) error { return s.nak(psn+7, bth.RNRNAKSyndrome(1)) }, false,
			waitingRTS),
		reqCase("req-rnr-waits-timer", "RNR: the requester resends only once the RNR NAK's timer has run", setup{},
			func(s *session) (Outcome, error) {
				psn, err := s.postAndRead(s.sendWR(), 1)
				if err != nil {
					return Outcome{}, err
				}
				const code = 14 // 1.28 ms
				if err := s.nak(psn, bth.RNRNAKSyndrome(code)); err != nil {
					return Outcome{}, err
				}
				s.clk.Advance(bth.RNRTimer(code) / 2)
				if o, err := s.reqOutcome(psn); err != nil || o.Reply != Waiting {
					if err == nil {
						o.Detail = "before the RNR timer ran out"
					}
					return o, err
				}
				s.clk.Advance(bth.RNRTimer(code))
				return s.reqOutcome(psn)
			}, Outcome{Reply: Retransmit, PSN: 0, CheckPSN: true, Count: 1, CheckCount: true, State: transport.RTS, Status: AnyStatus}),
		readCase("req-read-response-short", "requester: a READ response shorter than the READ asked for never completes it successfully", 64,
			func(s *session, psn uint32) error {
				return s.answer(bth.RCReadResponseOnly, psn, pay(32), withAETH(ackSyn, 1))
			},
			inError),
		readCase("req-read-response-long", "requester: a READ response longer than the READ asked for never completes it successfully", 64,
			func(s *session, psn uint32) error {
				return s.answer(bth.RCReadResponseOnly, psn, pay(128), withAETH(ackSyn, 1))
			},
			inError),
		readCase("req-read-response-middle-first", "requester: READ responses out of sequence (MIDDLE without FIRST) never complete the READ successfully", 2*mtu,
			func(s *session, psn uint32) error {
				if err := s.answer(bth.RCReadResponseMiddle, psn, pay(mtu)); err != nil {
					return err
				}
				return s.answer(bth.RCReadResponseLast, psn+1, pay(mtu), withAETH(ackSyn, 1))
			},
			inError),
		sendCase("req-atomic-ack-for-send", "requester: a response of the wrong kind (atomic ACK for a SEND) never completes the SEND successfully",
			func(s *session, psn uint32) error {
				return s.answer(bth.RCAtomicAcknowledge, psn, nil, withAETH(ackSyn, 1), withOrig(7))
			}, true,
			inError),
		reqCase("req-atomic-ack-completes", "requester: an atomic ACK returns the original value", setup{},
			func(s *session) (Outcome, error) {
				wr := transport.SendWR{Opcode: transport.WRAtomicFetchAndAdd, SGL: []transport.SGE{s.mr.SGE(48<<10, 8)}, RemoteAddr: 0x10000, RKey: 0x1234, CompareAdd: 1}
				psn, err := s.postAndRead(wr, 1)
				if err != nil {
					return Outcome{}, err
				}
				if err := s.answer(bth.RCAtomicAcknowledge, psn, nil, withAETH(ackSyn, 1), withOrig(0x1122334455667788)); err != nil {
					return Outcome{}, err
				}
				o, err := s.reqOutcome(psn)
				if err == nil && o.Status == transport.Success {
					if v := binary.LittleEndian.Uint64(s.mr.Bytes()[48<<10:]); v != 0x1122334455667788 {
						o.Reply = Reply(fmt.Sprintf("original value %#x placed, want 0x1122334455667788", v))
					}
				}
				return o, err
			}, completedWith(transport.Success, transport.RTS)),
	}
}
