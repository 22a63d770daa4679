package transport_test

import (
	"github.com/goroce/goroce/transport"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/dcqcn"
	"github.com/goroce/goroce/inet"
	"github.com/goroce/goroce/internal/manualclock"
	"github.com/goroce/goroce/internal/testharness"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/fault"
	"github.com/goroce/goroce/nic/mem"
)

// ccCounter reads one of a device's counters by its listed name.
func ccCounter(d *transport.Device, name string) uint64 {
	for _, c := range d.Counters().List() {
		if c.Name == name {
			return c.Value
		}
	}
	panic("no counter " + name)
}

// markingPair is two in-memory peers on a manual clock whose links mark
// CE every packet a rule matches (nic/fault's ecn action), each device's
// outgoing datagrams recorded.
func markingPair(t *testing.T, rule string, cc transport.CongestionOptions) (a, b *testharness.Peer, clk *manualclock.Clock, sent func(who string) [][]byte) {
	t.Helper()
	r, err := fault.ParseRule(rule)
	if err != nil {
		t.Fatal(err)
	}
	clk = manualclock.New()
	var mu sync.Mutex
	out := map[string][][]byte{}
	a, b, _ = testharness.MemPair(t, testharness.Options{Clock: clk, Congestion: cc,
		Wrap: func(l *mem.Link) nic.Link { return fault.Wrap(l, fault.Config{Rules: []fault.Rule{r}}) },
		Trace: func(who string) func(bool, []byte) {
			return func(o bool, dg []byte) {
				if o {
					mu.Lock()
					out[who] = append(out[who], append([]byte(nil), dg...))
					mu.Unlock()
				}
			}
		}})
	return a, b, clk, func(who string) [][]byte {
		mu.Lock()
		defer mu.Unlock()
		return append([][]byte(nil), out[who]...)
	}
}

func writeOnce(t *testing.T, a, b *testharness.Peer, wrid uint64, n int) {
	t.Helper()
	testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: wrid, Opcode: transport.WRRDMAWrite, Flags: transport.Signaled,
		SGL: []transport.SGE{a.MR.SGE(0, n)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()}))
	if wc := testharness.Wait(t, a.SCQ, timeoutShort); wc.WRID != wrid || wc.Status != transport.Success {
		t.Fatalf("WRITE %d: %+v", wrid, wc)
	}
}

// TestCongestionCNP: the notification point and the reaction point
// between two engines. Every WRITE A sends arrives marked CE; B counts
// each (np_ecn_marked_roce_packets) and answers with a CNP at most once
// per np_min_time_between_cnps (1 ms here, on a clock the test moves);
// A's QP handles each (rp_cnp_handled) and its rate limiter comes on.
// A's packets leave ECT(0); B's CNP leaves Not-ECT at DSCP 48, to A's QP.
func TestCongestionCNP(t *testing.T) {
	p := dcqcn.Default()
	p.MinTimeBetweenCNPs = 1000
	a, b, clk, sent := markingPair(t, "tx opcode=RC_RDMA_WRITE_ONLY ecn", transport.CongestionOptions{Params: &p})
	for i := range 5 {
		// The limiter paces A on this clock: move it past each packet.
		clk.Advance(time.Microsecond)
		writeOnce(t, a, b, uint64(i+1), 512)
	}
	if got := ccCounter(b.Dev, "np_ecn_marked_roce_packets"); got != 5 {
		t.Fatalf("np_ecn_marked_roce_packets %d, want 5", got)
	}
	if got := ccCounter(b.Dev, "np_cnp_sent"); got != 1 {
		t.Fatalf("np_cnp_sent %d within np_min_time_between_cnps, want 1", got)
	}
	// The CNP left B before the ACK that completed the WRITE, on a link
	// that keeps order: A has handled it.
	if got := ccCounter(a.Dev, "rp_cnp_handled"); got != 1 {
		t.Fatalf("rp_cnp_handled %d, want 1", got)
	}
	if rate, on := a.QP.RateMbps(); !on || rate >= 25000 {
		t.Fatalf("A's rate %.0f Mb/s limited %v after a CNP", rate, on)
	}
	clk.Advance(time.Millisecond)
	writeOnce(t, a, b, 6, 512)
	if got, h := ccCounter(b.Dev, "np_cnp_sent"), ccCounter(a.Dev, "rp_cnp_handled"); got != 2 || h != 2 {
		t.Fatalf("after np_min_time_between_cnps: np_cnp_sent %d rp_cnp_handled %d, want 2 and 2", got, h)
	}
	for _, dg := range sent(a.Addr.String()) {
		if e := inet.ECN(dg); e != inet.ECT0 {
			t.Fatalf("A sent a packet with ECN %02b, want ECT(0)", e)
		}
	}
	cnps := 0
	for _, dg := range sent(b.Addr.String()) {
		f, err := bth.DecodeIP(dg)
		if err != nil {
			t.Fatal(err)
		}
		p, err := bth.Parse(f.RoCE())
		if err != nil {
			t.Fatal(err)
		}
		if !p.IsCNP() {
			if e := inet.ECN(dg); e != inet.ECT0 {
				t.Fatalf("B sent %v with ECN %02b, want ECT(0)", p.OpCode(), e)
			}
			continue
		}
		cnps++
		if p.BTH().DestQP() != a.QP.QPN() || !p.BTH().BECN() || inet.IPv4(dg).TOS() != 48<<2 {
			t.Fatalf("CNP to QP 0x%x BECN %v TOS %#x, want A's QP 0x%x, BECN, DSCP 48 Not-ECT",
				p.BTH().DestQP(), p.BTH().BECN(), inet.IPv4(dg).TOS(), a.QP.QPN())
		}
	}
	if cnps != 2 {
		t.Fatalf("B sent %d CNPs, want 2", cnps)
	}
}

// TestCongestionOff: with DCQCN off marked packets are counted, no CNP
// is sent, and the packets still leave ECT(0) unless NoECT.
func TestCongestionOff(t *testing.T) {
	a, b, _, sent := markingPair(t, "tx opcode=RC_RDMA_WRITE_ONLY ecn", transport.CongestionOptions{Off: true, NoECT: true})
	writeOnce(t, a, b, 1, 64)
	if m, s := ccCounter(b.Dev, "np_ecn_marked_roce_packets"), ccCounter(b.Dev, "np_cnp_sent"); m != 1 || s != 0 {
		t.Fatalf("DCQCN off: marked %d (want 1), CNPs sent %d (want 0)", m, s)
	}
	if _, on := a.Dev.Congestion(); on {
		t.Fatal("Congestion() says on with Off set")
	}
	for _, dg := range sent(a.Addr.String()) {
		if e := inet.ECN(dg); e != inet.NotECT {
			t.Fatalf("NoECT: A sent ECN %02b", e)
		}
	}
}

// TestCongestionPacing: after a CNP the requester sends at the rate
// DCQCN allows, on the QP's clock. rp_rate_to_set_on_first_cnp 8 Mb/s
// is one byte a microsecond: a 4 KiB WRITE (four packets of 1078 bytes
// at MTU 1024) leaves one packet at once and then one per 1078 µs as the
// clock moves, and completes once the clock has moved enough.
func TestCongestionPacing(t *testing.T) {
	p := dcqcn.Default()
	p.RateToSetOnFirstCNP = 8
	p.TimeReset = 1 << 24 // no increase during the test
	a, b, clk, _ := markingPair(t, "tx opcode=RC_RDMA_WRITE_ONLY ecn", transport.CongestionOptions{Params: &p})
	writeOnce(t, a, b, 1, 64) // marked: the CNP limits A to 8 Mb/s
	if rate, on := a.QP.RateMbps(); !on || rate != 8 {
		t.Fatalf("rate %.1f Mb/s limited %v, want 8 (rp_rate_to_set_on_first_cnp)", rate, on)
	}
	before := ccCounter(a.Dev, "sent_pkts")
	testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRRDMAWrite, Flags: transport.Signaled,
		SGL: []transport.SGE{a.MR.SGE(0, 4096)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()}))
	// The post ran the requester: the pacer let one packet go.
	if got := ccCounter(a.Dev, "sent_pkts") - before; got != 1 {
		t.Fatalf("%d packets left at once, want 1", got)
	}
	const gap = 1078 * time.Microsecond // 1078 bytes at a byte a microsecond
	clk.Advance(gap - 10*time.Microsecond)
	if got := ccCounter(a.Dev, "sent_pkts") - before; got != 1 {
		t.Fatalf("%d packets after %v, want still 1", got, gap-10*time.Microsecond)
	}
	clk.Advance(20 * time.Microsecond)
	if got := ccCounter(a.Dev, "sent_pkts") - before; got != 2 {
		t.Fatalf("%d packets after %v, want 2", got, gap+10*time.Microsecond)
	}
	clk.Advance(3 * gap)
	if wc := testharness.Wait(t, a.SCQ, timeoutShort); wc.WRID != 2 || wc.Status != transport.Success {
		t.Fatalf("paced WRITE: %+v", wc)
	}
	if got := ccCounter(a.Dev, "sent_pkts") - before; got != 4 {
		t.Fatalf("%d packets for a 4 KiB WRITE, want 4", got)
	}
}

// An rp_max_rate below the line rate paces a QP from its first packet,
// before any CNP: the port of that speed the setting describes
// (dcqcn.RP.Capped).
func TestCongestionMaxRate(t *testing.T) {
	p := dcqcn.Default()
	p.MaxRate = 8 // a byte a microsecond
	// The rule marks nothing this test sends: no CNP comes.
	a, b, clk, _ := markingPair(t, "tx opcode=RC_SEND_ONLY ecn", transport.CongestionOptions{Params: &p})
	before := ccCounter(a.Dev, "sent_pkts")
	testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.Signaled,
		SGL: []transport.SGE{a.MR.SGE(0, 4096)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()}))
	if got := ccCounter(a.Dev, "sent_pkts") - before; got != 1 {
		t.Fatalf("%d packets left at once, want 1 (paced at rp_max_rate)", got)
	}
	if rate, on := a.QP.RateMbps(); !on || rate != 8 {
		t.Fatalf("rate %.1f Mb/s limited %v, want 8 (rp_max_rate)", rate, on)
	}
	const gap = 1078 * time.Microsecond // 1078 bytes at a byte a microsecond
	clk.Advance(gap + 10*time.Microsecond)
	if got := ccCounter(a.Dev, "sent_pkts") - before; got != 2 {
		t.Fatalf("%d packets after %v, want 2", got, gap+10*time.Microsecond)
	}
	clk.Advance(3 * gap)
	if wc := testharness.Wait(t, a.SCQ, timeoutShort); wc.WRID != 1 || wc.Status != transport.Success {
		t.Fatalf("paced WRITE: %+v", wc)
	}
	if got := ccCounter(a.Dev, "rp_cnp_handled"); got != 0 {
		t.Fatalf("rp_cnp_handled %d, want 0: the cap alone paced", got)
	}
}

func TestParseCongestion(t *testing.T) {
	on, err := transport.ParseCongestion("")
	if err != nil || on.Off || on.NoECT || on.Params == nil || *on.Params != dcqcn.Default() {
		t.Fatalf("default: %+v %v", on, err)
	}
	off, err := transport.ParseCongestion("off")
	if err != nil || !off.Off || !off.NoECT {
		t.Fatalf("off: %+v %v", off, err)
	}
	pp, err := transport.ParseCongestion("paper, rp_ai_rate=10")
	want := dcqcn.Paper()
	want.AIRate = 10
	if err != nil || pp.Params == nil || *pp.Params != want {
		t.Fatalf("paper,rp_ai_rate=10: %+v %v", pp, err)
	}
	for _, bad := range []string{"fast", "rp_ai_rate", "rp_nope=1", "rp_gd=99"} {
		if _, err := transport.ParseCongestion(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
