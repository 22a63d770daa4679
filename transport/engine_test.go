package transport_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testharness"
	"github.com/goroce/goroce/transport"

	"github.com/goroce/goroce/internal/manualclock"
	"github.com/goroce/goroce/nic/mem"
)

// A 64 MiB message of each kind, across the PSN wrap.
func TestLargeMessages(t *testing.T) {
	if testing.Short() {
		t.Skip("64 MiB messages: run without -short")
	}
	const n = 64 << 20
	a, b, _ := testharness.MemPair(t, testharness.Options{MTU: transport.MTU4096, BufSize: n + 4096, PSN: 0xffff00, PSNB: 0xfff800, Window: 256})
	fill(a.Buf[:n], 1)
	for _, op := range []transport.WROpcode{transport.WRSend, transport.WRRDMAWrite, transport.WRRDMARead} {
		clear(b.Buf)
		src, dst := a, b
		if op == transport.WRRDMARead {
			fill(b.Buf[:n], 2)
			clear(a.Buf)
			src, dst = b, a
		} else {
			fill(a.Buf[:n], 1)
		}
		if op == transport.WRSend {
			testharness.Must(t, b.QP.PostRecv(&transport.RecvWR{SGL: []transport.SGE{b.MR.SGE(0, n)}}))
		}
		testharness.Must(t, a.QP.PostSend(&transport.SendWR{Opcode: op, Flags: transport.Signaled, SGL: []transport.SGE{a.MR.SGE(0, n)},
			RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()}))
		if wc := testharness.Wait(t, a.SCQ, 60*time.Second); wc.Status != transport.Success || wc.ByteLen != n {
			t.Fatalf("%v: %+v", op, wc)
		}
		if !bytes.Equal(src.Buf[:n], dst.Buf[:n]) {
			t.Fatalf("%v of 64 MiB: data differs", op)
		}
	}
}

func TestCQOverrun(t *testing.T) {
	a, b, _ := testharness.MemPair(t, testharness.Options{CQDepth: 4})
	for i := range 6 {
		testharness.Must(t, b.QP.PostRecv(&transport.RecvWR{WRID: uint64(i), SGL: []transport.SGE{b.MR.SGE(0, 8)}}))
	}
	for i := range 6 {
		testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: uint64(i), Opcode: transport.WRSend, SGL: []transport.SGE{a.MR.SGE(0, 8)}}))
	}
	// The fifth receive completion finds the CQ full: an asynchronous CQ
	// error, never a silent loss.
	var sawCQ, sawQP bool
	for !(sawCQ && sawQP) {
		select {
		case e := <-b.Dev.Events():
			switch e.Type {
			case transport.EventCQErr:
				sawCQ = e.CQ == b.RCQ && errors.Is(e.Err, transport.ErrOverrun)
			case transport.EventQPFatal:
				sawQP = e.QP == b.QP
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("events: CQ error %v, QP fatal %v", sawCQ, sawQP)
		}
	}
	var wc [8]transport.WC
	n, err := b.RCQ.Poll(wc[:])
	if n != 4 || err != nil {
		t.Fatalf("poll: %d %v", n, err)
	}
	if _, err := b.RCQ.Poll(wc[:]); !errors.Is(err, transport.ErrOverrun) {
		t.Fatalf("poll after the held completions: %v", err)
	}
	if b.RCQ.Lost() == 0 {
		t.Fatal("lost completions not counted")
	}
}

func TestDeregRevokes(t *testing.T) {
	a, b, _ := testharness.MemPair(t, testharness.Options{Timeout: 16})
	target, err := b.PD.Register(make([]byte, 4096), transport.LocalWrite|transport.RemoteWrite|transport.RemoteRead)
	testharness.Must(t, err)
	write := func(id uint64) transport.WC {
		testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: id, Opcode: transport.WRRDMAWrite, Flags: transport.Signaled,
			SGL: []transport.SGE{a.MR.SGE(0, 100)}, RemoteAddr: target.Addr(), RKey: target.RKey()}))
		return testharness.Wait(t, a.SCQ, 2*time.Second)
	}
	if wc := write(1); wc.Status != transport.Success {
		t.Fatalf("before dereg: %+v", wc)
	}
	testharness.Must(t, target.Dereg())
	if wc := write(2); wc.Status != transport.RemAccessErr {
		t.Fatalf("after dereg: %+v", wc)
	}
	// A re-registration gets a different key: the old one stays dead.
	again, err := b.PD.Register(make([]byte, 4096), transport.LocalWrite|transport.RemoteWrite)
	testharness.Must(t, err)
	if again.RKey() == target.RKey() {
		t.Fatal("rkey reused at once")
	}
}

func TestSQDrain(t *testing.T) {
	// The ACKs held back are lost: the message completes through a
	// retransmission, which happens when the test moves the clock.
	clk := manualclock.New()
	a, b, net := testharness.MemPair(t, testharness.Options{Timeout: 16, Clock: clk})
	var hold sync.Mutex
	held := true
	net.SetFilter(b.Addr, a.Addr, func([]byte) mem.Verdict { // hold back ACKs
		hold.Lock()
		defer hold.Unlock()
		if held {
			return mem.Drop
		}
		return mem.Pass
	})
	for i := range 3 {
		testharness.Must(t, b.QP.PostRecv(&transport.RecvWR{SGL: []transport.SGE{b.MR.SGE(0, 8)}}))
		_ = i
	}
	testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: 1, Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{a.MR.SGE(0, 8)}}))
	sqd := transport.QPAttr{State: transport.SQD, EnSQDAsyncNotify: true}
	testharness.Must(t, a.QP.Modify(&sqd, transport.AttrState|transport.AttrEnSQDAsyncNotify))
	// In SQD, new work waits; the message in flight still completes.
	testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{a.MR.SGE(0, 8)}}))
	if attr, _ := a.QP.Query(); !attr.SQDraining {
		t.Fatal("not draining with a message in flight")
	}
	hold.Lock()
	held = false
	hold.Unlock()
	clk.Advance(4096 << 16 * time.Nanosecond) // timeout 16
	if wc := testharness.Wait(t, a.SCQ, 2*time.Second); wc.WRID != 1 {
		t.Fatalf("%+v", wc)
	}
	select {
	case e := <-a.Dev.Events():
		if e.Type != transport.EventSQDrained {
			t.Fatalf("event %v", e)
		}
	case <-time.After(time.Second):
		t.Fatal("no SQ drained event")
	}
	if a.SCQ.Len() != 0 {
		t.Fatal("new work ran in SQD")
	}
	rts := transport.QPAttr{State: transport.RTS}
	testharness.Must(t, a.QP.Modify(&rts, transport.AttrState))
	if wc := testharness.Wait(t, a.SCQ, 2*time.Second); wc.WRID != 2 || wc.Status != transport.Success {
		t.Fatalf("%+v", wc)
	}
}

// Many goroutines post on several QP pairs at once (run with -race).
func TestConcurrentPosting(t *testing.T) {
	const pairs, workers, msgs = 3, 4, 200
	// The link loses nothing, so no timer need ever fire: on the real
	// clock a machine too busy to run the receive path for 8 x 16.8 ms
	// ended a QP with retry exceeded, which is not what this tests.
	o := testharness.Options{SQDepth: 1024, RQDepth: 1024, CQDepth: 4096, Clock: manualclock.New()}
	o.MemDefaults()
	net := mem.NewNet(3)
	a := testharness.NewMemPeer(t, net, "10.0.0.1", o)
	b := testharness.NewMemPeer(t, net, "10.0.0.2", o)
	var wg sync.WaitGroup
	for p := range pairs {
		qa, qb := a.QP, b.QP
		if p > 0 {
			var err error
			qa, err = a.Dev.CreateQP(a.PD, transport.QPInitAttr{Type: transport.RC, SendCQ: a.SCQ, RecvCQ: a.RCQ, Cap: transport.QPCap{MaxSendWR: 1024, MaxRecvWR: 1024, MaxSendSGE: 1, MaxRecvSGE: 1}})
			testharness.Must(t, err)
			qb, err = b.Dev.CreateQP(b.PD, transport.QPInitAttr{Type: transport.RC, SendCQ: b.SCQ, RecvCQ: b.RCQ, Cap: transport.QPCap{MaxSendWR: 1024, MaxRecvWR: 1024, MaxSendSGE: 1, MaxRecvSGE: 1}})
			testharness.Must(t, err)
		}
		sa, sb := *a, *b
		sa.QP, sb.QP = qa, qb
		testharness.ConnectQP(t, &sa, &sb, o, 10, 20)
		testharness.ConnectQP(t, &sb, &sa, o, 20, 10)
		for range workers * msgs {
			testharness.Must(t, qb.PostRecv(&transport.RecvWR{SGL: []transport.SGE{b.MR.SGE(0, 64)}}))
		}
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range msgs {
					for {
						err := qa.PostSend(&transport.SendWR{WRID: uint64(w*msgs + i), Opcode: transport.WRSend, Flags: transport.Signaled,
							SGL: []transport.SGE{a.MR.SGE(0, 64)}})
						if err == nil {
							break
						}
						if !errors.Is(err, transport.ErrNoMem) {
							t.Error(err)
							return
						}
						time.Sleep(100 * time.Microsecond)
					}
				}
			}()
		}
	}
	// Meanwhile, poll both CQs from their own goroutines.
	count := func(c *transport.CQ, want int) {
		defer wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		wc := make([]transport.WC, 64)
		for got := 0; got < want; {
			n, err := c.PollWait(ctx, wc)
			if err != nil {
				t.Errorf("after %d of %d: %v", got, want, err)
				return
			}
			for _, x := range wc[:n] {
				if x.Status != transport.Success {
					t.Errorf("%+v", x)
				}
			}
			got += n
		}
	}
	wg.Add(2)
	go count(a.SCQ, pairs*workers*msgs)
	go count(b.RCQ, pairs*workers*msgs)
	wg.Wait()
}

// TestCommEstablished: the first request to reach a QP still in RTR raises
// the communication-established event (IBA 11.6.3.1), once; the QP
// receives and acknowledges as RTR allows.
func TestCommEstablished(t *testing.T) {
	o := testharness.Options{NoConnect: true}
	o.MemDefaults()
	a, b, _ := testharness.MemPair(t, o)
	testharness.ConnectQP(t, a, b, o, o.PSN, o.PSNB)
	testharness.ConnectQPTo(t, b, a, o, o.PSNB, o.PSN, transport.RTR)
	for i := range 2 {
		testharness.Must(t, b.QP.PostRecv(&transport.RecvWR{WRID: uint64(i), SGL: []transport.SGE{b.MR.SGE(0, 8)}}))
		testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: uint64(i), Opcode: transport.WRSend, Flags: transport.Signaled,
			SGL: []transport.SGE{a.MR.SGE(0, 8)}}))
		if wc := testharness.Wait(t, b.RCQ, 5*time.Second); wc.Status != transport.Success {
			t.Fatalf("receive %d: %+v", i, wc)
		}
		if wc := testharness.Wait(t, a.SCQ, 5*time.Second); wc.Status != transport.Success {
			t.Fatalf("send %d: %+v", i, wc)
		}
	}
	// The event is raised before the request is executed, so the receive
	// completions above come after every event the requests caused.
	est := 0
	for len(b.Dev.Events()) > 0 {
		e := <-b.Dev.Events()
		if e.Type != transport.EventCommEst || e.QP != b.QP {
			t.Fatalf("unexpected event %+v", e)
		}
		est++
	}
	if est != 1 {
		t.Fatalf("%d communication-established events, want 1", est)
	}
	if st := b.QP.State(); st != transport.RTR {
		t.Fatalf("state %v, want RTR", st)
	}
}
