package transport_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testharness"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

const sPSN = 5000 // the goroce side's first send PSN (see newRaw)

const timeoutShort = 2 * time.Second

// expectReq reads the next request from the engine and checks opcode and PSN.
func (r *rawPeer) expectReq(op bth.OpCode, psn uint32) bth.Packet {
	r.t.Helper()
	p := r.expect(2 * time.Second)
	if p.OpCode() != op || uint32(p.BTH().PSN()) != psn {
		r.t.Fatalf("got %v psn %d, want %v psn %d", p.OpCode(), p.BTH().PSN(), op, psn)
	}
	return p
}

// ackTo sends an ACK (or NAK) for psn from the raw responder.
func (r *rawPeer) ackTo(syn bth.Syndrome, psn uint32, msn uint32) {
	r.send(bth.RCAcknowledge, psn, false, nil, aeth(syn, msn))
}

func sendN(t *testing.T, s *testharness.Peer, n int, size int) {
	for i := range n {
		testharness.Must(t, s.QP.PostSend(&transport.SendWR{WRID: uint64(i), Opcode: transport.WRSend, Flags: transport.Signaled,
			SGL: []transport.SGE{s.MR.SGE(0, size)}}))
	}
}

// The device's timers run on the raw peer's manual clock (newRaw): a
// timeout or RNR retry happens exactly when a test advances r.clk past it,
// and r.quiet proves that nothing was sent, without waiting for silence.

func TestCompleterCoalescedACK(t *testing.T) {
	s, r, _ := newRaw(t, testharness.Options{Timeout: 16})
	sendN(t, s, 3, 10)
	for i := range 3 {
		r.expectReq(bth.RCSendOnly, sPSN+uint32(i))
	}
	r.ackTo(ack, sPSN+2, 3) // one ACK for all three
	for i := range 3 {
		if wc := testharness.Wait(t, s.SCQ, time.Second); wc.WRID != uint64(i) || wc.Status != transport.Success {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	// A ghost ACK for a PSN never sent and a stale one change nothing.
	r.ackTo(ack, sPSN+100, 9)
	r.ackTo(ack, sPSN, 1)
	sendN(t, s, 1, 10)
	r.expectReq(bth.RCSendOnly, sPSN+3)
	r.quiet()
	if s.SCQ.Len() != 0 {
		t.Fatal("completed without an ACK")
	}
	if g := s.Dev.Counters().GhostResponses.Load(); g != 1 {
		t.Fatalf("ghost responses %d", g)
	}
}

func TestCompleterSequenceNAK(t *testing.T) {
	s, r, _ := newRaw(t, testharness.Options{})
	sendN(t, s, 4, 10)
	for i := range 4 {
		r.expectReq(bth.RCSendOnly, sPSN+uint32(i))
	}
	// "expected sPSN+2": the first two are acknowledged, the rest resent.
	r.ackTo(nakSeq, sPSN+2, 2)
	r.expectReq(bth.RCSendOnly, sPSN+2)
	r.expectReq(bth.RCSendOnly, sPSN+3)
	for i := range 2 {
		if wc := testharness.Wait(t, s.SCQ, time.Second); wc.WRID != uint64(i) {
			t.Fatalf("completion %+v", wc)
		}
	}
	r.ackTo(ack, sPSN+3, 4)
	testharness.Wait(t, s.SCQ, time.Second)
	testharness.Wait(t, s.SCQ, time.Second)
	c := s.Dev.Counters()
	if c.RcvdSeqErr.Load() != 1 || c.RetransmittedPkts.Load() != 2 {
		t.Fatalf("rcvd_seq_err %d retransmitted %d", c.RcvdSeqErr.Load(), c.RetransmittedPkts.Load())
	}
}

func TestCompleterErrorNAKs(t *testing.T) {
	for _, c := range []struct {
		syn    bth.Syndrome
		want   transport.WCStatus
		vendor uint32 // mlx5's vendor_err for the NAK
	}{
		{nakInvalid, transport.RemInvReqErr, 0x8a},
		{nakAccess, transport.RemAccessErr, 0x88},
		{nakOp, transport.RemOpErr, 0x89},
	} {
		t.Run(c.want.String(), func(t *testing.T) {
			s, r, _ := newRaw(t, testharness.Options{})
			sendN(t, s, 3, 10)
			for i := range 3 {
				r.expectReq(bth.RCSendOnly, sPSN+uint32(i))
			}
			r.ackTo(c.syn, sPSN+1, 1)
			// The first is acknowledged by the NAK; the second failed; the
			// third is flushed; the QP is in ERR (IBA 9.9.3.1).
			for i, st := range []transport.WCStatus{transport.Success, c.want, transport.WRFlushErr} {
				wc := testharness.Wait(t, s.SCQ, time.Second)
				if wc.WRID != uint64(i) || wc.Status != st {
					t.Fatalf("completion %d: %+v, want %v", i, wc, st)
				}
				if want := map[bool]uint32{true: c.vendor}[st == c.want]; wc.VendorErr != want {
					t.Fatalf("completion %d: vendor_err 0x%x, want 0x%x", i, wc.VendorErr, want)
				}
			}
			if s.QP.State() != transport.Err {
				t.Fatal("QP not in ERR")
			}
		})
	}
}

func TestCompleterRNR(t *testing.T) {
	for _, c := range []struct {
		name     string
		rnrRetry uint8
		naks     int
		ok       bool
	}{
		{"rnr_retry 0 fails at once", 0, 1, false},
		{"rnr_retry 2 takes two retries", 2, 2, true},
		{"rnr_retry 2 fails on the third", 2, 3, false},
		{"rnr_retry 7 retries for ever", 7, 25, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, r, _ := newRaw(t, testharness.Options{RNRRetry: c.rnrRetry, NoRNRRetry: c.rnrRetry == 0, Timeout: 16})
			sendN(t, s, 1, 10)
			r.expectReq(bth.RCSendOnly, sPSN)
			for i := range c.naks {
				r.ackTo(bth.RNRNAKSyndrome(1), sPSN, 0) // 10 µs
				if i == c.naks-1 && !c.ok {
					break
				}
				r.quiet() // the NAK is handled and nothing resent yet
				r.clk.Advance(bth.RNRTimer(1))
				r.expectReq(bth.RCSendOnly, sPSN)
			}
			if c.ok {
				r.ackTo(ack, sPSN, 1)
				if wc := testharness.Wait(t, s.SCQ, time.Second); wc.Status != transport.Success {
					t.Fatalf("completion %+v", wc)
				}
				return
			}
			if wc := testharness.Wait(t, s.SCQ, time.Second); wc.Status != transport.RNRRetryExcErr {
				t.Fatalf("completion %+v, want RNR retry exceeded", wc)
			}
			if s.QP.State() != transport.Err {
				t.Fatal("QP not in ERR")
			}
		})
	}
}

func TestCompleterRNRTimer(t *testing.T) {
	s, r, _ := newRaw(t, testharness.Options{})
	sendN(t, s, 1, 10)
	r.expectReq(bth.RCSendOnly, sPSN)
	r.ackTo(bth.RNRNAKSyndrome(18), sPSN, 0) // 5.12 ms
	r.quiet()
	r.clk.Advance(bth.RNRTimer(18) - time.Nanosecond)
	r.quiet() // not a nanosecond before the RNR timer
	r.clk.Advance(time.Nanosecond)
	r.expectReq(bth.RCSendOnly, sPSN)
}

func TestCompleterRetryExhaustion(t *testing.T) {
	// timeout 10 = 4.19 ms; retry_cnt 3: the first transmission and three
	// retries, then RETRY_EXC_ERR.
	o := testharness.Options{Timeout: 10, Retry: 3}
	const rto = 4096 << 10 * time.Nanosecond
	s, r, _ := newRaw(t, o)
	sendN(t, s, 2, 10)
	r.expectReq(bth.RCSendOnly, sPSN)
	r.expectReq(bth.RCSendOnly, sPSN+1)
	for i := range 4 {
		if i > 0 {
			expectProbe(r, sPSN) // a retry after a timeout resends the oldest alone
		}
		r.clk.Advance(rto - time.Nanosecond)
		r.quiet() // no retry a nanosecond before the timeout
		r.clk.Advance(time.Nanosecond)
	}
	wc := testharness.Wait(t, s.SCQ, time.Second)
	if wc.Status != transport.RetryExcErr || wc.WRID != 0 || wc.VendorErr != transport.VendorRetryExceeded {
		t.Fatalf("completion %+v, want retry exceeded with mlx5's vendor_err 0x81", wc)
	}
	if wc := testharness.Wait(t, s.SCQ, time.Second); wc.Status != transport.WRFlushErr {
		t.Fatalf("completion %+v", wc)
	}
	r.clk.Advance(time.Hour) // no timer is left to send anything
	r.sentNoMore()
	if c := s.Dev.Counters(); c.Timeouts.Load() != 4 || c.RetryExceededErr.Load() != 1 {
		t.Fatalf("timeouts %d retry_exceeded %d", c.Timeouts.Load(), c.RetryExceededErr.Load())
	}
}

// expectProbe reads what a retry after a local ACK timeout sends: the
// oldest unacknowledged packet alone, asking for an acknowledgement; the
// rest waits for a response that shows progress (qp: requester.probe).
func expectProbe(r *rawPeer, psn uint32) {
	r.t.Helper()
	if p := r.expectReq(bth.RCSendOnly, psn); !p.BTH().AckReq() {
		r.t.Fatalf("retry after a timeout: psn %d without AckReq", psn)
	}
	r.quiet()
}

func TestCompleterProgressResetsRetries(t *testing.T) {
	// With retry_cnt 1, two losses in a row fail, but a loss, progress, and
	// a loss again does not: the count is of consecutive retries.
	s, r, _ := newRaw(t, testharness.Options{Timeout: 8, Retry: 1})
	const rto = 4096 << 8 * time.Nanosecond
	sendN(t, s, 2, 10)
	r.expectReq(bth.RCSendOnly, sPSN)
	r.expectReq(bth.RCSendOnly, sPSN+1)
	r.clk.Advance(rto)
	expectProbe(r, sPSN) // timed out once
	r.ackTo(ack, sPSN, 1)
	r.expectReq(bth.RCSendOnly, sPSN+1) // progress: the window is open again
	r.quiet()                           // the ACK is handled before the clock moves on
	r.clk.Advance(rto)
	expectProbe(r, sPSN+1) // timed out again, after progress
	r.ackTo(ack, sPSN+1, 2)
	for range 2 {
		if wc := testharness.Wait(t, s.SCQ, time.Second); wc.Status != transport.Success {
			t.Fatalf("completion %+v", wc)
		}
	}
}

func TestCompleterReadResponses(t *testing.T) {
	s, r, _ := newRaw(t, testharness.Options{Timeout: 16})
	testharness.Must(t, s.QP.PostSend(&transport.SendWR{WRID: 1, Opcode: transport.WRRDMARead, Flags: transport.Signaled,
		SGL: []transport.SGE{s.MR.SGE(0, 4000)}, RemoteAddr: 0x10000, RKey: 0x77}))
	p := r.expectReq(bth.RCReadRequest, sPSN)
	if rh := p.RETH(); rh.VA() != 0x10000 || rh.DMALen() != 4000 || !p.BTH().AckReq() {
		t.Fatalf("READ request va %#x len %d", rh.VA(), rh.DMALen())
	}
	data := make([]byte, 4000)
	fill(data, 9)
	// FIRST arrives, MIDDLE sPSN+1 is lost, MIDDLE sPSN+2 shows the gap:
	// the requester asks again for the rest from sPSN+1 (IBA 9.7.5.1.3).
	r.send(bth.RCReadResponseFirst, sPSN, false, data[:1024], aeth(ack, 1))
	r.send(bth.RCReadResponseMiddle, sPSN+2, false, data[2048:3072])
	p = r.expectReq(bth.RCReadRequest, sPSN+1)
	if rh := p.RETH(); rh.VA() != 0x10000+1024 || rh.DMALen() != 2976 {
		t.Fatalf("retried READ va %#x len %d", rh.VA(), rh.DMALen())
	}
	r.send(bth.RCReadResponseLast, sPSN+3, false, data[3072:], aeth(ack, 1)) // rest of the old burst: ignored
	r.quiet()
	r.send(bth.RCReadResponseFirst, sPSN+1, false, data[1024:2048], aeth(ack, 1))
	r.send(bth.RCReadResponseMiddle, sPSN+2, false, data[2048:3072])
	r.send(bth.RCReadResponseLast, sPSN+3, false, data[3072:], aeth(ack, 1))
	if wc := testharness.Wait(t, s.SCQ, time.Second); wc.Status != transport.Success || wc.Opcode != transport.OpRDMARead {
		t.Fatalf("completion %+v", wc)
	}
	if !bytes.Equal(s.Buf[:4000], data) {
		t.Fatal("READ data differs")
	}
	// An ACK past a READ whose responses never came means they were lost.
	testharness.Must(t, s.QP.PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRRDMARead, Flags: transport.Signaled,
		SGL: []transport.SGE{s.MR.SGE(0, 10)}, RemoteAddr: 0x20000, RKey: 0x77}))
	testharness.Must(t, s.QP.PostSend(&transport.SendWR{WRID: 3, Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{s.MR.SGE(0, 10)}}))
	r.expectReq(bth.RCReadRequest, sPSN+4)
	r.expectReq(bth.RCSendOnly, sPSN+5)
	r.ackTo(ack, sPSN+5, 3)
	r.expectReq(bth.RCReadRequest, sPSN+4)
}

func TestCompleterMaxRdAtomic(t *testing.T) {
	s, r, _ := newRaw(t, testharness.Options{RdAtomic: 2, Timeout: 16})
	for i := range 4 {
		testharness.Must(t, s.QP.PostSend(&transport.SendWR{WRID: uint64(i), Opcode: transport.WRRDMARead, Flags: transport.Signaled,
			SGL: []transport.SGE{s.MR.SGE(i*8, 8)}, RemoteAddr: 0x1000, RKey: 1}))
	}
	// Only two READs go out until one completes.
	r.expectReq(bth.RCReadRequest, sPSN)
	r.expectReq(bth.RCReadRequest, sPSN+1)
	r.quiet()
	r.send(bth.RCReadResponseOnly, sPSN, false, make([]byte, 8), aeth(ack, 1))
	r.expectReq(bth.RCReadRequest, sPSN+2)
	r.quiet()
}

func TestCompleterFence(t *testing.T) {
	s, r, _ := newRaw(t, testharness.Options{Timeout: 16})
	testharness.Must(t, s.QP.PostSend(&transport.SendWR{WRID: 1, Opcode: transport.WRRDMARead, SGL: []transport.SGE{s.MR.SGE(0, 8)}, RemoteAddr: 0x1000, RKey: 1}))
	testharness.Must(t, s.QP.PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRSend, Flags: transport.Fence, SGL: []transport.SGE{s.MR.SGE(0, 8)}}))
	r.expectReq(bth.RCReadRequest, sPSN)
	r.quiet() // the fenced SEND waits for the READ
	r.send(bth.RCReadResponseOnly, sPSN, false, make([]byte, 8), aeth(ack, 1))
	r.expectReq(bth.RCSendOnly, sPSN+1)
}

func TestCompleterReorderedNAKPair(t *testing.T) {
	// A reordered packet makes a responder NAK twice (rxe and goroce
	// alike): 3 overtakes 2 (NAK 2, 3 dropped), 2 arrives and is taken, and
	// the next original, 4, is out of order again (NAK 3). The retry for
	// the first NAK has already resent 3..7: the second NAK must not send
	// them again (qp.reorderEcho). Any other NAK still goes back at once, and
	// if the resent packet was lost too the local ACK timer recovers it.
	const rto = 4096 << 14 * time.Nanosecond
	s, r, _ := newRaw(t, testharness.Options{Timeout: 14, Retry: 7, Window: 8})
	expect := func(from, to int) {
		t.Helper()
		for i := from; i <= to; i++ {
			r.expectReq(bth.RCSendOnly, sPSN+uint32(i))
		}
	}
	sendN(t, s, 8, 10)
	expect(0, 7)
	r.ackTo(nakSeq, sPSN+2, 2)
	expect(2, 7) // the retry
	r.ackTo(nakSeq, sPSN+3, 3)
	r.quiet() // 2 acknowledged, nothing resent
	r.ackTo(nakSeq, sPSN+4, 4)
	expect(4, 7) // the resent 4 was lost: a new loss, resent at once
	r.ackTo(ack, sPSN+7, 8)

	sendN(t, s, 8, 10)
	expect(8, 15)
	r.ackTo(nakSeq, sPSN+10, 10)
	expect(10, 15)
	r.ackTo(nakSeq, sPSN+11, 11)
	r.quiet()
	// The resent 11 was lost too: the local ACK timer goes back for it.
	r.clk.Advance(rto - time.Nanosecond)
	r.quiet()
	r.clk.Advance(time.Nanosecond)
	expectProbe(r, sPSN+11)
	r.ackTo(ack, sPSN+11, 12)
	expect(12, 15)
	r.ackTo(ack, sPSN+15, 16)
	for i := range 16 {
		if wc := testharness.Wait(t, s.SCQ, time.Second); wc.WRID != uint64(i%8) || wc.Status != transport.Success {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	c := s.Dev.Counters()
	if c.RcvdSeqErr.Load() != 5 || c.CompleterRetryErr.Load() != 3 || c.Timeouts.Load() != 1 || c.RetransmittedPkts.Load() != 6+4+6+5 {
		t.Fatalf("rcvd_seq_err %d completer_retry_err %d timeouts %d retransmitted %d",
			c.RcvdSeqErr.Load(), c.CompleterRetryErr.Load(), c.Timeouts.Load(), c.RetransmittedPkts.Load())
	}
}

func TestCompleterTimeoutResendsOldestAlone(t *testing.T) {
	// A responder silent for a whole local ACK timeout may be working
	// through a queue of what was sent (rxe on a slow guest); a retry then
	// resends the oldest packet alone, with AckReq, and the window opens
	// again at the first response that shows progress. Before, each
	// timeout resent the whole window, lengthening that queue.
	const rto = 4096 << 14 * time.Nanosecond
	s, r, _ := newRaw(t, testharness.Options{Timeout: 14, Retry: 7, Window: 8})
	sendN(t, s, 8, 10)
	for i := range 8 {
		r.expectReq(bth.RCSendOnly, sPSN+uint32(i))
	}
	r.clk.Advance(rto)
	expectProbe(r, sPSN)
	r.clk.Advance(rto)
	expectProbe(r, sPSN)
	// The responder took 0..3 before the first timeout (its queue held the
	// rest, lost): the resent 0 is a duplicate it acknowledges with 3.
	r.ackTo(ack, sPSN+3, 4)
	for i := 4; i < 8; i++ {
		r.expectReq(bth.RCSendOnly, sPSN+uint32(i))
	}
	r.ackTo(ack, sPSN+7, 8)
	for i := range 8 {
		if wc := testharness.Wait(t, s.SCQ, time.Second); wc.WRID != uint64(i) || wc.Status != transport.Success {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
	if c := s.Dev.Counters(); c.Timeouts.Load() != 2 || c.RetransmittedPkts.Load() != 2+4 {
		t.Fatalf("timeouts %d retransmitted %d", c.Timeouts.Load(), c.RetransmittedPkts.Load())
	}
}

func TestCompleterReadReorderedResponse(t *testing.T) {
	// The same reordering on READ responses: MIDDLE 2 overtakes 1 (a gap:
	// ask again from 1), 1 arrives late and is taken, then the rest of the
	// old burst, sent before the responder saw the retry, shows 2 missing.
	// The retry from 1 has already asked for 2: asking once more would make
	// the responder replay the READ again (rxe replays every outstanding
	// READ from there: 320 packets per gap in read_bw). The first packet
	// after the late one is the reordering's echo; the ones after it show
	// the same gap, which must not start a retry each either.
	for _, tc := range []struct {
		name     string
		packets  int // the READ's response packets
		burstEnd int // the old burst goes on from 3 to this one
	}{{"echo only", 5, 3}, {"long burst", 7, 5}} {
		t.Run(tc.name, func(t *testing.T) {
			s, r, _ := newRaw(t, testharness.Options{Timeout: 16})
			size := tc.packets*1024 - 120
			testharness.Must(t, s.QP.PostSend(&transport.SendWR{WRID: 1, Opcode: transport.WRRDMARead, Flags: transport.Signaled,
				SGL: []transport.SGE{s.MR.SGE(0, size)}, RemoteAddr: 0x10000, RKey: 0x77}))
			r.expectReq(bth.RCReadRequest, sPSN)
			data := make([]byte, size)
			fill(data, 5)
			chunk := func(i int) []byte { return data[i*1024 : min(len(data), (i+1)*1024)] }
			r.send(bth.RCReadResponseFirst, sPSN, false, chunk(0), aeth(ack, 1))
			r.send(bth.RCReadResponseMiddle, sPSN+2, false, chunk(2))
			if rh := r.expectReq(bth.RCReadRequest, sPSN+1).RETH(); rh.VA() != 0x10000+1024 || rh.DMALen() != uint32(size-1024) {
				t.Fatalf("retried READ va %#x len %d", rh.VA(), rh.DMALen())
			}
			r.send(bth.RCReadResponseMiddle, sPSN+1, false, chunk(1)) // the late one
			for i := 3; i <= tc.burstEnd; i++ {
				r.send(bth.RCReadResponseMiddle, sPSN+uint32(i), false, chunk(i)) // the old burst
			}
			r.quiet() // no second retry
			// The responder's replay from 1.
			last := tc.packets - 1
			r.send(bth.RCReadResponseFirst, sPSN+1, false, chunk(1), aeth(ack, 1))
			for i := 2; i < last; i++ {
				r.send(bth.RCReadResponseMiddle, sPSN+uint32(i), false, chunk(i))
			}
			r.send(bth.RCReadResponseLast, sPSN+uint32(last), false, chunk(last), aeth(ack, 1))
			if wc := testharness.Wait(t, s.SCQ, time.Second); wc.Status != transport.Success || wc.Opcode != transport.OpRDMARead {
				t.Fatalf("completion %+v", wc)
			}
			if !bytes.Equal(s.Buf[:size], data) {
				t.Fatal("READ data differs")
			}
			if c := s.Dev.Counters(); c.CompleterRetryErr.Load() != 1 {
				t.Fatalf("completer_retry_err %d", c.CompleterRetryErr.Load())
			}
		})
	}
}
