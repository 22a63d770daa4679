package transport_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

// death checks that the QP died once, for cause, told its environment so,
// and returns why.
func (h *harness) death(cause transport.Cause) *transport.Death {
	h.t.Helper()
	d := h.q.Death()
	if d == nil || h.q.State() != transport.Err {
		h.t.Fatalf("state %v, death %v; want ERR with a death", h.q.State(), d)
	}
	if d.Cause != cause || d.QPN != localQPN || d.Rule != cause.Rule() || d.Rule == "" {
		h.t.Fatalf("death %q (cause %v, rule %q); want cause %v", d.Error(), d.Cause, d.Rule, cause)
	}
	h.mu.Lock()
	died := h.died
	h.mu.Unlock()
	var told *transport.Death
	if len(died) != 1 || !errors.As(died[0], &told) || told != d {
		h.t.Fatalf("the environment was told %v; want the death once", died)
	}
	return d
}

// trace renders a death's packets as "-> RC RDMA WRITE Only PSN 0x000005".
func trace(d *transport.Death) []string {
	var v []string
	for _, t := range d.Trace {
		f, err := bth.DecodeSealed(t.Datagram())
		if err != nil {
			v = append(v, err.Error())
			continue
		}
		p, err := bth.Parse(f.RoCE())
		if err != nil {
			v = append(v, err.Error())
			continue
		}
		dir := "<-"
		if t.Out {
			dir = "->"
		}
		s := dir + " " + p.OpCode().String()
		if p.Info().Headers.Has(bth.ExtAETH) {
			s += " " + p.AETH().Syndrome().String()
		}
		v = append(v, s)
	}
	return v
}

func sameTrace(t *testing.T, d *transport.Death, want ...string) {
	t.Helper()
	got := trace(d)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("trace\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// A NAK Remote Access Error ends the connection (IBA 9.9.3): the death
// names the NAK, the WRITE it answered, and shows both packets.
func TestDeathNAKRemoteAccess(t *testing.T) {
	h := newHarness(t, harnessOpts{sendPSN: 5})
	wr := transport.SendWR{WRID: 77, Opcode: transport.WRRDMAWrite, Flags: transport.Signaled, SGL: []transport.SGE{h.mr.SGE(0, 16)},
		RemoteAddr: 0x1000, RKey: 0xbad}
	if err := h.q.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	h.run()
	h.sent()
	h.deliver(bth.RCAcknowledge, 5, nil, qpAETH(bth.NAKSyndrome(bth.NAKRemoteAccessError), 0))
	d := h.death(transport.CauseRemoteAccess)
	if !d.HasWR || d.WRID != 77 || d.Opcode != transport.WRRDMAWrite || d.Status != transport.RemAccessErr || !d.HasPSN || d.PSN != 5 {
		t.Fatalf("death %+v", d)
	}
	sameTrace(t, d, "-> "+bth.RCWriteOnly.String(), "<- "+bth.RCAcknowledge.String()+" "+bth.NAKSyndrome(bth.NAKRemoteAccessError).String())
	ex := d.Explain()
	for _, w := range []string{"NAK Remote Access Error received", "PSN 0x000005", "IBA 9.9.3", "work request 77", "rkey 0xbad",
		// the trace's lines are the one packet format, bth.Packet.Summary
		"-> RC RDMA WRITE Only qpn=", "psn=0x000005 ackreq=1 reth va=0x1000 rkey=0xbad dmalen=16 payload=16"} {
		if !strings.Contains(ex, w) {
			t.Errorf("Explain lacks %q:\n%s", w, ex)
		}
	}
	if wc := polls(h.scq); len(wc) != 1 || wc[0].Status != transport.RemAccessErr {
		t.Fatalf("completions %+v", wc)
	}
}

// A responder that refuses a WRITE with a bad R_Key NAKs it and dies
// (IBA 9.9.3.1); the death carries the key error behind it.
func TestDeathResponderRefuses(t *testing.T) {
	h := newHarness(t, harnessOpts{recvPSN: 9})
	h.deliver(bth.RCWriteOnly, 9, make([]byte, 8), qpRETH(h.mr.Addr(), h.mr.RKey()^0x100, 8))
	d := h.death(transport.CauseResponderError)
	if d.HasWR || !d.HasPSN || d.PSN != 9 || d.Err == nil || !errors.Is(d, d.Err) {
		t.Fatalf("death %+v", d)
	}
	sameTrace(t, d, "<- "+bth.RCWriteOnly.String(), "-> "+bth.RCAcknowledge.String()+" "+bth.NAKSyndrome(bth.NAKRemoteAccessError).String())
}

// The local ACK timer running out with no retry left (IBA 9.7.6.1.3): the
// death says so, with the timeout, and the trace holds the SEND and its
// retransmission.
func TestDeathRetryExceeded(t *testing.T) {
	h := newHarness(t, harnessOpts{timeout: 10, retry: 1}) // 4.19 ms
	h.postSends(1)
	for range 2 {
		h.advance(5 * time.Millisecond)
	}
	d := h.death(transport.CauseRetryExceeded)
	if d.Status != transport.RetryExcErr || !strings.Contains(d.Detail, "local ACK timer expired") || !strings.Contains(d.Detail, "retry_cnt 1") {
		t.Fatalf("death %q", d.Error())
	}
	send := "-> " + bth.RCSendOnly.String()
	sameTrace(t, d, send, send)
}

// RNR NAKs that outlast rnr_retry (IBA 9.7.5.2.8).
func TestDeathRNRRetryExceeded(t *testing.T) {
	h := newHarness(t, harnessOpts{rnr: 1})
	h.postSends(1)
	h.deliver(bth.RCAcknowledge, 0, nil, qpAETH(bth.RNRNAKSyndrome(1), 0))
	h.advance(time.Millisecond)
	h.deliver(bth.RCAcknowledge, 0, nil, qpAETH(bth.RNRNAKSyndrome(1), 0))
	d := h.death(transport.CauseRNRRetryExceeded)
	if d.Status != transport.RNRRetryExcErr || !strings.Contains(d.Detail, "rnr_retry 1") {
		t.Fatalf("death %q", d.Error())
	}
	if got := trace(d); len(got) != 4 {
		t.Fatalf("trace %v; want SEND, RNR NAK, SEND, RNR NAK", got)
	}
}

// The flight recorder keeps the last transport.TraceLen packets, oldest first;
// the consumer's move to ERR is a death too, and RESET forgets it.
func TestDeathTraceAndReset(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.postSends(transport.TraceLen + 3)
	if err := h.q.Modify(&transport.QPAttr{State: transport.Err}, transport.AttrState); err != nil {
		t.Fatal(err)
	}
	d := h.death(transport.CauseModified)
	if len(d.Trace) != transport.TraceLen {
		t.Fatalf("trace of %d packets, want %d", len(d.Trace), transport.TraceLen)
	}
	for i, tp := range d.Trace {
		f, err := bth.DecodeSealed(tp.Datagram())
		if err != nil {
			t.Fatal(err)
		}
		p, err := bth.Parse(f.RoCE())
		if err != nil {
			t.Fatal(err)
		}
		if want := uint32(3 + i); uint32(p.BTH().PSN()) != want || !tp.Out || tp.Len != len(tp.Datagram()) || len(tp.Head) > transport.TraceSnap {
			t.Fatalf("packet %d: PSN %d out %v len %d head %d; want PSN %d sent", i, p.BTH().PSN(), tp.Out, tp.Len, len(tp.Head), want)
		}
	}
	if err := h.q.Modify(&transport.QPAttr{State: transport.Reset}, transport.AttrState); err != nil {
		t.Fatal(err)
	}
	if d := h.q.Death(); d != nil {
		t.Fatalf("after RESET: death %q", d.Error())
	}
}
