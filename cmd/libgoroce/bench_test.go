package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/latency"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

// BenchmarkVerbs measures what a verb costs from C through libgoroce.so
// (testdata/verbs_bench.c, preloaded) beside the same verb from Go on
// goroce's API, in the same run: an empty poll of a CQ, and a SEND, a
// receive and an RDMA WRITE posted to a QP in the error state (flushed
// into the CQ at once) with the poll that reaps the completion; the WRITE
// also through the ibv_wr_* API (wr_write, which Go has no form of), and
// both WRITE posts timed alone (post_write, wr_write). No packet is sent,
// so the difference between the c- and go- figures is the C/Go boundary
// and the conversions of libibverbs' structs. ns per iteration. gc-cycles
// counts the Go collections during the C run (GODEBUG=gctrace=1): a post
// that allocated would start some within a few hundred thousand.
//
//	go test -run '^$' -bench Verbs -benchtime 200000x ./cmd/libgoroce
func BenchmarkVerbs(b *testing.B) {
	c, gcs := cVerbs(b, b.N)
	g := goVerbs(b, b.N)
	for _, name := range []string{"poll_empty", "post_send_poll", "post_recv_poll", "post_write_poll",
		"wr_write_poll", "post_write", "wr_write"} {
		b.ReportMetric(c[name], "c-"+name+"-ns")
		if v, ok := g[name]; ok {
			b.ReportMetric(v, "go-"+name+"-ns")
		}
	}
	b.ReportMetric(float64(gcs), "gc-cycles")
}

// BenchmarkVerbsIdle: one ibv_post_recv (on the error-state QP, reaped
// as above) after the calling thread spent GAP µs in C, as a program that
// computes between verbs does, p50 and p99 per gap, beside the same post
// from Go after the same spin (go-, the path without the crossing). A C
// thread that calls into Go holds a P while it is back in C, and its
// goroutine is never rescheduled, so the runtime's monitor (sysmon),
// having seen the P on one schedule tick for 10 ms, takes it back
// whenever it finds the thread in C. The next call then gets an idle P
// and wakes the monitor, asleep since every P went idle: a futex wake
// inside the call (runtime.exitsyscallTryGetP; docs/performance.md).
//
//	go test -run '^$' -bench VerbsIdle -benchtime 2000x ./cmd/libgoroce
func BenchmarkVerbsIdle(b *testing.B) {
	c, _ := cVerbs(b, b.N, "idle")
	g := goVerbsIdle(b, b.N)
	for _, name := range idleNames() {
		b.ReportMetric(c[name], "c-"+name+"-ns")
		b.ReportMetric(g[name], "go-"+name+"-ns")
	}
	b.ReportMetric(0, "ns/op")
}

// idleGaps are verbs_bench idle's gaps, µs.
var idleGaps = []int{0, 20, 50, 200, 1000}

func idleNames() []string {
	var names []string
	for _, g := range idleGaps {
		names = append(names, fmt.Sprintf("idle_%d_p50", g), fmt.Sprintf("idle_%d_p99", g))
	}
	return names
}

// TestPostNoAlloc runs verbs_bench for 100000 iterations of each verb
// (400000 posts: SEND, receive, WRITE by ibv_post_send and by ibv_wr_*)
// with the Go runtime tracing its collections: none may start. Posts that
// allocated 16 bytes each would pass the runtime's first 4 MB heap goal
// (64 bytes each made three collections, tried once by hand).
func TestPostNoAlloc(t *testing.T) {
	if _, gcs := cVerbs(t, 100000); gcs != 0 {
		t.Errorf("%d garbage collections during verbs_bench: a post or poll allocates", gcs)
	}
}

// cVerbs runs testdata/verbs_bench.c preloaded for n iterations and
// returns its figures and the number of Go collections it saw; more are
// verbs_bench's further arguments ("idle").
func cVerbs(tb testing.TB, n int, more ...string) (map[string]float64, int) {
	bin := buildC(tb, "verbs_bench")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := preloaded(ctx, addrA, bin, append([]string{strconv.Itoa(n)}, more...)...)
	cmd.Env = append(cmd.Env, "GODEBUG=gctrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("verbs_bench: %v\n%s", err, out)
	}
	c := map[string]float64{}
	gcs := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "gc ") {
			gcs++
			continue
		}
		if name, v, ok := strings.Cut(sc.Text(), " "); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				c[name] = f
			}
		}
	}
	names := []string{"poll_empty", "post_send_poll", "post_recv_poll", "post_write_poll",
		"wr_write_poll", "post_write", "wr_write"}
	if len(more) > 0 {
		names = idleNames()
	}
	for _, name := range names {
		if _, ok := c[name]; !ok {
			tb.Fatalf("verbs_bench printed no %s:\n%s", name, out)
		}
	}
	return c, gcs
}

// goQP is verbs_bench.c's set-up on goroce's Go API over the in-memory
// link: an RC QP in the error state, its CQ, the work requests, and reap,
// which polls the flushed completion of one.
type goQP struct {
	q        *transport.QP
	c        *transport.CQ
	swr, wwr *transport.SendWR
	rwr      *transport.RecvWR
	reap     func()
}

func newGoQP(b *testing.B) *goQP {
	link, err := mem.NewNet(1).Attach(netip.MustParseAddr(addrA), mem.Options{})
	if err != nil {
		b.Fatal(err)
	}
	dev, err := transport.Open(link, transport.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { dev.Close() })
	pd := dev.AllocPD()
	buf := make([]byte, 64)
	m, err := pd.Register(buf, transport.LocalWrite)
	if err != nil {
		b.Fatal(err)
	}
	c := dev.CreateCQ(16)
	q, err := dev.CreateQP(pd, transport.QPInitAttr{Type: transport.RC, SendCQ: c, RecvCQ: c,
		Cap: transport.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		b.Fatal(err)
	}
	if err := q.Modify(&transport.QPAttr{State: transport.Init, PortNum: 1}, transport.AttrState|transport.AttrPKeyIndex|transport.AttrPort|transport.AttrAccessFlags); err != nil {
		b.Fatal(err)
	}
	if err := q.Modify(&transport.QPAttr{State: transport.Err}, transport.AttrState); err != nil {
		b.Fatal(err)
	}
	sgl := []transport.SGE{m.SGE(0, 8)}
	swr := &transport.SendWR{Opcode: transport.WRSend, Flags: transport.Signaled, SGL: sgl}
	wwr := &transport.SendWR{Opcode: transport.WRRDMAWrite, Flags: transport.Signaled, SGL: sgl, RemoteAddr: sgl[0].Addr, RKey: m.RKey()}
	rwr := &transport.RecvWR{SGL: sgl}
	var wc [1]transport.WC
	reap := func() {
		for {
			k, err := c.Poll(wc[:])
			if err != nil || k == 1 && wc[0].Status != transport.WRFlushErr {
				b.Fatalf("poll: %v %v", err, wc[0].Status)
			}
			if k == 1 {
				return
			}
		}
	}
	return &goQP{q: q, c: c, swr: swr, wwr: wwr, rwr: rwr, reap: reap}
}

// goVerbsIdle is verbs_bench.c's idle mode on the Go API: a post after a
// spin of each gap, p50 and p99.
func goVerbsIdle(b *testing.B, n int) map[string]float64 {
	g := newGoQP(b)
	out := map[string]float64{}
	for _, gap := range idleGaps {
		d := make(latency.Sample, n)
		for i := range d {
			for s := time.Now(); time.Since(s) < time.Duration(gap)*time.Microsecond; {
			}
			p := time.Now()
			if err := g.q.PostRecv(g.rwr); err != nil {
				b.Fatal(err)
			}
			d[i] = time.Since(p)
			g.reap()
		}
		out[fmt.Sprintf("idle_%d_p50", gap)] = float64(d.Quantile(0.50))
		out[fmt.Sprintf("idle_%d_p99", gap)] = float64(d.Quantile(0.99))
	}
	return out
}

// goVerbs is verbs_bench.c on goroce's Go API, ns per iteration.
func goVerbs(b *testing.B, n int) map[string]float64 {
	g := newGoQP(b)
	q, c, swr, wwr, rwr, reap := g.q, g.c, g.swr, g.wwr, g.rwr, g.reap
	var wc [1]transport.WC
	per := func(f func()) float64 {
		t := time.Now()
		for range n {
			f()
		}
		return float64(time.Since(t).Nanoseconds()) / float64(n)
	}
	return map[string]float64{
		"poll_empty": per(func() {
			if k, _ := c.Poll(wc[:]); k != 0 {
				b.Fatal("a completion in an empty CQ")
			}
		}),
		"post_send_poll": per(func() {
			if err := q.PostSend(swr); err != nil {
				b.Fatal(err)
			}
			reap()
		}),
		"post_write_poll": per(func() {
			if err := q.PostSend(wwr); err != nil {
				b.Fatal(err)
			}
			reap()
		}),
		"post_recv_poll": per(func() {
			if err := q.PostRecv(rwr); err != nil {
				b.Fatal(err)
			}
			reap()
		}),
	}
}
