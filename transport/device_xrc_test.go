package transport_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testharness"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

const xrcAccess = transport.LocalWrite | transport.RemoteWrite | transport.RemoteRead | transport.RemoteAtomic

// xrcNode is a device with a PD, a registered buffer and a CQ.
type xrcNode struct {
	dev *transport.Device
	pd  *transport.PD
	buf []byte
	mr  *transport.MR
	cq  *transport.CQ

	mu  sync.Mutex
	ops []bth.OpCode // opcodes of the packets it sent
}

func newXRCNode(t testing.TB, net *mem.Net, addr string) *xrcNode {
	t.Helper()
	l, err := net.Attach(netip.MustParseAddr(addr), mem.Options{})
	testharness.Must(t, err)
	n := &xrcNode{}
	n.dev, err = transport.Open(l, transport.Options{Trace: func(out bool, d []byte) {
		if !out {
			return
		}
		if f, err := bth.DecodeIP(d); err == nil {
			if p, err := bth.Parse(f.RoCE()); err == nil {
				n.mu.Lock()
				n.ops = append(n.ops, p.OpCode())
				n.mu.Unlock()
			}
		}
	}})
	testharness.Must(t, err)
	t.Cleanup(func() { n.dev.Close() })
	n.pd = n.dev.AllocPD()
	n.buf = make([]byte, 1<<16)
	n.mr, err = n.pd.Register(n.buf, xrcAccess)
	testharness.Must(t, err)
	n.cq = n.dev.CreateCQ(256)
	return n
}

// sent returns the opcodes the node sent and forgets them.
func (n *xrcNode) sent() []bth.OpCode {
	n.mu.Lock()
	defer n.mu.Unlock()
	o := n.ops
	n.ops = nil
	return o
}

// xrcSetup is an initiator node with one XRC_INI QP and a target node
// with an XRC domain, two XRC SRQs in it (each with its own CQ) and one
// XRC_TGT QP connected to the initiator.
type xrcSetup struct {
	ini, tgt   *xrcNode
	xrcd       *transport.XRCD
	srq        [2]*transport.SRQ
	srqCQ      [2]*transport.CQ
	iniQP, tgQ *transport.QP
}

func newXRCSetup(t testing.TB) *xrcSetup {
	t.Helper()
	net := mem.NewNet(5)
	s := &xrcSetup{ini: newXRCNode(t, net, "10.0.0.1"), tgt: newXRCNode(t, net, "10.0.0.2")}
	var err error
	s.xrcd, err = s.tgt.dev.OpenXRCD()
	testharness.Must(t, err)
	for i := range s.srq {
		s.srqCQ[i] = s.tgt.dev.CreateCQ(64)
		s.srq[i], err = s.tgt.dev.CreateSRQEx(s.tgt.pd, transport.SRQInitAttr{Type: transport.SRQXRC, XRCD: s.xrcd, CQ: s.srqCQ[i],
			Attr: transport.SRQAttr{MaxWR: 16, MaxSGE: 2}})
		testharness.Must(t, err)
	}
	s.iniQP, err = s.ini.dev.CreateQP(s.ini.pd, transport.QPInitAttr{Type: transport.XRCIni, SendCQ: s.ini.cq,
		Cap: transport.QPCap{MaxSendWR: 32, MaxSendSGE: 2}})
	testharness.Must(t, err)
	s.tgQ, err = s.tgt.dev.CreateQP(nil, transport.QPInitAttr{Type: transport.XRCTgt, XRCD: s.xrcd})
	testharness.Must(t, err)
	connectXRC(t, s.ini.dev, s.iniQP, s.tgt.dev, s.tgQ)
	return s
}

// connectXRC brings an initiator and a target QP to RTS towards each other.
func connectXRC(t testing.TB, idev *transport.Device, ini *transport.QP, tdev *transport.Device, tgt *transport.QP) {
	t.Helper()
	ei, err := idev.LocalEndpoint(ini)
	testharness.Must(t, err)
	et, err := tdev.LocalEndpoint(tgt)
	testharness.Must(t, err)
	o := transport.ConnectOptions{Access: xrcAccess, Timeout: 18}
	testharness.Must(t, idev.Connect(ini, ei, et, o))
	testharness.Must(t, tdev.Connect(tgt, et, ei, o))
}

// TestXRCOperations runs every operation through one XRC initiator and
// target: SEND (one packet and three), SEND with immediate, WRITE, WRITE
// with immediate, READ (three packets), fetch-and-add and
// compare-and-swap. Each request names one of two XRC SRQs of the
// target's domain; the receive completes on that SRQ's CQ and on no
// other. Every packet goes out with an XRC opcode, requests with the SRQN
// in their XRCETH, and every byte is checked.
func TestXRCOperations(t *testing.T) {
	s := newXRCSetup(t)
	ini, tgt := s.ini, s.tgt
	for i := range ini.buf {
		ini.buf[i] = byte(i*7 + 3)
	}
	mtu := s.ini.dev.ActiveMTU().Bytes()
	send := func(wr transport.SendWR, op transport.WCOpcode) {
		t.Helper()
		wr.Flags |= transport.Signaled
		testharness.Must(t, s.iniQP.PostSend(&wr))
		if wc := testharness.Wait(t, ini.cq, timeoutShort); wc.Status != transport.Success || wc.WRID != wr.WRID || wc.Opcode != op || wc.QPNum != s.iniQP.QPN() {
			t.Fatalf("%v: initiator completion %+v", wr.Opcode, wc)
		}
	}
	recv := func(k int, want transport.WC) {
		t.Helper()
		wc := testharness.Wait(t, s.srqCQ[k], timeoutShort)
		want.Status, want.QPNum, want.SrcQP = transport.Success, s.tgQ.QPN(), s.iniQP.QPN()
		if wc != want {
			t.Fatalf("SRQ %d completion %+v\nwant %+v", k, wc, want)
		}
		if n, _ := s.srqCQ[1-k].Poll(make([]transport.WC, 1)); n != 0 {
			t.Fatalf("the other SRQ's CQ has a completion too")
		}
	}
	checkOps := func(what string, want ...bth.OpCode) {
		t.Helper()
		got := ini.sent()
		if len(got) != len(want) {
			t.Fatalf("%s: initiator sent %v, want %v", what, got, want)
		}
		for i := range got {
			if got[i] != want[i] || got[i].Transport() != bth.TransportXRC {
				t.Fatalf("%s: initiator sent %v, want %v", what, got, want)
			}
		}
		for _, op := range tgt.sent() {
			if op.Transport() != bth.TransportXRC || op.Info().IsRequest() {
				t.Fatalf("%s: target answered with %v", what, op)
			}
		}
	}
	xrc := func(op bth.OpCode) bth.OpCode { return bth.OpCode(bth.TransportXRC)<<5 | op }

	// SEND of one packet to SRQ 1, three packets to SRQ 0 (two SGEs).
	for k := range 2 {
		testharness.Must(t, s.srq[k].PostRecv(&transport.RecvWR{WRID: uint64(10 + k), SGL: []transport.SGE{tgt.mr.SGE(0, 2*mtu), tgt.mr.SGE(8192, 2*mtu)}}))
	}
	send(transport.SendWR{WRID: 1, Opcode: transport.WRSend, SGL: []transport.SGE{ini.mr.SGE(0, 100)}, RemoteSRQN: s.srq[1].SRQN()}, transport.OpSend)
	recv(1, transport.WC{WRID: 11, Opcode: transport.OpRecv, ByteLen: 100})
	checkOps("SEND only", xrc(bth.SendOnly))
	if !bytes.Equal(tgt.buf[:100], ini.buf[:100]) {
		t.Fatal("SEND: data differs")
	}
	send(transport.SendWR{WRID: 2, Opcode: transport.WRSend, SGL: []transport.SGE{ini.mr.SGE(0, mtu), ini.mr.SGE(mtu, 2*mtu-5)}, RemoteSRQN: s.srq[0].SRQN()}, transport.OpSend)
	recv(0, transport.WC{WRID: 10, Opcode: transport.OpRecv, ByteLen: uint32(3*mtu - 5)})
	checkOps("SEND of three packets", xrc(bth.SendFirst), xrc(bth.SendMiddle), xrc(bth.SendLast))
	if got := append(append([]byte(nil), tgt.buf[:2*mtu]...), tgt.buf[8192:8192+mtu-5]...); !bytes.Equal(got, ini.buf[:3*mtu-5]) {
		t.Fatal("SEND of three packets: data differs")
	}

	// SEND with immediate.
	testharness.Must(t, s.srq[0].PostRecv(&transport.RecvWR{WRID: 12, SGL: []transport.SGE{tgt.mr.SGE(0, 64)}}))
	send(transport.SendWR{WRID: 3, Opcode: transport.WRSendWithImm, Imm: 0xabcd, SGL: []transport.SGE{ini.mr.SGE(500, 64)}, RemoteSRQN: s.srq[0].SRQN()}, transport.OpSend)
	recv(0, transport.WC{WRID: 12, Opcode: transport.OpRecv, ByteLen: 64, Flags: transport.WithImm, ImmData: 0xabcd})
	checkOps("SEND with immediate", xrc(bth.SendOnlyImm))

	// WRITE, then WRITE with immediate, which consumes a receive of SRQ 1.
	send(transport.SendWR{WRID: 4, Opcode: transport.WRRDMAWrite, SGL: []transport.SGE{ini.mr.SGE(1000, mtu+500)},
		RemoteAddr: tgt.mr.Addr() + 20000, RKey: tgt.mr.RKey(), RemoteSRQN: s.srq[0].SRQN()}, transport.OpRDMAWrite)
	checkOps("WRITE", xrc(bth.WriteFirst), xrc(bth.WriteLast))
	if !bytes.Equal(tgt.buf[20000:20000+mtu+500], ini.buf[1000:1000+mtu+500]) {
		t.Fatal("WRITE: data differs")
	}
	testharness.Must(t, s.srq[1].PostRecv(&transport.RecvWR{WRID: 13}))
	send(transport.SendWR{WRID: 5, Opcode: transport.WRRDMAWriteWithImm, Imm: 77, SGL: []transport.SGE{ini.mr.SGE(3000, 300)},
		RemoteAddr: tgt.mr.Addr() + 30000, RKey: tgt.mr.RKey(), RemoteSRQN: s.srq[1].SRQN()}, transport.OpRDMAWrite)
	recv(1, transport.WC{WRID: 13, Opcode: transport.OpRecvRDMAWithImm, ByteLen: 300, Flags: transport.WithImm, ImmData: 77})
	checkOps("WRITE with immediate", xrc(bth.WriteOnlyImm))
	if !bytes.Equal(tgt.buf[30000:30300], ini.buf[3000:3300]) {
		t.Fatal("WRITE with immediate: data differs")
	}

	// READ of three packets back into the initiator.
	for i := range 3 * mtu {
		tgt.buf[40000+i] = byte(i*5 + 1)
	}
	send(transport.SendWR{WRID: 6, Opcode: transport.WRRDMARead, SGL: []transport.SGE{ini.mr.SGE(40000, 3*mtu)},
		RemoteAddr: tgt.mr.Addr() + 40000, RKey: tgt.mr.RKey(), RemoteSRQN: s.srq[1].SRQN()}, transport.OpRDMARead)
	checkOps("READ", xrc(bth.ReadRequest))
	if !bytes.Equal(ini.buf[40000:40000+3*mtu], tgt.buf[40000:40000+3*mtu]) {
		t.Fatal("READ: data differs")
	}

	// Atomics on the target's word at 64.
	binary.LittleEndian.PutUint64(tgt.buf[64:], 40)
	send(transport.SendWR{WRID: 7, Opcode: transport.WRAtomicFetchAndAdd, CompareAdd: 2, SGL: []transport.SGE{ini.mr.SGE(8, 8)},
		RemoteAddr: tgt.mr.Addr() + 64, RKey: tgt.mr.RKey(), RemoteSRQN: s.srq[0].SRQN()}, transport.OpFetchAdd)
	send(transport.SendWR{WRID: 8, Opcode: transport.WRAtomicCmpAndSwp, CompareAdd: 42, Swap: 99, SGL: []transport.SGE{ini.mr.SGE(16, 8)},
		RemoteAddr: tgt.mr.Addr() + 64, RKey: tgt.mr.RKey(), RemoteSRQN: s.srq[0].SRQN()}, transport.OpCompSwap)
	checkOps("atomics", xrc(bth.FetchAdd), xrc(bth.CompareSwap))
	if a, b, w := binary.LittleEndian.Uint64(ini.buf[8:]), binary.LittleEndian.Uint64(ini.buf[16:]), binary.LittleEndian.Uint64(tgt.buf[64:]); a != 40 || b != 42 || w != 99 {
		t.Fatalf("atomics returned %d and %d, word now %d; want 40, 42, 99", a, b, w)
	}
	for _, d := range []*transport.Device{ini.dev, tgt.dev} {
		c := d.Counters()
		if n := c.Malformed.Load() + c.XRCBadSRQN.Load() + c.XRCDomainViolation.Load() + c.XRCMisdirected.Load() + c.SentNAKs.Load(); n != 0 {
			t.Errorf("drops or NAKs on a clean link: %v", c.List())
		}
	}
}

// TestXRCETHValidation: an XRCETH naming no XRC SRQ, or an XRC SRQ of
// another domain, is an invalid request: the initiator's work request
// completes with REM_INV_REQ_ERR, the target QP goes to ERR with a QP
// fatal event whose error says which, the counter names it, and no
// receive of any SRQ is consumed.
func TestXRCETHValidation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		srqn    func(s *xrcSetup, other *transport.SRQ) uint32
		err     error
		counter string
	}{
		{"no such SRQ", func(s *xrcSetup, other *transport.SRQ) uint32 { return other.SRQN() + 100 }, transport.ErrXRCETH, "xrc_bad_srqn"},
		{"SRQ of another domain", func(s *xrcSetup, other *transport.SRQ) uint32 { return other.SRQN() }, transport.ErrXRCDomain, "xrc_domain_violation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newXRCSetup(t)
			x2, err := s.tgt.dev.OpenXRCD()
			testharness.Must(t, err)
			other, err := s.tgt.dev.CreateSRQEx(s.tgt.pd, transport.SRQInitAttr{Type: transport.SRQXRC, XRCD: x2, CQ: s.srqCQ[0],
				Attr: transport.SRQAttr{MaxWR: 4}})
			testharness.Must(t, err)
			for _, q := range []*transport.SRQ{s.srq[0], s.srq[1], other} {
				testharness.Must(t, q.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{s.tgt.mr.SGE(0, 64)}}))
			}
			before := s.tgt.dev.Counters().List()
			testharness.Must(t, s.iniQP.PostSend(&transport.SendWR{WRID: 9, Opcode: transport.WRSend, Flags: transport.Signaled,
				SGL: []transport.SGE{s.ini.mr.SGE(0, 10)}, RemoteSRQN: tc.srqn(s, other)}))
			if wc := testharness.Wait(t, s.ini.cq, timeoutShort); wc.Status != transport.RemInvReqErr || wc.WRID != 9 {
				t.Fatalf("initiator completion %+v, want REM_INV_REQ_ERR", wc)
			}
			ev := waitEventType(t, s.tgt.dev, transport.EventQPFatal)
			if ev.QP != s.tgQ || !errors.Is(ev.Err, tc.err) || !errors.Is(ev.Err, transport.ErrInvalidRequest) {
				t.Fatalf("event %v, want QP fatal on the target wrapping %v", ev, tc.err)
			}
			if st := s.tgQ.State(); st != transport.Err {
				t.Fatalf("target QP in %v, want ERR", st)
			}
			delta := counterDelta(before, s.tgt.dev.Counters().List())
			if delta[tc.counter] != 1 || delta["sent_naks"] != 1 {
				t.Fatalf("counters moved %v, want %s and sent_naks 1", delta, tc.counter)
			}
			for _, q := range []*transport.SRQ{s.srq[0], s.srq[1], other} {
				if q.Len() != 1 {
					t.Fatalf("SRQ 0x%x holds %d receives, want its 1 untouched", q.SRQN(), q.Len())
				}
			}
		})
	}
}

// waitEventType returns the next asynchronous event of type want,
// failing the test if none comes within the deadline.
func waitEventType(t testing.TB, d *transport.Device, want transport.EventType) transport.Event {
	t.Helper()
	deadline := time.After(timeoutShort)
	for {
		select {
		case ev := <-d.Events():
			if ev.Type == want {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %v event", want)
		}
	}
}

// TestXRCCreateRules checks the rules of creating and tearing down XRC
// objects, each as libibverbs refuses it: what an initiator and a target
// QP may have, which SRQ an XRC SRQ is, and what may not be destroyed
// while used.
func TestXRCCreateRules(t *testing.T) {
	net := mem.NewNet(1)
	n := newXRCNode(t, net, "10.0.0.1")
	d := n.dev
	x, err := d.OpenXRCD()
	testharness.Must(t, err)
	srqCQ := d.CreateCQ(8)
	srq, err := d.CreateSRQEx(n.pd, transport.SRQInitAttr{Type: transport.SRQXRC, XRCD: x, CQ: srqCQ, Attr: transport.SRQAttr{MaxWR: 4}})
	testharness.Must(t, err)
	if srq.SRQN() == 0 || srq.XRCD() != x || srq.CQ() != srqCQ {
		t.Fatalf("XRC SRQ: SRQN %d, XRCD %p, CQ %p", srq.SRQN(), srq.XRCD(), srq.CQ())
	}
	basic, err := d.CreateSRQ(n.pd, transport.SRQAttr{MaxWR: 4})
	testharness.Must(t, err)
	if basic.SRQN() != 0 {
		t.Fatalf("basic SRQ numbered %d", basic.SRQN())
	}
	send := transport.QPCap{MaxSendWR: 4, MaxSendSGE: 1}
	for _, c := range []struct {
		name string
		pd   *transport.PD
		ia   transport.QPInitAttr
	}{
		{"target without an XRC domain", nil, transport.QPInitAttr{Type: transport.XRCTgt}},
		{"target with a PD", n.pd, transport.QPInitAttr{Type: transport.XRCTgt, XRCD: x}},
		{"target with a CQ", nil, transport.QPInitAttr{Type: transport.XRCTgt, XRCD: x, RecvCQ: n.cq}},
		{"target with queues", nil, transport.QPInitAttr{Type: transport.XRCTgt, XRCD: x, Cap: send}},
		{"target with an SRQ", nil, transport.QPInitAttr{Type: transport.XRCTgt, XRCD: x, SRQ: srq}},
		{"initiator with a receive queue", n.pd, transport.QPInitAttr{Type: transport.XRCIni, SendCQ: n.cq, Cap: transport.QPCap{MaxSendWR: 4, MaxRecvWR: 4}}},
		{"initiator with a receive CQ", n.pd, transport.QPInitAttr{Type: transport.XRCIni, SendCQ: n.cq, RecvCQ: n.cq, Cap: send}},
		{"initiator with an SRQ", n.pd, transport.QPInitAttr{Type: transport.XRCIni, SendCQ: n.cq, SRQ: basic, Cap: send}},
		{"initiator without a send CQ", n.pd, transport.QPInitAttr{Type: transport.XRCIni, Cap: send}},
		{"initiator without a PD", nil, transport.QPInitAttr{Type: transport.XRCIni, SendCQ: n.cq, Cap: send}},
		{"RC QP in an XRC domain", n.pd, transport.QPInitAttr{Type: transport.RC, SendCQ: n.cq, RecvCQ: n.cq, XRCD: x, Cap: transport.QPCap{MaxSendWR: 4, MaxRecvWR: 4}}},
		{"RC QP on an XRC SRQ", n.pd, transport.QPInitAttr{Type: transport.RC, SendCQ: n.cq, RecvCQ: n.cq, SRQ: srq, Cap: send}},
	} {
		if q, err := d.CreateQP(c.pd, c.ia); !errors.Is(err, transport.ErrInvalid) {
			t.Errorf("%s: CreateQP gave %v, %v; want ErrInvalid", c.name, q, err)
		}
	}
	for _, c := range []struct {
		name string
		ia   transport.SRQInitAttr
	}{
		{"XRC SRQ without a domain", transport.SRQInitAttr{Type: transport.SRQXRC, CQ: srqCQ, Attr: transport.SRQAttr{MaxWR: 4}}},
		{"XRC SRQ without a CQ", transport.SRQInitAttr{Type: transport.SRQXRC, XRCD: x, Attr: transport.SRQAttr{MaxWR: 4}}},
		{"basic SRQ with a domain", transport.SRQInitAttr{XRCD: x, Attr: transport.SRQAttr{MaxWR: 4}}},
	} {
		if s, err := d.CreateSRQEx(n.pd, c.ia); !errors.Is(err, transport.ErrInvalid) {
			t.Errorf("%s: CreateSRQEx gave %v, %v; want ErrInvalid", c.name, s, err)
		}
	}

	ini, err := d.CreateQP(n.pd, transport.QPInitAttr{Type: transport.XRCIni, SendCQ: n.cq, Cap: send})
	testharness.Must(t, err)
	tgt, err := d.CreateQP(nil, transport.QPInitAttr{Type: transport.XRCTgt, XRCD: x})
	testharness.Must(t, err)
	if _, ia := tgt.Query(); ia.Type != transport.XRCTgt || ia.XRCD != x || ia.SendCQ != nil {
		t.Fatalf("target QP's init attributes %+v", ia)
	}
	for _, q := range []*transport.QP{ini, tgt} {
		if err := q.PostRecv(&transport.RecvWR{WRID: 1}); !errors.Is(err, transport.ErrInvalid) {
			t.Errorf("PostRecv on %v: %v, want ErrInvalid", q, err)
		}
	}
	if err := tgt.PostSend(&transport.SendWR{Opcode: transport.WRSend, RemoteSRQN: srq.SRQN()}); !errors.Is(err, transport.ErrInvalid) {
		t.Errorf("PostSend on the target QP: %v, want ErrInvalid", err)
	}
	// The initiator refuses a send naming no SRQ, once in RTS (before, the
	// state refuses it).
	peer, err := d.CreateQP(nil, transport.QPInitAttr{Type: transport.XRCTgt, XRCD: x})
	testharness.Must(t, err)
	connectXRC(t, d, ini, d, peer)
	for _, srqn := range []uint32{0, 1 << 24} {
		if err := ini.PostSend(&transport.SendWR{Opcode: transport.WRSend, RemoteSRQN: srqn}); !errors.Is(err, transport.ErrInvalid) {
			t.Errorf("XRC send with RemoteSRQN 0x%x: %v, want ErrInvalid", srqn, err)
		}
	}

	// Tear-down: busy while used, in the order libibverbs requires.
	if err := x.Close(); !errors.Is(err, transport.ErrBusy) {
		t.Fatalf("XRCD Close with an SRQ and target QPs: %v, want ErrBusy", err)
	}
	if err := d.DestroyCQ(srqCQ); !errors.Is(err, transport.ErrBusy) {
		t.Fatalf("DestroyCQ of an XRC SRQ's CQ: %v, want ErrBusy", err)
	}
	testharness.Must(t, d.DestroyQP(tgt))
	testharness.Must(t, d.DestroyQP(peer))
	if err := x.Close(); !errors.Is(err, transport.ErrBusy) {
		t.Fatalf("XRCD Close with an SRQ: %v, want ErrBusy", err)
	}
	testharness.Must(t, srq.Destroy())
	testharness.Must(t, d.DestroyCQ(srqCQ))
	testharness.Must(t, x.Close())
	if err := x.Close(); !errors.Is(err, transport.ErrInvalid) {
		t.Fatalf("second XRCD Close: %v, want ErrInvalid", err)
	}
	if _, err := d.CreateQP(nil, transport.QPInitAttr{Type: transport.XRCTgt, XRCD: x}); !errors.Is(err, transport.ErrInvalid) {
		t.Fatalf("target QP in a closed XRCD: %v, want ErrInvalid", err)
	}
	d.Close()
	if _, err := d.OpenXRCD(); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("OpenXRCD after Close: %v", err)
	}
}

// TestXRCAllocs: an XRC WRITE round trip (request with its XRCETH,
// target SRQ lookup, XRC ACK, completion) allocates nothing, as the same
// RC WRITE beside it does not: 0 allocations per packet. Under -race,
// whose sync.Pool drops buffers at random, it checks only that XRC
// allocates no more than RC, within that noise (half an allocation per
// round trip of two packets).
func TestXRCAllocs(t *testing.T) {
	s := newXRCSetup(t)
	a, b, _ := testharness.MemPair(t, testharness.Options{})
	round := func(q *transport.QP, c *transport.CQ, wr *transport.SendWR) func() {
		wc := make([]transport.WC, 1)
		return func() {
			if err := q.PostSend(wr); err != nil {
				t.Fatal(err)
			}
			for {
				if n, _ := c.Poll(wc); n == 1 {
					if wc[0].Status != transport.Success {
						t.Fatalf("%+v", wc[0])
					}
					return
				}
				runtime.Gosched()
			}
		}
	}
	var xsgl, rsgl [1]transport.SGE
	xsgl[0], rsgl[0] = s.ini.mr.SGE(0, 256), a.MR.SGE(0, 256)
	xwr := transport.SendWR{Opcode: transport.WRRDMAWrite, Flags: transport.Signaled, SGL: xsgl[:], RemoteAddr: s.tgt.mr.Addr(), RKey: s.tgt.mr.RKey(), RemoteSRQN: s.srq[0].SRQN()}
	rwr := transport.SendWR{Opcode: transport.WRRDMAWrite, Flags: transport.Signaled, SGL: rsgl[:], RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()}
	xf, rf := round(s.iniQP, s.ini.cq, &xwr), round(a.QP, a.SCQ, &rwr)
	xf()
	rf() // warm the pools
	x, r := testing.AllocsPerRun(200, xf), testing.AllocsPerRun(200, rf)
	t.Logf("allocations per WRITE round trip: XRC %.2f, RC %.2f", x, r)
	limit := 0.0
	if raceEnabled {
		limit = r + 0.5
	}
	if x > limit {
		t.Fatalf("XRC allocates %.2f per round trip, RC %.2f", x, r)
	}
}
