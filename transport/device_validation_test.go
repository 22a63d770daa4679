package transport_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testharness"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

// waitBound bounds the wait for an event the test has caused; it is never
// the event itself.
const waitBound = 10 * time.Second

// TestForeignTransportDropped is issue 12's case: a UC SEND Only (0x24)
// with the PSN an RC QP expects must be dropped and counted, not executed
// and acknowledged (IBA 9.6 header validation; rxe's check_type_state).
// The RC SEND that follows it on the same link is the one that lands.
func TestForeignTransportDropped(t *testing.T) {
	s, r, _ := newRaw(t, testharness.Options{})
	testharness.Must(t, s.QP.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{s.MR.SGE(0, 64)}}))
	c := s.Dev.Counters()
	r.send(bth.UCSendOnly, rPSN, true, []byte("uc!!"))
	r.send(bth.RCSendOnly, rPSN, true, []byte("rc!!"))
	// The link delivers in order, so this ACK comes after both were handled.
	p := r.expectAck(ack, rPSN)
	if msn := p.AETH().MSN(); msn != 1 {
		t.Errorf("ACK MSN %d, want 1", msn)
	}
	wc := testharness.Wait(t, s.RCQ, waitBound)
	if wc.Status != transport.Success || wc.WRID != 1 || wc.ByteLen != 4 || string(s.Buf[:4]) != "rc!!" {
		t.Errorf("receive %+v with %q, want the RC SEND's 4 bytes \"rc!!\"", wc, s.Buf[:4])
	}
	if c.Malformed.Load() != 1 || c.DuplicateRequest.Load() != 0 || c.RDMARecvs.Load() != 1 {
		t.Errorf("malformed %d duplicate_request %d rdma_recvs %d, want 1 0 1",
			c.Malformed.Load(), c.DuplicateRequest.Load(), c.RDMARecvs.Load())
	}
	if n := statValue(s.Dev, "malformed"); n != 1 {
		t.Errorf("Stats (what roced stats prints) malformed = %d, want 1", n)
	}
}

func statValue(d *transport.Device, name string) uint64 {
	for _, c := range d.Stats() {
		if c.Name == name {
			return c.Value
		}
	}
	return 1 << 63
}

// TestForeignTransportResponse: the requester validates responses the same
// way. An XRC or RD Acknowledge for the PSN an RC WRITE is waiting on does
// not complete it; the RC ACK does.
func TestForeignTransportResponse(t *testing.T) {
	s, r, _ := newRaw(t, testharness.Options{})
	testharness.Must(t, s.QP.PostSend(&transport.SendWR{WRID: 3, Opcode: transport.WRRDMAWrite, Flags: transport.Signaled,
		SGL: []transport.SGE{s.MR.SGE(0, 16)}, RemoteAddr: 0x1000, RKey: 0x77}))
	r.expectReq(bth.RCWriteOnly, 5000)
	c := s.Dev.Counters()
	xrcAck := bth.OpCode(bth.TransportXRC)<<5 | bth.Acknowledge
	rdAck := bth.OpCode(bth.TransportRD)<<5 | bth.Acknowledge
	for _, op := range []bth.OpCode{xrcAck, rdAck} {
		// Straight into the device's receive path, so the drop is done
		// when input returns.
		var b transport.Burst
		s.Dev.Input(nic.Frame{B: r.build(op, 5000, false, nil, aeth(ack, 1)), Off: nic.Headroom}, &b)
		b.Flush()
		var wc [1]transport.WC
		if n, _ := s.SCQ.Poll(wc[:]); n != 0 {
			t.Fatalf("%v completed the WRITE: %+v", op, wc[0])
		}
	}
	if c.Malformed.Load() != 2 {
		t.Fatalf("malformed %d, want 2", c.Malformed.Load())
	}
	r.ackTo(ack, 5000, 1)
	if wc := testharness.Wait(t, s.SCQ, waitBound); wc.Status != transport.Success || wc.WRID != 3 {
		t.Fatalf("WRITE %+v", wc)
	}
}

// verdict is what header validation makes of a well-formed packet.
type verdict uint8

const (
	executed    verdict = iota // reaches the QP's protocol
	dropped                    // dropped before it, counted as malformed
	cnp                        // a CNP: counted, never given to a QP
	unsupported                // RC FLUSH and ATOMIC WRITE: NAK invalid request, QP to ERR
)

var verdictNames = [...]string{"executed", "dropped", "cnp", "unsupported"}

func (v verdict) String() string { return verdictNames[v] }

// validationTable is the expected verdict for a defined opcode of each
// transport at an RC, a UC and a UD QP. It is written out here, not derived
// from the engine's tables, so that it can disagree with them.
var validationTable = map[bth.Transport][3]verdict{
	//                  RC QP     UC QP     UD QP
	bth.TransportRC:  {executed, dropped, dropped},
	bth.TransportUC:  {dropped, executed, dropped},
	bth.TransportRD:  {dropped, dropped, dropped},
	bth.TransportUD:  {dropped, dropped, executed},
	bth.TransportCNP: {cnp, cnp, cnp},
	bth.TransportXRC: {dropped, dropped, dropped},
}

// TestOpcodeValidation sends every one of the 256 opcodes, well formed,
// with the PSN, P_Key, Q_Key, keys and addresses the QP accepts, to a live
// RC, UC and UD QP, and checks the verdict of validationTable. Reserved
// opcodes (transports 6 and 7 included) are dropped as malformed. A drop
// changes nothing but the counter: no memory, no PSN, no state, no reply,
// no completion.
func TestOpcodeValidation(t *testing.T) {
	o := testharness.Options{BufSize: 1 << 16}
	o.MemDefaults()
	net := mem.NewNet(1)
	s := testharness.NewMemPeer(t, net, "10.0.0.1", o)
	r := newRawPeer(t, net, "10.0.0.9")
	types := []transport.QPType{transport.RC, transport.UC, transport.UD}
	qps := []*transport.QP{s.QP}
	for _, typ := range types[1:] {
		q, err := s.Dev.CreateQP(s.PD, transport.QPInitAttr{Type: typ, SendCQ: s.SCQ, RecvCQ: s.RCQ,
			Cap: transport.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
		testharness.Must(t, err)
		qps = append(qps, q)
	}
	// Undefined opcodes of defined transports, e.g. RC 0x18..0x1b: the
	// table must hold some, or the reserved-opcode check is not tested.
	reserved := 0
	counts := map[string]int{}
	for ti, typ := range types {
		q := qps[ti]
		for op := range 256 {
			op := bth.OpCode(op)
			want := dropped
			info, ok := bth.Lookup(op)
			if ok {
				want = validationTable[info.Transport][ti]
				if typ == transport.RC && (info.Kind == bth.KindFlush || info.Kind == bth.KindAtomicWrite) {
					want = unsupported
				}
			} else if op.Transport() <= bth.TransportXRC {
				reserved++
			}
			counts[fmt.Sprintf("%v QP %v", typ, want)]++
			t.Run(fmt.Sprintf("%v/0x%02x", typ, uint8(op)), func(t *testing.T) {
				checkVerdict(t, s, r, q, typ, op, want)
			})
		}
	}
	if reserved == 0 {
		t.Fatal("no reserved opcode inside a defined transport was sent")
	}
	t.Logf("verdicts: %v", counts)
}

// checkVerdict resets q to RTS, sends it op and checks what happened.
func checkVerdict(t *testing.T, s *testharness.Peer, r *rawPeer, q *transport.QP, typ transport.QPType, op bth.OpCode, want verdict) {
	testharness.Must(t, q.Modify(&transport.QPAttr{State: transport.Reset}, transport.AttrState))
	x := *s
	x.QP = q
	connectRaw(t, &x, r, testharness.Options{Type: typ}, 5000, rPSN)
	testharness.Must(t, q.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{s.MR.SGE(0, 4096)}}))
	var wc [16]transport.WC
	for n, _ := s.RCQ.Poll(wc[:]); n > 0; n, _ = s.RCQ.Poll(wc[:]) {
	}
	for i := range s.Buf {
		s.Buf[i] = byte(i)
	}
	mem := append([]byte(nil), s.Buf...)
	before := s.Dev.Counters().List()
	a0, _ := q.Query()

	var b transport.Burst
	s.Dev.Input(nic.Frame{B: validationPacket(s, r, q, op)}, &b)
	b.Flush()

	a1, _ := q.Query()
	delta := counterDelta(before, s.Dev.Counters().List())
	if delta["rcvd_pkts"] != 1 {
		t.Fatalf("rcvd_pkts +%d", delta["rcvd_pkts"])
	}
	delete(delta, "rcvd_pkts")
	nothingElse := func(counter string) {
		t.Helper()
		if len(delta) != 1 || delta[counter] != 1 {
			t.Errorf("%v at a %v QP: counters changed %v, want only %s +1", op, typ, delta, counter)
		}
		if a1.State != a0.State || a1.RQPSN != a0.RQPSN || a1.SQPSN != a0.SQPSN {
			t.Errorf("%v at a %v QP: state %v->%v, rq_psn %d->%d, sq_psn %d->%d",
				op, typ, a0.State, a1.State, a0.RQPSN, a1.RQPSN, a0.SQPSN, a1.SQPSN)
		}
		if !bytes.Equal(mem, s.Buf) {
			t.Errorf("%v at a %v QP changed memory", op, typ)
		}
		if n, _ := s.RCQ.Poll(wc[:]); n != 0 {
			t.Errorf("%v at a %v QP completed %+v", op, typ, wc[0])
		}
	}
	switch want {
	case dropped:
		nothingElse("malformed")
	case cnp:
		// The CNP reaches the QP's reaction point (DCQCN is on by
		// default): counted as received and as handled, nothing else.
		rp := delta["rp_cnp_handled"]
		delete(delta, "rp_cnp_handled")
		if rp != 1 {
			t.Errorf("%v at a %v QP: rp_cnp_handled +%d, want +1", op, typ, rp)
		}
		nothingElse("cnps")
	case executed:
		// It passed validation: whatever the protocol made of it (executed,
		// NAKed, a ghost response, a UC drop), something moved.
		if delta["malformed"] != 0 || delta["cnps"] != 0 {
			t.Errorf("%v at a %v QP: counters %v, want it past header validation", op, typ, delta)
		}
		if len(delta) == 0 && a1.State == a0.State && a1.RQPSN == a0.RQPSN {
			t.Errorf("%v at a %v QP: no effect at all", op, typ)
		}
	case unsupported:
		// An RC responder NAKs an operation it does not support as an
		// invalid request (README: FLUSH and ATOMIC WRITE are decoded,
		// not executed).
		if delta["sent_naks"] != 1 || a1.State != transport.Err || delta["malformed"] != 0 {
			t.Errorf("%v at an RC QP: counters %v, state %v: want a NAK and ERR", op, delta, a1.State)
		}
		if !bytes.Equal(mem, s.Buf) {
			t.Errorf("%v changed memory", op)
		}
	}
}

// validationPacket builds a datagram with opcode op that every check but
// the opcode's own passes at q: its PSN, P_Key and Q_Key, a key and
// address inside the registered region, and a payload of the length the
// opcode's position allows at MTU 1024.
func validationPacket(s *testharness.Peer, r *rawPeer, q *transport.QP, op bth.OpCode) []byte {
	a, _ := q.Query()
	info, ok := bth.Lookup(op)
	pay := 16 // a reserved opcode: some zero bytes after the BTH
	if ok {
		switch {
		case !info.Payload:
			pay = 0
		case info.Kind == bth.KindAtomicWrite:
			pay = 8
		case info.Pos == bth.PosFirst || info.Pos == bth.PosMiddle:
			pay = 1024
		}
	}
	o := bth.Outer{Src: r.addr, Dst: s.Addr, SrcPort: 0xc000}
	d := bth.NewDraft(make([]byte, bth.DraftLen(&o, op, pay)), &o, bth.BTHFields{OpCode: op, PKey: 0xffff,
		DestQP: q.QPN(), AckReq: true, PSN: bth.PSN(a.RQPSN)}, pay)
	if !ok {
		return d.Seal()
	}
	for i := range d.Payload() {
		d.Payload()[i] = 0xa5
	}
	va := s.MR.Addr() + 256
	if info.Headers.Has(bth.ExtRETH) {
		n := uint32(pay)
		if info.Pos == bth.PosFirst || info.Kind == bth.KindReadRequest {
			n = 2048
		}
		bth.RETH(d.Ext(bth.ExtRETH)).Encode(va, s.MR.RKey(), n)
	}
	if info.Headers.Has(bth.ExtAtomicETH) {
		bth.AtomicETH(d.Ext(bth.ExtAtomicETH)).Encode(va, s.MR.RKey(), 1, 0)
	}
	if info.Headers.Has(bth.ExtDETH) {
		bth.DETH(d.Ext(bth.ExtDETH)).SetQKey(0x11111111)
	}
	if info.Headers.Has(bth.ExtAETH) {
		bth.AETH(d.Ext(bth.ExtAETH)).Encode(ack, 1)
	}
	return d.Seal()
}

// sealed wraps roce (BTH through ICRC) in IP and UDP headers from src to
// dst and writes its ICRC: a datagram for Device.input.
func sealed(src, dst netip.Addr, roce []byte) []byte {
	o := bth.Outer{Src: src, Dst: dst, SrcPort: 0xc000}
	dg := make([]byte, o.Len()+len(roce))
	hl := o.Put(dg, len(roce))
	copy(dg[hl:], roce)
	bth.Seal(dg[:hl-8], dg[hl-8:hl], dg[hl:])
	return dg
}

// counterDelta returns the counters that moved from before to now (two
// transport.Counters.List results), by name.
func counterDelta(before, now []nic.Counter) map[string]uint64 {
	delta := map[string]uint64{}
	for i, c := range now {
		if d := c.Value - before[i].Value; d != 0 {
			delta[c.Name] = d
		}
	}
	return delta
}
