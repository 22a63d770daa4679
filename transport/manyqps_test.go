package transport_test

import (
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testharness"

	"github.com/goroce/goroce/transport"
)

// TestManyQPs: a device holds many RC QPs, traffic to some still works,
// and every create and destroy leaves the table consistent. -short keeps
// it small; the full run is the 100,000. The links have two
// receive queues, so the traffic runs on both of each device's receive
// goroutines and workers.
func TestManyQPs(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 5_000
	}
	a, b, _ := testharness.MemPair(t, testharness.Options{RxQueues: 2})
	qs := make([]*transport.QP, n)
	c := a.Dev.CreateCQ(2 * 1000) // the traffic below completes here
	for i := range qs {
		q, err := a.Dev.CreateQP(a.PD, transport.QPInitAttr{Type: transport.RC, SendCQ: c, RecvCQ: c,
			Cap: transport.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatalf("QP %d: %v", i, err)
		}
		qs[i] = q
	}
	for i, q := range qs {
		if a.Dev.LookupQP(q.QPN()) != q {
			t.Fatalf("QP %d (%#x) not found", i, q.QPN())
		}
	}
	manyQPsTraffic(t, a, b, qs, c)
	// Destroy every other one: the rest are still found, the destroyed
	// ones are gone, and new ones take numbers after the last.
	for i := 0; i < n; i += 2 {
		if err := a.Dev.DestroyQP(qs[i]); err != nil {
			t.Fatal(err)
		}
		if a.Dev.LookupQP(qs[i].QPN()) != nil {
			t.Fatalf("destroyed QP %#x still found", qs[i].QPN())
		}
	}
	if err := a.Dev.DestroyQP(qs[0]); err == nil {
		t.Fatal("a QP destroyed twice")
	}
	if err := b.Dev.DestroyQP(qs[1]); err == nil || a.Dev.LookupQP(qs[1].QPN()) != qs[1] {
		t.Fatalf("another device destroyed a QP: %v", err)
	}
	for i := 1; i < n; i += 2 {
		if a.Dev.LookupQP(qs[i].QPN()) != qs[i] {
			t.Fatalf("QP %#x lost", qs[i].QPN())
		}
	}
	q, err := a.Dev.CreateQP(a.PD, transport.QPInitAttr{Type: transport.RC, SendCQ: c, RecvCQ: c,
		Cap: transport.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil || q.QPN() != qs[n-1].QPN()+1 {
		t.Fatalf("after the destroys: %v, QPN %#x after %#x", err, q.QPN(), qs[n-1].QPN())
	}
	// The pair's own QPs, created first, still carry traffic among them.
	testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: 7, Opcode: transport.WRRDMAWrite, Flags: transport.Signaled, SGL: []transport.SGE{a.MR.SGE(0, 64)},
		RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()}))
	if wc := testharness.Wait(t, a.SCQ, 10*time.Second); wc.WRID != 7 || wc.Status != transport.Success {
		t.Fatalf("%+v", wc)
	}
}

// manyQPsTraffic connects randomly chosen QPs among qs (1,000 of 100,000;
// 50 with -short) each to a new QP on b and sends one message each way on
// every pair, each delivered to its own slot and checked: a device full of
// QPs must still deliver by QPN. The chosen QPs complete on c.
func manyQPsTraffic(t *testing.T, a, b *testharness.Peer, qs []*transport.QP, c *transport.CQ) {
	t.Helper()
	k := 1000
	if testing.Short() {
		k = 50
	}
	rng := rand.New(rand.NewPCG(13, uint64(len(qs))))
	cb := b.Dev.CreateCQ(2 * k)
	type pair struct{ qa, qb *transport.QP }
	pairs := make([]pair, 0, k)
	for _, i := range rng.Perm(len(qs))[:k] {
		qb, err := b.Dev.CreateQP(b.PD, transport.QPInitAttr{Type: transport.RC, SendCQ: cb, RecvCQ: cb,
			Cap: transport.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		p := pair{qs[i], qb}
		ea, err := a.Dev.LocalEndpoint(p.qa)
		if err != nil {
			t.Fatal(err)
		}
		eb, err := b.Dev.LocalEndpoint(p.qb)
		if err != nil {
			t.Fatal(err)
		}
		testharness.Must(t, a.Dev.Connect(p.qa, ea, eb, transport.ConnectOptions{}))
		testharness.Must(t, b.Dev.Connect(p.qb, eb, ea, transport.ConnectOptions{}))
		pairs = append(pairs, p)
	}
	// Slot j of each side's region: [j*8, j*8+8) receives, and the k slots
	// after them hold what that side sends. Every receive is posted before
	// any send, so no message meets an RNR.
	const w = 8
	for j, p := range pairs {
		binary.LittleEndian.PutUint64(a.Buf[(k+j)*w:], uint64(j)<<32|0xa)
		binary.LittleEndian.PutUint64(b.Buf[(k+j)*w:], uint64(j)<<32|0xb)
		testharness.Must(t, p.qa.PostRecv(&transport.RecvWR{WRID: uint64(j), SGL: []transport.SGE{a.MR.SGE(j*w, w)}}))
		testharness.Must(t, p.qb.PostRecv(&transport.RecvWR{WRID: uint64(j), SGL: []transport.SGE{b.MR.SGE(j*w, w)}}))
	}
	for j, p := range pairs {
		testharness.Must(t, p.qa.PostSend(&transport.SendWR{WRID: uint64(j), Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{a.MR.SGE((k+j)*w, w)}}))
		testharness.Must(t, p.qb.PostSend(&transport.SendWR{WRID: uint64(j), Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{b.MR.SGE((k+j)*w, w)}}))
	}
	for _, c := range []*transport.CQ{c, cb} {
		for range 2 * k {
			if wc := testharness.Wait(t, c, 10*time.Second); wc.Status != transport.Success {
				t.Fatalf("%+v", wc)
			}
		}
	}
	for j := range pairs {
		if got := binary.LittleEndian.Uint64(a.Buf[j*w:]); got != uint64(j)<<32|0xb {
			t.Fatalf("pair %d: a received %#x", j, got)
		}
		if got := binary.LittleEndian.Uint64(b.Buf[j*w:]); got != uint64(j)<<32|0xa {
			t.Fatalf("pair %d: b received %#x", j, got)
		}
	}
}

// idleQPCap is the shape of the QPs whose heap the issue measured (a
// user's program, 7,640 B each): 16 send and 16 receive WRs of one SGE.
var idleQPCap = transport.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}

// TestManyQPsHeap: a QP created and not yet used holds no send or
// receive ring and no timer, whatever its capabilities ask, so the
// issue's 100,000 QPs fit at 2 KiB of heap each at most (when each QP
// carried its rings from creation, 7.6 KiB at idleQPCap and 126 KiB at
// the larger shape). The queues come on first use: TestManyQPs's traffic
// runs on QPs created this way.
func TestManyQPsHeap(t *testing.T) {
	const limit = 2048
	for _, s := range []struct {
		name string
		n    int
		cap  transport.QPCap
	}{
		{"issue", 10_000, idleQPCap},
		{"large", 500, transport.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}},
	} {
		t.Run(s.name, func(t *testing.T) {
			a, _, _ := testharness.MemPair(t, testharness.Options{NoConnect: true})
			c := a.Dev.CreateCQ(16)
			qs := make([]*transport.QP, s.n)
			per := heapPer(nil, s.n, func(i int) {
				q, err := a.Dev.CreateQP(a.PD, transport.QPInitAttr{Type: transport.RC, SendCQ: c, RecvCQ: c, Cap: s.cap})
				if err != nil {
					t.Fatal(err)
				}
				qs[i] = q
			})
			t.Logf("%d QPs of %+v: %.0f B of heap each", s.n, s.cap, per)
			if per > limit {
				t.Fatalf("an idle QP holds %.0f B of heap, more than %d", per, limit)
			}
		})
	}
}

// heapPer runs f(0..n-1) and returns the heap it left live, per call.
// Two collections before the first reading empty the sync.Pools (the
// second frees their victim caches), so that no pooled buffer freed
// during f offsets what f kept. A benchmark's b (else nil) times the
// calls alone.
func heapPer(b *testing.B, n int, f func(i int)) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	if b != nil {
		b.ResetTimer()
	}
	for i := range n {
		f(i)
	}
	if b != nil {
		b.StopTimer()
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
}

// BenchmarkCreateQP: the cost of one RC QP's create (ns/op, and the
// process's CPU time per QP) and the heap an idle one holds (B/QP), at the number of QPs b.N reaches, of the
// issue's shape (idleQPCap): O(1) each means ns/op stays flat as b.N
// grows. Run with -benchtime=100000x for the 100k QPs.
func BenchmarkCreateQP(b *testing.B) {
	a, _, _ := testharness.MemPair(b, testharness.Options{NoConnect: true})
	c := a.Dev.CreateCQ(16)
	qs := make([]*transport.QP, b.N)
	cpu0 := cpuTime(b)
	per := heapPer(b, b.N, func(i int) {
		q, err := a.Dev.CreateQP(a.PD, transport.QPInitAttr{Type: transport.RC, SendCQ: c, RecvCQ: c, Cap: idleQPCap})
		if err != nil {
			b.Fatal(err)
		}
		qs[i] = q
	})
	b.ReportMetric(per, "heapB/QP")
	// The CPU time (the collections heapPer makes included) beside the
	// time: on a loaded host the second says how much of a core it got.
	b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/QP")
	runtime.KeepAlive(qs)
}
