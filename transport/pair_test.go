package transport

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
	"github.com/goroce/goroce/qp"
)

// side is one end of a test connection.
type side struct {
	dev  *Device
	link *nic.MemLink
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
	wrap func(*nic.MemLink) nic.Link
	// clock, if set, drives the device's timers (newRaw sets one).
	clock qp.Clock
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

func newSide(t testing.TB, net *nic.MemNet, addr string, o *pairOpts) *side {
	t.Helper()
	a := netip.MustParseAddr(addr)
	l, err := net.Attach(a, nic.MemOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var link nic.Link = l
	if o.wrap != nil {
		link = o.wrap(l)
	}
	opt := Options{Window: o.window, Clock: o.clock}
	if o.trace != nil {
		opt.Trace = o.trace.hook(addr)
	}
	d, err := Open(link, opt)
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

// connect moves q to RTS towards peer, as rc_pingpong's pp_connect_ctx does.
func connect(t testing.TB, s, peer *side, o *pairOpts, myPSN, peerPSN uint32) {
	t.Helper()
	connectTo(t, s, peer, o, myPSN, peerPSN, qp.RTS)
}

// connectTo is connect stopping at state last (RTR or RTS).
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

func newPair(t testing.TB, o pairOpts) (*side, *side, *nic.MemNet) {
	t.Helper()
	o.defaults()
	net := nic.NewMemNet(o.seed)
	a := newSide(t, net, "10.0.0.1", &o)
	b := newSide(t, net, "10.0.0.2", &o)
	if !o.noConnect {
		connect(t, a, b, &o, o.psnA, o.psnB)
		connect(t, b, a, &o, o.psnB, o.psnA)
	}
	return a, b, net
}

// wait polls c until it returns one completion or the test times out.
func wait(t testing.TB, c *cq.CQ, d time.Duration) cq.WC {
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

func TestSmokeRC(t *testing.T) {
	a, b, _ := newPair(t, pairOpts{psnA: 0xfffff0, psnB: 100})
	for i := range a.buf {
		a.buf[i] = byte(i * 7)
	}
	// SEND 10000 bytes (10 packets at MTU 1024).
	if err := b.qp.PostRecv(&qp.RecvWR{WRID: 1, SGL: []mr.SGE{b.mr.SGE(0, 16384)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(&qp.SendWR{WRID: 2, Opcode: qp.WRSend, Flags: qp.Signaled, SGL: []mr.SGE{a.mr.SGE(0, 10000)}}); err != nil {
		t.Fatal(err)
	}
	wc := wait(t, b.rcq, 2*time.Second)
	if wc.Status != cq.Success || wc.ByteLen != 10000 || wc.WRID != 1 {
		t.Fatalf("recv wc %+v", wc)
	}
	if wc := wait(t, a.scq, 2*time.Second); wc.Status != cq.Success || wc.WRID != 2 {
		t.Fatalf("send wc %+v", wc)
	}
	if !bytes.Equal(b.buf[:10000], a.buf[:10000]) {
		t.Fatal("SEND data differs")
	}
	// WRITE 5000 bytes to b at offset 20000.
	if err := a.qp.PostSend(&qp.SendWR{WRID: 3, Opcode: qp.WRRDMAWrite, Flags: qp.Signaled,
		SGL: []mr.SGE{a.mr.SGE(100, 5000)}, RemoteAddr: b.mr.Addr() + 20000, RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := wait(t, a.scq, 2*time.Second); wc.Status != cq.Success {
		t.Fatalf("write wc %+v", wc)
	}
	if !bytes.Equal(b.buf[20000:25000], a.buf[100:5100]) {
		t.Fatal("WRITE data differs")
	}
	// READ 7000 bytes from b into a at offset 50000.
	if err := a.qp.PostSend(&qp.SendWR{WRID: 4, Opcode: qp.WRRDMARead, Flags: qp.Signaled,
		SGL: []mr.SGE{a.mr.SGE(50000, 7000)}, RemoteAddr: b.mr.Addr() + 20000, RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := wait(t, a.scq, 2*time.Second); wc.Status != cq.Success || wc.Opcode != cq.OpRDMARead {
		t.Fatalf("read wc %+v", wc)
	}
	if !bytes.Equal(a.buf[50000:55000], a.buf[100:5100]) {
		t.Fatal("READ data differs")
	}
	// Fetch-and-add then compare-and-swap on b's word at 64.
	binary.LittleEndian.PutUint64(b.buf[64:], 40)
	if err := a.qp.PostSend(&qp.SendWR{WRID: 5, Opcode: qp.WRAtomicFetchAndAdd, Flags: qp.Signaled,
		SGL: []mr.SGE{a.mr.SGE(8, 8)}, RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey(), CompareAdd: 2}); err != nil {
		t.Fatal(err)
	}
	if wc := wait(t, a.scq, 2*time.Second); wc.Status != cq.Success || wc.Opcode != cq.OpFetchAdd {
		t.Fatalf("fadd wc %+v", wc)
	}
	if got := binary.LittleEndian.Uint64(a.buf[8:]); got != 40 || binary.LittleEndian.Uint64(b.buf[64:]) != 42 {
		t.Fatalf("fetch-add: orig %d now %d", got, binary.LittleEndian.Uint64(b.buf[64:]))
	}
	t.Logf("counters a: %v", a.dev.Counters().List()[:4])
}
