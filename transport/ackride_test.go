package transport_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testharness"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

// TestAckRidesWithReplyReceiving: with receive goroutines doing the
// receiving (no poll mode), a batch that completes work lets the program
// run before its burst ends (yieldToWoken), so that the reply the
// program posts then takes the ACK still queued along, in one Send of the
// link (one sendmmsg on the udp link). The yield here is the program
// itself: the reply is posted from it, on the receive goroutine, and
// only from it, so that the old code, which ended the burst (sending the
// ACK alone) and never yielded, fails the test.
func TestAckRidesWithReplyReceiving(t *testing.T) {
	var bl *sendLog
	wrap := func(l *mem.Link) nic.Link {
		bl = &sendLog{Link: l} // the second link made is b's
		return bl
	}
	a, b, _ := testharness.MemPair(t, testharness.Options{Wrap: wrap})
	for _, p := range []*testharness.Peer{a, b} {
		if err := p.QP.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{p.MR.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	var once sync.Once
	replied := make(chan error, 1)
	b.Dev.SetYieldToWoken(func() {
		once.Do(func() {
			if n := b.RCQ.Len(); n != 1 {
				replied <- fmt.Errorf("b's receive queue holds %d completions when its receive goroutine yields, want the SEND's", n)
				return
			}
			replied <- b.QP.PostSend(&transport.SendWR{WRID: 3, Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{b.MR.SGE(0, 64)}})
		})
	})
	bl.sent()
	if err := a.QP.PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{a.MR.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	// A failure waits out this deadline; a pass never does.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	select {
	case err := <-replied:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("b's receive goroutine never yielded to the program after completing a's SEND")
	}
	for _, c := range []struct {
		cq   *transport.CQ
		wrID uint64
	}{{a.SCQ, 2}, {a.RCQ, 1}, {b.RCQ, 1}, {b.SCQ, 3}} {
		var wc [1]transport.WC
		if _, err := c.cq.PollWait(ctx, wc[:]); err != nil {
			t.Fatalf("completion %d: %v", c.wrID, err)
		}
		if wc[0].Status != transport.Success || wc[0].WRID != c.wrID {
			t.Fatalf("completion %d: %+v", c.wrID, wc[0])
		}
	}
	if s := bl.sent(); len(s) == 0 || s[0] != 2 {
		t.Fatalf("b's sends carried %v frames, want the ACK and the reply in the first", s)
	}
	if n := b.Dev.Counters().SentACKs.Load(); n != 1 {
		t.Fatalf("b sent %d ACKs, want 1", n)
	}
}
