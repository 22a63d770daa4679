package transport_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testharness"

	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

// TestCloseFlushesAndWakes is issue 14 item 1: Close with work
// outstanding flushes every work request, wakes every waiter, and leaves
// a completion queued before it to be polled.
func TestCloseFlushesAndWakes(t *testing.T) {
	a, b, net := testharness.MemPair(t, testharness.Options{})
	// One SEND completes before Close and stays queued, unpolled.
	testharness.Must(t, b.QP.PostRecv(&transport.RecvWR{WRID: 50, SGL: []transport.SGE{b.MR.SGE(0, 64)}}))
	testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: 1, Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{a.MR.SGE(0, 8)}}))
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	testharness.Must(t, a.SCQ.Wait(ctx))
	// Then the link to b loses everything: three sends stay outstanding.
	net.SetFilter(a.Addr, b.Addr, func([]byte) mem.Verdict { return mem.Drop })
	for i := range 3 {
		testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: uint64(2 + i), Opcode: transport.WRSend, SGL: []transport.SGE{a.MR.SGE(0, 8)}}))
	}
	for i := range 2 {
		testharness.Must(t, a.QP.PostRecv(&transport.RecvWR{WRID: uint64(100 + i), SGL: []transport.SGE{a.MR.SGE(0, 8)}}))
	}
	idle := a.Dev.CreateCQ(4) // no QP uses it: only Close can wake its waiters
	idle.ReqNotify(false)
	woke := make(chan string, 3)
	go func() {
		var wc [1]transport.WC
		_, err := idle.PollWait(context.Background(), wc[:])
		if errors.Is(err, transport.ErrClosed) {
			woke <- "PollWait"
		} else {
			woke <- "PollWait returned " + fmtErr(err)
		}
	}()
	go func() {
		for range a.Dev.Events() { // an SRQ-less QP raises none on the way
		}
		woke <- "Events"
	}()
	go func() {
		_, ok := <-idle.Events()
		if !ok {
			woke <- "CQ Events"
		} else {
			woke <- "CQ Events delivered an event"
		}
	}()

	testharness.Must(t, a.Dev.Close())

	for range 3 {
		select {
		case w := <-woke:
			if w != "PollWait" && w != "Events" && w != "CQ Events" {
				t.Error(w)
			}
		case <-time.After(waitBound):
			t.Fatal("a waiter was still blocked after Close")
		}
	}
	// The completion queued before Close, then the flushes in order, then
	// ErrClosed (libibverbs: a CQ drains until destroyed).
	want := []transport.WC{{WRID: 1, Status: transport.Success}, {WRID: 2, Status: transport.WRFlushErr},
		{WRID: 3, Status: transport.WRFlushErr}, {WRID: 4, Status: transport.WRFlushErr}}
	drain(t, a.SCQ, want)
	drain(t, a.RCQ, []transport.WC{{WRID: 100, Status: transport.WRFlushErr}, {WRID: 101, Status: transport.WRFlushErr}})
	if st := a.QP.State(); st != transport.Err {
		t.Errorf("QP state %v after Close, want ERR", st)
	}
}

// drain polls c one completion at a time and expects want (WRID and
// status), then an error wrapping ErrClosed, from Poll and from PollWait.
func drain(t *testing.T, c *transport.CQ, want []transport.WC) {
	t.Helper()
	var wc [1]transport.WC
	for i, w := range want {
		n, err := c.Poll(wc[:])
		if n != 1 || err != nil || wc[0].WRID != w.WRID || wc[0].Status != w.Status {
			t.Fatalf("completion %d: n=%d err=%v %+v, want WRID %d %v", i, n, err, wc[0], w.WRID, w.Status)
		}
	}
	if n, err := c.Poll(wc[:]); n != 0 || !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Poll after the last completion: n=%d err=%v, want ErrClosed", n, err)
	}
	if n, err := c.PollWait(context.Background(), wc[:]); n != 0 || !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("PollWait after the last completion: n=%d err=%v, want ErrClosed", n, err)
	}
}

// TestCallsAfterClose: every call that creates, posts, modifies,
// registers, destroys or waits returns an error wrapping ErrClosed.
func TestCallsAfterClose(t *testing.T) {
	a, b, _ := testharness.MemPair(t, testharness.Options{})
	d := a.Dev
	srq, err := d.CreateSRQ(a.PD, transport.SRQAttr{MaxWR: 4, MaxSGE: 1})
	testharness.Must(t, err)
	g, _ := b.Dev.GID(1)
	ah, err := d.CreateAH(a.PD, transport.AHAttr{DGID: g, SGIDIndex: 1, PortNum: 1})
	testharness.Must(t, err)
	spare, err := d.CreateQP(a.PD, transport.QPInitAttr{Type: transport.RC, SendCQ: a.SCQ, RecvCQ: a.RCQ,
		Cap: transport.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	testharness.Must(t, err)
	gone, err := d.CreateQP(a.PD, transport.QPInitAttr{Type: transport.RC, SendCQ: a.SCQ, RecvCQ: a.RCQ,
		Cap: transport.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	testharness.Must(t, err)
	testharness.Must(t, d.DestroyQP(gone)) // destroyed before Close: Close never sees it
	testharness.Must(t, d.Close())
	testharness.Must(t, d.Close()) // idempotent

	send := transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{a.MR.SGE(0, 8)}}
	recv := transport.RecvWR{SGL: []transport.SGE{a.MR.SGE(0, 8)}}
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	var wc [1]transport.WC
	calls := []struct {
		name string
		call func() error
	}{
		{"PostSend", func() error { return a.QP.PostSend(&send) }},
		{"PostSendList", func() error { return a.QP.PostSendList([]transport.SendWR{send}) }},
		{"PostRecv", func() error { return a.QP.PostRecv(&recv) }},
		{"PostRecvList", func() error { return a.QP.PostRecvList([]transport.RecvWR{recv}) }},
		{"Modify", func() error {
			at := transport.QPAttr{State: transport.Reset}
			return a.QP.Modify(&at, transport.AttrState)
		}},
		{"the QP's own destroy", func() error { return transport.DestroyQP(spare) }},
		{"PostSend to a QP destroyed before Close", func() error { return gone.PostSend(&send) }},
		{"DestroyQP", func() error { return d.DestroyQP(a.QP) }},
		{"DestroyCQ", func() error { return d.DestroyCQ(a.SCQ) }},
		{"CreateQP", func() error {
			_, err := d.CreateQP(a.PD, transport.QPInitAttr{Type: transport.RC, SendCQ: a.SCQ, RecvCQ: a.RCQ, Cap: transport.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
			return err
		}},
		{"Register", func() error { _, err := a.PD.Register(make([]byte, 64), transport.LocalWrite); return err }},
		{"RegisterIOVA", func() error { _, err := a.PD.RegisterIOVA(make([]byte, 64), 0, transport.LocalWrite); return err }},
		{"Register in a PD allocated after Close", func() error {
			_, err := d.AllocPD().Register(make([]byte, 64), transport.LocalWrite)
			return err
		}},
		{"Dereg", a.MR.Dereg},
		{"Dealloc", a.PD.Dealloc},
		{"Poll", func() error { _, err := a.SCQ.Poll(wc[:]); return err }},
		{"PollWait", func() error { _, err := a.RCQ.PollWait(ctx, wc[:]); return err }},
		{"Wait", func() error { return a.SCQ.Wait(ctx) }},
		{"Resize", func() error { return a.SCQ.Resize(64) }},
		{"Poll of a CQ created after Close", func() error { _, err := d.CreateCQ(4).Poll(wc[:]); return err }},
		{"CreateSRQ", func() error { _, err := d.CreateSRQ(a.PD, transport.SRQAttr{MaxWR: 4}); return err }},
		{"SRQ.PostRecv", func() error { return srq.PostRecv(&recv) }},
		{"SRQ.PostRecvList", func() error { return srq.PostRecvList([]transport.RecvWR{recv}) }},
		{"SRQ.Modify", func() error { return srq.Modify(transport.SRQAttr{SRQLimit: 1}, transport.SRQLimit) }},
		{"SRQ.Destroy", srq.Destroy},
		{"CreateAH", func() error {
			_, err := d.CreateAH(a.PD, transport.AHAttr{DGID: g, SGIDIndex: 1, PortNum: 1})
			return err
		}},
		{"AH.Destroy", ah.Destroy},
	}
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, transport.ErrClosed) {
			t.Errorf("%s after Close: %v, want an error wrapping ErrClosed", c.name, err)
		}
	}
	// The other device is untouched.
	testharness.Must(t, b.QP.PostRecv(&transport.RecvWR{SGL: []transport.SGE{b.MR.SGE(0, 8)}}))
}

// TestCloseRacesPostsAndPolls closes a device while goroutines post
// WRITEs and receives and others poll, and checks that every work request
// a post accepted completed exactly once (success or flush) and that
// every goroutine ended with ErrClosed. Run it under -race.
func TestCloseRacesPostsAndPolls(t *testing.T) {
	a, b, _ := testharness.MemPair(t, testharness.Options{})
	var posted, completed [2]atomic.Int64 // [0] sends, [1] receives
	started := make(chan struct{})
	var startOnce sync.Once
	var wg sync.WaitGroup
	fail := make(chan string, 16)
	post := func(i int, f func() error) {
		defer wg.Done()
		for {
			err := f()
			switch {
			case err == nil:
				if posted[i].Add(1) == 200 {
					startOnce.Do(func() { close(started) })
				}
			case errors.Is(err, transport.ErrNoMem):
				// Queue full: wait for the pollers, as a program would.
				runtime.Gosched()
			case errors.Is(err, transport.ErrClosed):
				return
			default:
				fail <- "post: " + err.Error()
				return
			}
		}
	}
	for range 2 {
		wg.Add(2)
		go post(0, func() error {
			return a.QP.PostSend(&transport.SendWR{Opcode: transport.WRRDMAWrite, Flags: transport.Signaled,
				SGL: []transport.SGE{a.MR.SGE(0, 64)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()})
		})
		go post(1, func() error { return a.QP.PostRecv(&transport.RecvWR{SGL: []transport.SGE{a.MR.SGE(0, 64)}}) })
	}
	for i, c := range []*transport.CQ{a.SCQ, a.RCQ} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wc := make([]transport.WC, 16)
			for {
				n, err := c.PollWait(context.Background(), wc)
				for _, w := range wc[:n] {
					if w.Status != transport.Success && w.Status != transport.WRFlushErr {
						fail <- "completion " + w.Status.String()
					}
				}
				completed[i].Add(int64(n))
				if err != nil {
					if !errors.Is(err, transport.ErrClosed) {
						fail <- "poll: " + err.Error()
					}
					return
				}
			}
		}()
	}
	select {
	case <-started:
	case <-time.After(waitBound):
		t.Fatal("posts did not get going")
	}
	testharness.Must(t, a.Dev.Close())
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(waitBound):
		t.Fatal("a poster or poller was still running after Close")
	}
	close(fail)
	for f := range fail {
		t.Error(f)
	}
	for i, what := range []string{"send", "receive"} {
		if p, c := posted[i].Load(), completed[i].Load(); p != c {
			t.Errorf("%d %ss posted, %d completed", p, what, c)
		}
	}
}
