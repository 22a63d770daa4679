package transport

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/goroce/goroce/cq"
	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/qp"
)

// BenchmarkEngine measures the engine alone: two devices over the
// in-memory link (no system call, no kernel copy), RC at MTU 4096, a
// window of messages in flight. Gbit/s is payload goodput; pkt/s counts
// request packets.
func BenchmarkEngine(b *testing.B) {
	for _, op := range []qp.WROpcode{qp.WRRDMAWrite, qp.WRSend, qp.WRRDMARead} {
		for _, size := range []int{64, 4096, 65536} {
			b.Run(fmt.Sprintf("%v/%d", op, size), func(b *testing.B) {
				benchOp(b, op, size)
			})
		}
	}
}

func benchOp(b *testing.B, op qp.WROpcode, size int) {
	const depth = 64
	a, p, _ := newPair(b, pairOpts{mtu: qp.MTU4096, bufSize: depth * size, sqDepth: depth, rqDepth: depth,
		cqDepth: 4 * depth, window: 512})
	post := func(i int) {
		slot := (i % depth) * size
		if op == qp.WRSend {
			must(b, p.qp.PostRecv(&qp.RecvWR{SGL: []mr.SGE{p.mr.SGE(slot, size)}}))
		}
		must(b, a.qp.PostSend(&qp.SendWR{Opcode: op, Flags: qp.Signaled, SGL: []mr.SGE{a.mr.SGE(slot, size)},
			RemoteAddr: p.mr.Addr() + uint64(slot), RKey: p.mr.RKey()}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wc := make([]cq.WC, depth)
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	inflight, posted, done := 0, 0, 0
	for done < b.N {
		for inflight < depth && posted < b.N {
			post(posted)
			posted++
			inflight++
		}
		n, err := a.scq.PollWait(ctx, wc)
		if err != nil {
			b.Fatal(err)
		}
		for _, w := range wc[:n] {
			if w.Status != cq.Success {
				b.Fatal(w)
			}
		}
		if op == qp.WRSend {
			for got := 0; got < n; {
				m, err := p.rcq.PollWait(ctx, wc[:n-got])
				if err != nil {
					b.Fatal(err)
				}
				got += m
			}
		}
		done += n
		inflight -= n
	}
	el := time.Since(start).Seconds()
	pkts := (size + 4095) / 4096
	b.ReportMetric(float64(b.N)*float64(size)*8/el/1e9, "Gbit/s")
	b.ReportMetric(float64(b.N*pkts)/el, "pkt/s")
}
