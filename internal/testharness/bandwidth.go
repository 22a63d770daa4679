package testharness

import (
	"context"
	"testing"
	"time"

	"github.com/goroce/goroce/transport"
)

// Bandwidth posts count messages of size bytes with op (RDMA WRITE or
// SEND) from a to b, keeping up to depth outstanding, as ib_write_bw and
// ib_send_bw do, and returns the time from the first post to the last
// completion. For SEND, b's receive queue is kept full from the same
// loop. start, if set, runs just before the first post.
func Bandwidth(tb testing.TB, a, b *Peer, op transport.WROpcode, size, depth, count int, start func()) time.Duration {
	tb.Helper()
	send := op == transport.WRSend
	recv := transport.RecvWR{SGL: []transport.SGE{b.MR.SGE(0, size)}}
	if send {
		for range min(int(b.Opt.RQDepth), count) {
			Must(tb, b.QP.PostRecv(&recv))
		}
	}
	wr := transport.SendWR{Opcode: op, Flags: transport.Signaled, SGL: []transport.SGE{a.MR.SGE(0, size)},
		RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()}
	wcs := make([]transport.WC, 64)
	rwcs := make([]transport.WC, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if start != nil {
		start()
	}
	t0 := time.Now()
	posted, done, reposted := 0, 0, min(int(b.Opt.RQDepth), count)
	for done < count {
		for ; posted < count && posted-done < depth; posted++ {
			Must(tb, a.QP.PostSend(&wr))
		}
		n, err := a.SCQ.PollWait(ctx, wcs)
		if err != nil {
			tb.Fatalf("%v: %d of %d messages completed: %v", op, done, count, err)
		}
		for _, wc := range wcs[:n] {
			if wc.Status != transport.Success {
				tb.Fatalf("%v: completion %+v", op, wc)
			}
		}
		done += n
		if send {
			m, _ := b.RCQ.Poll(rwcs)
			for _, wc := range rwcs[:m] {
				if wc.Status != transport.Success {
					tb.Fatalf("receive completion %+v", wc)
				}
			}
			for ; m > 0 && reposted < count; m-- {
				Must(tb, b.QP.PostRecv(&recv))
				reposted++
			}
		}
	}
	return time.Since(t0)
}
