package transport_test

import (
	"net/netip"
	"runtime"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/testharness"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

// TestXRCScaling measures, with real objects in RTS, what one node of a
// fully connected job of N nodes × P processes holds (the course
// material's scaling argument; README "XRC"):
//
//   - RC: every process has a QP to every process of every other node,
//     P×(N−1)×P QPs, each with its own receive queue;
//   - XRC: every process has one initiator QP per other node, (N−1)×P,
//     and one XRC SRQ; the node has one target QP per remote initiator,
//     (N−1)×P, all in one XRC domain.
//
// Both use the same send queue depth, the RC QPs a receive queue as deep,
// and each XRC SRQ the same number of receives one RC QP's queue holds
// times the other nodes. It logs the QP counts and the Go heap each
// takes, and fails unless XRC needs P/2 times fewer QPs and less memory.
func TestXRCScaling(t *testing.T) {
	const N, P, depth = 4, 8, 16
	net := mem.NewNet(1)
	l, err := net.Attach(netip.MustParseAddr("10.0.0.1"), mem.Options{})
	testharness.Must(t, err)
	d, err := transport.Open(l, transport.Options{})
	testharness.Must(t, err)
	defer d.Close()
	remote := transport.Endpoint{QPN: 0x77, GID: bth.GIDFromAddr(netip.MustParseAddr("10.0.0.2")), MTU: transport.MTU1024}
	connect := func(q *transport.QP) {
		local, err := d.LocalEndpoint(q)
		testharness.Must(t, err)
		testharness.Must(t, d.Connect(q, local, remote, transport.ConnectOptions{Access: transport.RemoteWrite | transport.RemoteRead | transport.RemoteAtomic}))
	}
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	// What both layouts share, made first: a PD and CQ per process.
	pds := make([]*transport.PD, P)
	cqs := make([]*transport.CQ, P)
	for p := range P {
		pds[p], cqs[p] = d.AllocPD(), d.CreateCQ(1024)
	}

	base := heap()
	var rc []*transport.QP
	for p := range P {
		for range (N - 1) * P {
			q, err := d.CreateQP(pds[p], transport.QPInitAttr{Type: transport.RC, SendCQ: cqs[p], RecvCQ: cqs[p],
				Cap: transport.QPCap{MaxSendWR: depth, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1}})
			testharness.Must(t, err)
			connect(q)
			rc = append(rc, q)
		}
	}
	rcHeap := heap() - base
	for _, q := range rc {
		testharness.Must(t, d.DestroyQP(q))
	}
	rcQPs := len(rc)
	rc = nil

	base = heap()
	xrcd, err := d.OpenXRCD()
	testharness.Must(t, err)
	var inis, tgts []*transport.QP
	var srqs []*transport.SRQ
	for p := range P {
		s, err := d.CreateSRQEx(pds[p], transport.SRQInitAttr{Type: transport.SRQXRC, XRCD: xrcd, CQ: cqs[p],
			Attr: transport.SRQAttr{MaxWR: depth * (N - 1), MaxSGE: 1}})
		testharness.Must(t, err)
		srqs = append(srqs, s)
		for range N - 1 {
			q, err := d.CreateQP(pds[p], transport.QPInitAttr{Type: transport.XRCIni, SendCQ: cqs[p], Cap: transport.QPCap{MaxSendWR: depth, MaxSendSGE: 1}})
			testharness.Must(t, err)
			connect(q)
			inis = append(inis, q)
		}
	}
	for range (N - 1) * P {
		q, err := d.CreateQP(nil, transport.QPInitAttr{Type: transport.XRCTgt, XRCD: xrcd})
		testharness.Must(t, err)
		connect(q)
		tgts = append(tgts, q)
	}
	xrcHeap := heap() - base
	xrcQPs := len(inis) + len(tgts)
	runtime.KeepAlive(srqs)

	if rcQPs != P*(N-1)*P || len(inis) != (N-1)*P || len(tgts) != (N-1)*P {
		t.Fatalf("counted %d RC QPs, %d initiators, %d targets", rcQPs, len(inis), len(tgts))
	}
	t.Logf("N=%d nodes × P=%d processes, one node's share, in RTS:", N, P)
	t.Logf("RC : %3d QPs (P×(N−1)×P)                         %7d B heap, %5d B per QP", rcQPs, rcHeap, rcHeap/uint64(rcQPs))
	t.Logf("XRC: %3d QPs ((N−1)×P INI + (N−1)×P TGT) + %d SRQs %7d B heap, %5d B per QP", xrcQPs, len(srqs), xrcHeap, xrcHeap/uint64(xrcQPs))
	t.Logf("XRC/RC: %.2f of the QPs, %.2f of the memory", float64(xrcQPs)/float64(rcQPs), float64(xrcHeap)/float64(rcHeap))
	if xrcQPs*P/2 != rcQPs || xrcHeap >= rcHeap {
		t.Fatalf("XRC: %d QPs and %d B; RC: %d QPs and %d B", xrcQPs, xrcHeap, rcQPs, rcHeap)
	}
}
