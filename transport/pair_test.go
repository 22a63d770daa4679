package transport_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/cq"
	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/transport"
)

// side is one end of a test connection.
type side struct {
	dev  *transport.Device
	link *mem.Link
	pd   *mr.PD
	scq  *cq.CQ
	rcq  *cq.CQ
	qp   *qp.QP
	buf  []byte
	mr   *mr.MR
	addr netip.Addr
	srq  *qp.SRQ // set when the side receives through an SRQ
	ah   *qp.AH  // UD: the address handle to the other side
}

type pairOpts struct {
	typ       qp.Type
	mtu       qp.MTU
	bufSize   int
	sqDepth   uint32
	rqDepth   uint32
	cqDepth   int
	timeout   uint8
	retry     uint8
	rnrRetry  uint8
	minRNR    uint8
	rdAtomic  uint8
	psnA      uint32
	psnB      uint32
	window    int
	inline    uint32
	seed      uint64
	access    mr.Access
	noConnect bool
	rnrZero   bool // rnr_retry really 0 (0 otherwise means the default)
	trace     *traceRing
	// wrap, if set, puts a link between the device and its in-memory link.
	wrap func(*mem.Link) nic.Link
	// clock, if set, drives the device's timers (newRaw sets one).
	clock qp.Clock
	// busy is how long the in-memory links busy-poll (mem.Options.BusyPoll).
	busy time.Duration
}

func (o *pairOpts) defaults() {
	if o.typ == 0 {
		o.typ = qp.RC
	}
	if o.mtu == 0 {
		o.mtu = qp.MTU1024
	}
	if o.bufSize == 0 {
		o.bufSize = 1 << 20
	}
	if o.sqDepth == 0 {
		o.sqDepth = 128
	}
	if o.rqDepth == 0 {
		o.rqDepth = 128
	}
	if o.cqDepth == 0 {
		o.cqDepth = 512
	}
	if o.timeout == 0 {
		// 1.07 s: the in-memory link loses nothing unless a test says so,
		// and at 16.8 ms a machine too busy to run a receive path for
		// eight timeouts in a row failed a lossless test with retry
		// exceeded. Tests that lose packets set their own.
		o.timeout = 18
	}
	if o.retry == 0 {
		o.retry = 7
	}
	if o.rnrRetry == 0 && !o.rnrZero {
		o.rnrRetry = 7
	}
	if o.minRNR == 0 {
		o.minRNR = 1 // 10 µs
	}
	if o.rdAtomic == 0 {
		o.rdAtomic = 16
	}
	if o.access == 0 {
		o.access = mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead | mr.RemoteAtomic
	}
}

func newSide(t testing.TB, net *mem.Net, addr string, o *pairOpts) *side {
	t.Helper()
	a := netip.MustParseAddr(addr)
	l, err := net.Attach(a, mem.Options{BusyPoll: o.busy})
	if err != nil {
		t.Fatal(err)
	}
	var link nic.Link = l
	if o.wrap != nil {
		link = o.wrap(l)
	}
	opt := transport.Options{Window: o.window, Clock: o.clock}
	if o.trace != nil {
		opt.Trace = o.trace.hook(addr)
	}
	d, err := transport.Open(link, opt)
	if err != nil {
		t.Fatal(err)
	}
	s := &side{dev: d, link: l, addr: a}
	s.pd = d.AllocPD()
	s.scq = d.CreateCQ(o.cqDepth)
	s.rcq = d.CreateCQ(o.cqDepth)
	s.buf = make([]byte, o.bufSize)
	s.mr, err = s.pd.Register(s.buf, o.access)
	if err != nil {
		t.Fatal(err)
	}
	s.qp, err = d.CreateQP(s.pd, qp.InitAttr{Type: o.typ, SendCQ: s.scq, RecvCQ: s.rcq,
		Cap: qp.Cap{MaxSendWR: o.sqDepth, MaxRecvWR: o.rqDepth, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: o.inline}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return s
}

// connectPair moves q to RTS towards peer, as rc_pingpong's pp_connect_ctx does.
func connectPair(t testing.TB, s, peer *side, o *pairOpts, myPSN, peerPSN uint32) {
	t.Helper()
	connectTo(t, s, peer, o, myPSN, peerPSN, qp.RTS)
}

// connectTo is connectPair stopping at state last (RTR or RTS).
func connectTo(t testing.TB, s, peer *side, o *pairOpts, myPSN, peerPSN uint32, last qp.State) {
	t.Helper()
	q := s.qp
	init := qp.Attr{State: qp.Init, PKeyIndex: 0, PortNum: 1, AccessFlags: o.access, QKey: 0x11111111}
	mask := qp.AttrState | qp.AttrPKeyIndex | qp.AttrPort
	if o.typ == qp.UD {
		mask |= qp.AttrQKey
	} else {
		mask |= qp.AttrAccessFlags
	}
	if err := q.Modify(&init, mask); err != nil {
		t.Fatal(err)
	}
	gidIdx, _ := peer.dev.GIDIndex(peer.addr)
	pg, _ := peer.dev.GID(gidIdx)
	sIdx, _ := s.dev.GIDIndex(s.addr)
	rtr := qp.Attr{State: qp.RTR, PathMTU: o.mtu, DestQPN: peer.qp.QPN(), RQPSN: peerPSN,
		MaxDestRdAtomic: o.rdAtomic, MinRNRTimer: o.minRNR,
		AH: qp.AHAttr{DGID: pg, SGIDIndex: sIdx, PortNum: 1}}
	mask = qp.AttrState
	switch o.typ {
	case qp.RC:
		mask |= qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN | qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer
	case qp.UC:
		mask |= qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN
	}
	if err := q.Modify(&rtr, mask); err != nil {
		t.Fatal(err)
	}
	if last == qp.RTR {
		return
	}
	rts := qp.Attr{State: qp.RTS, SQPSN: myPSN, Timeout: o.timeout, RetryCnt: o.retry,
		RNRRetry: o.rnrRetry, MaxRdAtomic: o.rdAtomic}
	mask = qp.AttrState | qp.AttrSQPSN
	if o.typ == qp.RC {
		mask |= qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxQPRdAtomic
	}
	if err := q.Modify(&rts, mask); err != nil {
		t.Fatal(err)
	}
}

func newPair(t testing.TB, o pairOpts) (*side, *side, *mem.Net) {
	t.Helper()
	o.defaults()
	net := mem.NewNet(o.seed)
	a := newSide(t, net, "10.0.0.1", &o)
	b := newSide(t, net, "10.0.0.2", &o)
	if !o.noConnect {
		connectPair(t, a, b, &o, o.psnA, o.psnB)
		connectPair(t, b, a, &o, o.psnB, o.psnA)
	}
	return a, b, net
}

// waitWC polls c until it returns one completion or the test times out.
func waitWC(t testing.TB, c *cq.CQ, d time.Duration) cq.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wc [1]cq.WC
	n, err := c.PollWait(ctx, wc[:])
	if err != nil || n != 1 {
		t.Fatalf("no completion: %v", err)
	}
	return wc[0]
}

// TestSmokeRC runs each RC operation once between two engines: SEND,
// RDMA WRITE, RDMA READ, fetch-and-add and compare-and-swap (one that
// swaps, one that does not). It checks every completion field a program
// reads, every byte each operation moves, and that no byte beside them
// changed in either region.
func TestSmokeRC(t *testing.T) {
	a, b, _ := newPair(t, pairOpts{psnA: 0xfffff0, psnB: 100})
	for i := range a.buf {
		a.buf[i] = byte(i * 7)
	}
	for i := range b.buf {
		b.buf[i] = byte(i*13 + 1)
	}
	// What each region must hold at the end: the expectation is built
	// from the operations' definitions, beside the engine, not read back.
	wantA := append([]byte(nil), a.buf...)
	wantB := append([]byte(nil), b.buf...)
	sendWC := func(wrid uint64, op cq.Opcode, n uint32) {
		t.Helper()
		wc := waitWC(t, a.scq, timeoutShort)
		want := cq.WC{WRID: wrid, Status: cq.Success, Opcode: op, ByteLen: n, QPNum: a.qp.QPN()}
		if wc != want {
			t.Fatalf("send wc %+v\nwant    %+v", wc, want)
		}
	}
	// SEND 10000 bytes (10 packets at MTU 1024) into a 16 KiB receive.
	must(t, b.qp.PostRecv(&qp.RecvWR{WRID: 1, SGL: []mr.SGE{b.mr.SGE(0, 16384)}}))
	must(t, a.qp.PostSend(&qp.SendWR{WRID: 2, Opcode: qp.WRSend, Flags: qp.Signaled, SGL: []mr.SGE{a.mr.SGE(0, 10000)}}))
	wc := waitWC(t, b.rcq, timeoutShort)
	if want := (cq.WC{WRID: 1, Status: cq.Success, Opcode: cq.OpRecv, ByteLen: 10000,
		QPNum: b.qp.QPN(), SrcQP: a.qp.QPN()}); wc != want {
		t.Fatalf("recv wc %+v\nwant    %+v", wc, want)
	}
	sendWC(2, cq.OpSend, 10000)
	copy(wantB[:10000], wantA[:10000])
	// WRITE 5000 bytes to b at offset 20000.
	must(t, a.qp.PostSend(&qp.SendWR{WRID: 3, Opcode: qp.WRRDMAWrite, Flags: qp.Signaled,
		SGL: []mr.SGE{a.mr.SGE(100, 5000)}, RemoteAddr: b.mr.Addr() + 20000, RKey: b.mr.RKey()}))
	sendWC(3, cq.OpRDMAWrite, 5000)
	copy(wantB[20000:25000], wantA[100:5100])
	// READ 7000 bytes from b at 20000 (the 5000 written and 2000 beyond)
	// into a at offset 50000.
	must(t, a.qp.PostSend(&qp.SendWR{WRID: 4, Opcode: qp.WRRDMARead, Flags: qp.Signaled,
		SGL: []mr.SGE{a.mr.SGE(50000, 7000)}, RemoteAddr: b.mr.Addr() + 20000, RKey: b.mr.RKey()}))
	sendWC(4, cq.OpRDMARead, 7000)
	copy(wantA[50000:57000], wantB[20000:27000])
	// Atomics on b's word at 64, each returning the original value into a
	// at 8, 16 and 24: fetch-and-add 40+2, compare-and-swap 42->99 (equal:
	// swaps), compare-and-swap 7->5 (not equal: leaves 99).
	binary.LittleEndian.PutUint64(b.buf[64:], 40)
	binary.LittleEndian.PutUint64(wantB[64:], 40)
	atomics := []struct {
		wr        qp.SendWR
		op        cq.Opcode
		orig, now uint64
	}{
		{qp.SendWR{WRID: 5, Opcode: qp.WRAtomicFetchAndAdd, CompareAdd: 2}, cq.OpFetchAdd, 40, 42},
		{qp.SendWR{WRID: 6, Opcode: qp.WRAtomicCmpAndSwp, CompareAdd: 42, Swap: 99}, cq.OpCompSwap, 42, 99},
		{qp.SendWR{WRID: 7, Opcode: qp.WRAtomicCmpAndSwp, CompareAdd: 7, Swap: 5}, cq.OpCompSwap, 99, 99},
	}
	for i, x := range atomics {
		wr := x.wr
		off := 8 * (i + 1)
		wr.Flags, wr.SGL = qp.Signaled, []mr.SGE{a.mr.SGE(off, 8)}
		wr.RemoteAddr, wr.RKey = b.mr.Addr()+64, b.mr.RKey()
		must(t, a.qp.PostSend(&wr))
		sendWC(wr.WRID, x.op, 8)
		binary.LittleEndian.PutUint64(wantA[off:], x.orig)
		binary.LittleEndian.PutUint64(wantB[64:], x.now)
		if got, now := binary.LittleEndian.Uint64(a.buf[off:]), binary.LittleEndian.Uint64(b.buf[64:]); got != x.orig || now != x.now {
			t.Fatalf("%v: returned %d, word now %d; want %d, %d", wr.Opcode, got, now, x.orig, x.now)
		}
	}
	for _, m := range []struct {
		name      string
		got, want []byte
	}{{"a", a.buf, wantA}, {"b", b.buf, wantB}} {
		if !bytes.Equal(m.got, m.want) {
			t.Fatalf("%s's region holds other bytes than the operations put there", m.name)
		}
	}
	// Nothing arrived that the engines had to drop.
	for _, d := range []*transport.Device{a.dev, b.dev} {
		c := d.Counters()
		if n := c.ICRCErr.Load() + c.Malformed.Load() + c.UnknownQP.Load() + c.BadState.Load() +
			c.BadSource.Load() + c.BadPKey.Load() + c.GhostResponses.Load(); n != 0 {
			t.Errorf("drops on a clean link: %v", d.Counters().List())
		}
	}
	if n := a.dev.Counters().RDMASends.Load(); n != 1 {
		t.Errorf("rdma_sends %d, want 1", n)
	}
	if n := b.dev.Counters().RDMARecvs.Load(); n != 1 {
		t.Errorf("rdma_recvs %d, want 1", n)
	}
}
