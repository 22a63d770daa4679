package transport_test

import (
	"bytes"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testharness"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

// mwAccess is what the pair's QPs and regions allow in these tests; each
// test's target region adds MWBind.
const mwAccess = transport.LocalWrite | transport.RemoteWrite | transport.RemoteRead | transport.RemoteAtomic

// mwPair connects two RC QPs and registers on b a 64 KiB target region
// with the bind right.
func mwPair(t *testing.T) (a, b *testharness.Peer, target *transport.MR) {
	t.Helper()
	a, b, _ = testharness.MemPair(t, testharness.Options{Access: mwAccess, RdAtomic: 4})
	target, err := b.PD.Register(make([]byte, 64<<10), transport.LocalWrite|transport.MWBind)
	if err != nil {
		t.Fatal(err)
	}
	return a, b, target
}

// waitOp waits for the next completion on c and checks its status and
// opcode.
func waitOp(t *testing.T, c *transport.CQ, wrID uint64, op transport.WCOpcode, st transport.WCStatus) {
	t.Helper()
	wc := testharness.Wait(t, c, 5*time.Second)
	if wc.WRID != wrID || wc.Opcode != op || wc.Status != st {
		t.Fatalf("completion %+v, want wr_id %d %v %v", wc, wrID, op, st)
	}
}

// remoteWrite WRITEs n bytes of a's region (filled with seed) to addr
// through rkey and returns the completion's status.
func remoteWrite(t *testing.T, a *testharness.Peer, rkey uint32, addr uint64, n int, seed byte) transport.WCStatus {
	t.Helper()
	fill(a.Buf[:n], seed)
	testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: 77, Opcode: transport.WRRDMAWrite, Flags: transport.Signaled,
		SGL: []transport.SGE{a.MR.SGE(0, n)}, RemoteAddr: addr, RKey: rkey}))
	wc := testharness.Wait(t, a.SCQ, 5*time.Second)
	if wc.WRID != 77 {
		t.Fatalf("write completion %+v", wc)
	}
	return wc.Status
}

// TestMWType1 binds a type 1 window with QP.BindMW, writes and reads
// through its rkey, checks that the window's range and rights (not the
// region's) bound the peer, and revokes it by binding again.
func TestMWType1(t *testing.T) {
	a, b, target := mwPair(t)
	w, err := b.PD.AllocMW(transport.MWType1)
	if err != nil {
		t.Fatal(err)
	}
	old := w.RKey()
	win := transport.BindInfo{MR: target, Addr: target.Addr() + 4096, Length: 8192, Access: transport.RemoteWrite}
	key, err := b.QP.BindMW(w, win, 1, transport.Signaled)
	if err != nil {
		t.Fatal(err)
	}
	if key == old || key>>8 != old>>8 {
		t.Fatalf("bind gave rkey 0x%x from 0x%x: want the same index, a new variant", key, old)
	}
	waitOp(t, b.SCQ, 1, transport.OpBindMW, transport.Success)
	if w.RKey() != key {
		t.Fatalf("RKey 0x%x after the bind, want 0x%x", w.RKey(), key)
	}
	if got, ok := w.Bound(); !ok || got != win {
		t.Fatalf("Bound() = %+v %v", got, ok)
	}
	// The whole window, through the new key: the bytes land in the region.
	if st := remoteWrite(t, a, key, win.Addr, 8192, 3); st != transport.Success {
		t.Fatalf("write through the window: %v", st)
	}
	if !bytes.Equal(target.Bytes()[4096:4096+8192], a.Buf[:8192]) {
		t.Fatal("write through the window: bytes differ")
	}
	if !bytes.Equal(target.Bytes()[:4096], make([]byte, 4096)) || !bytes.Equal(target.Bytes()[12288:16384], make([]byte, 4096)) {
		t.Fatal("write through the window changed bytes outside it")
	}
	// The window grants no READ, though the QP does.
	testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: 5, Opcode: transport.WRRDMARead, Flags: transport.Signaled,
		SGL: []transport.SGE{a.MR.SGE(0, 8)}, RemoteAddr: win.Addr, RKey: key}))
	waitOp(t, a.SCQ, 5, transport.OpRDMARead, transport.RemAccessErr)
	ev := waitEvent(t, b.Dev)
	if ev.Type != transport.EventQPAccessErr || !errors.Is(ev.Err, transport.ErrAccess) {
		t.Fatalf("event %v: %v", ev.Type, ev.Err)
	}
}

// waitEvent returns the device's next asynchronous event.
func waitEvent(t *testing.T, d *transport.Device) transport.Event {
	t.Helper()
	select {
	case ev := <-d.Events():
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no asynchronous event")
	}
	return transport.Event{}
}

// TestMWType1Range: one byte past the window, inside the region, is a
// remote access error (the window's range bounds the access).
func TestMWType1Range(t *testing.T) {
	a, b, target := mwPair(t)
	w, err := b.PD.AllocMW(transport.MWType1)
	if err != nil {
		t.Fatal(err)
	}
	key, err := b.QP.BindMW(w, transport.BindInfo{MR: target, Addr: target.Addr() + 4096, Length: 4096, Access: transport.RemoteWrite}, 1, transport.Signaled)
	testharness.Must(t, err)
	waitOp(t, b.SCQ, 1, transport.OpBindMW, transport.Success)
	if st := remoteWrite(t, a, key, target.Addr()+4097, 4096, 1); st != transport.RemAccessErr {
		t.Fatalf("write one byte past the window: %v", st)
	}
	if ev := waitEvent(t, b.Dev); !errors.Is(ev.Err, transport.ErrBounds) {
		t.Fatalf("event %v: %v", ev.Type, ev.Err)
	}
}

// TestMWType1Rebind: a second bind moves the window and retires the old
// key; a bind of length 0 unbinds it.
func TestMWType1Rebind(t *testing.T) {
	a, b, target := mwPair(t)
	w, err := b.PD.AllocMW(transport.MWType1)
	testharness.Must(t, err)
	k1, err := b.QP.BindMW(w, transport.BindInfo{MR: target, Addr: target.Addr(), Length: 4096, Access: transport.RemoteWrite}, 1, transport.Signaled)
	testharness.Must(t, err)
	k2, err := b.QP.BindMW(w, transport.BindInfo{MR: target, Addr: target.Addr() + 8192, Length: 4096, Access: transport.RemoteWrite}, 2, transport.Signaled)
	testharness.Must(t, err)
	if k2 != transport.IncRKey(k1) {
		t.Fatalf("second bind's key 0x%x, want 0x%x", k2, transport.IncRKey(k1))
	}
	waitOp(t, b.SCQ, 1, transport.OpBindMW, transport.Success)
	waitOp(t, b.SCQ, 2, transport.OpBindMW, transport.Success)
	if st := remoteWrite(t, a, k2, target.Addr()+8192, 4096, 9); st != transport.Success {
		t.Fatalf("write through the moved window: %v", st)
	}
	k3, err := b.QP.BindMW(w, transport.BindInfo{}, 3, transport.Signaled)
	testharness.Must(t, err)
	waitOp(t, b.SCQ, 3, transport.OpBindMW, transport.Success)
	if _, ok := w.Bound(); ok || w.RKey() != k3 {
		t.Fatalf("after unbinding: bound %v, rkey 0x%x want 0x%x", ok, w.RKey(), k3)
	}
	// The region can go once no window is bound to it.
	testharness.Must(t, target.Dereg())
	if st := remoteWrite(t, a, k2, target.Addr()+8192, 16, 9); st != transport.RemAccessErr {
		t.Fatalf("write through the old key: %v", st)
	}
}

// TestMWType2 binds a type 2 window by a work request, uses it, and
// invalidates it both ways: LOCAL_INV on the bound QP, and the peer's
// SEND with Invalidate.
func TestMWType2(t *testing.T) {
	a, b, target := mwPair(t)
	w, err := b.PD.AllocMW(transport.MWType2)
	testharness.Must(t, err)
	bind := func(wrID uint64, off uint64) uint32 {
		t.Helper()
		key := transport.IncRKey(w.RKey())
		testharness.Must(t, b.QP.PostSend(&transport.SendWR{WRID: wrID, Opcode: transport.WRBindMW, Flags: transport.Signaled,
			Bind: transport.MWBindWR{MW: w, RKey: key, Info: transport.BindInfo{MR: target, Addr: target.Addr() + off, Length: 1024,
				Access: transport.RemoteRead | transport.RemoteWrite | transport.RemoteAtomic}}}))
		waitOp(t, b.SCQ, wrID, transport.OpBindMW, transport.Success)
		return key
	}
	k1 := bind(1, 0)
	if st := remoteWrite(t, a, k1, target.Addr(), 1024, 4); st != transport.Success {
		t.Fatalf("write through the type 2 window: %v", st)
	}
	// An atomic through it.
	testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: 6, Opcode: transport.WRAtomicFetchAndAdd, Flags: transport.Signaled,
		SGL: []transport.SGE{a.MR.SGE(4096, 8)}, RemoteAddr: target.Addr() + 8, RKey: k1, CompareAdd: 1}))
	waitOp(t, a.SCQ, 6, transport.OpFetchAdd, transport.Success)

	// LOCAL_INV: the window is free, its key dead.
	testharness.Must(t, b.QP.PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRLocalInv, Flags: transport.Signaled, InvRKey: k1}))
	waitOp(t, b.SCQ, 2, transport.OpLocalInv, transport.Success)
	if _, ok := w.Bound(); ok {
		t.Fatal("bound after LOCAL_INV")
	}

	// Bound again at another place, with the next key; the peer's SEND
	// with Invalidate frees it.
	k2 := bind(3, 2048)
	if k2 == k1 {
		t.Fatal("the same key twice")
	}
	testharness.Must(t, b.QP.PostRecv(&transport.RecvWR{WRID: 4, SGL: []transport.SGE{b.MR.SGE(0, 64)}}))
	testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: 7, Opcode: transport.WRSendWithInv, Flags: transport.Signaled,
		SGL: []transport.SGE{a.MR.SGE(0, 8)}, InvRKey: k2}))
	waitOp(t, a.SCQ, 7, transport.OpSend, transport.Success)
	rc := testharness.Wait(t, b.RCQ, 5*time.Second)
	if rc.Status != transport.Success || rc.Flags&transport.WithInv == 0 || rc.InvalidatedRKey != k2 {
		t.Fatalf("receive %+v", rc)
	}
	if _, ok := w.Bound(); ok {
		t.Fatal("bound after SEND with Invalidate")
	}
	if st := remoteWrite(t, a, k2, target.Addr()+2048, 8, 1); st != transport.RemAccessErr {
		t.Fatalf("write through the invalidated key: %v", st)
	}
}

// TestMWType2OtherQP: a type 2 window is bound to the QP that bound it;
// a peer of another QP of the same PD gets a remote access error.
func TestMWType2OtherQP(t *testing.T) {
	o := testharness.Options{Access: mwAccess, RdAtomic: 4}
	o.MemDefaults()
	net := mem.NewNet(1)
	a := testharness.NewMemPeer(t, net, "10.0.0.1", o)
	b := testharness.NewMemPeer(t, net, "10.0.0.2", o)
	testharness.ConnectQP(t, a, b, o, 0, 0)
	testharness.ConnectQP(t, b, a, o, 0, 0)
	// A second QP on b, in the same PD, connected to c.
	c := testharness.NewMemPeer(t, net, "10.0.0.3", o)
	b2 := *b
	var err error
	b2.QP, err = b.Dev.CreateQP(b.PD, transport.QPInitAttr{Type: transport.RC, SendCQ: b.SCQ, RecvCQ: b.RCQ,
		Cap: transport.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	testharness.Must(t, err)
	testharness.ConnectQP(t, &b2, c, o, 0, 0)
	testharness.ConnectQP(t, c, &b2, o, 0, 0)

	target, err := b.PD.Register(make([]byte, 4096), transport.LocalWrite|transport.MWBind)
	testharness.Must(t, err)
	w, err := b.PD.AllocMW(transport.MWType2)
	testharness.Must(t, err)
	key := transport.IncRKey(w.RKey())
	testharness.Must(t, b.QP.PostSend(&transport.SendWR{WRID: 1, Opcode: transport.WRBindMW, Flags: transport.Signaled,
		Bind: transport.MWBindWR{MW: w, RKey: key, Info: transport.BindInfo{MR: target, Addr: target.Addr(), Length: 4096, Access: transport.RemoteWrite}}}))
	waitOp(t, b.SCQ, 1, transport.OpBindMW, transport.Success)
	if st := remoteWrite(t, c, key, target.Addr(), 64, 2); st != transport.RemAccessErr {
		t.Fatalf("write from another QP's peer: %v", st)
	}
	if ev := waitEvent(t, b.Dev); !errors.Is(ev.Err, transport.ErrMWQP) {
		t.Fatalf("event %v: %v", ev.Type, ev.Err)
	}
	if st := remoteWrite(t, a, key, target.Addr(), 64, 2); st != transport.Success {
		t.Fatalf("write from the bound QP's peer: %v", st)
	}
}

// TestMWBindErrors: each rule a bind or an invalidation breaks completes
// with the status libibverbs gives (MW_BIND_ERR, LOC_QP_OP_ERR), moves
// the QP to ERR and flushes what follows; what can be told at post time
// fails the post.
func TestMWBindErrors(t *testing.T) {
	type env struct {
		b      *testharness.Peer
		target *transport.MR // LocalWrite|MWBind
		w1, w2 *transport.MW
	}
	cases := []struct {
		name string
		post func(e *env) error // posts wr_id 1, signaled
		op   transport.WCOpcode
		st   transport.WCStatus
	}{
		{"region without the bind right", func(e *env) error {
			m, err := e.b.PD.Register(make([]byte, 4096), transport.LocalWrite)
			testharness.Must(t, err)
			return bind2(e.b, e.w2, transport.BindInfo{MR: m, Addr: m.Addr(), Length: 64, Access: transport.RemoteRead})
		}, transport.OpBindMW, transport.MWBindErr},
		{"past the region's end", func(e *env) error {
			return bind2(e.b, e.w2, transport.BindInfo{MR: e.target, Addr: e.target.Addr() + uint64(e.target.Len()) - 96, Length: 97, Access: transport.RemoteRead})
		}, transport.OpBindMW, transport.MWBindErr},
		{"before the region's start", func(e *env) error {
			return bind2(e.b, e.w2, transport.BindInfo{MR: e.target, Addr: e.target.Addr() - 1, Length: 8, Access: transport.RemoteRead})
		}, transport.OpBindMW, transport.MWBindErr},
		{"region of another PD", func(e *env) error {
			m, err := e.b.Dev.AllocPD().Register(make([]byte, 4096), transport.LocalWrite|transport.MWBind)
			testharness.Must(t, err)
			return bind2(e.b, e.w2, transport.BindInfo{MR: m, Addr: m.Addr(), Length: 64, Access: transport.RemoteRead})
		}, transport.OpBindMW, transport.MWBindErr},
		{"remote write on a region without local write", func(e *env) error {
			m, err := e.b.PD.Register(make([]byte, 4096), transport.MWBind)
			testharness.Must(t, err)
			return bind2(e.b, e.w2, transport.BindInfo{MR: m, Addr: m.Addr(), Length: 64, Access: transport.RemoteWrite})
		}, transport.OpBindMW, transport.MWBindErr},
		{"type 2 of length 0", func(e *env) error {
			return bind2(e.b, e.w2, transport.BindInfo{MR: e.target, Addr: e.target.Addr(), Length: 0, Access: transport.RemoteRead})
		}, transport.OpBindMW, transport.MWBindErr},
		{"type 2 bound twice", func(e *env) error {
			testharness.Must(t, e.b.QP.PostSend(&transport.SendWR{WRID: 9, Opcode: transport.WRBindMW,
				Bind: transport.MWBindWR{MW: e.w2, RKey: transport.IncRKey(e.w2.RKey()), Info: transport.BindInfo{MR: e.target, Addr: e.target.Addr(), Length: 64, Access: transport.RemoteRead}}}))
			return bind2(e.b, e.w2, transport.BindInfo{MR: e.target, Addr: e.target.Addr(), Length: 64, Access: transport.RemoteRead})
		}, transport.OpBindMW, transport.MWBindErr},
		{"rkey of another index", func(e *env) error {
			return e.b.QP.PostSend(&transport.SendWR{WRID: 1, Opcode: transport.WRBindMW, Flags: transport.Signaled,
				Bind: transport.MWBindWR{MW: e.w2, RKey: e.w2.RKey() + 0x100, Info: transport.BindInfo{MR: e.target, Addr: e.target.Addr(), Length: 64}}})
		}, transport.OpBindMW, transport.MWBindErr},
		{"zero-based type 1", func(e *env) error {
			_, err := e.b.QP.BindMW(e.w1, transport.BindInfo{MR: e.target, Addr: e.target.Addr(), Length: 64, Access: transport.RemoteRead | transport.ZeroBased}, 1, transport.Signaled)
			return err
		}, transport.OpBindMW, transport.MWBindErr},
		{"LOCAL_INV of a type 1 window", func(e *env) error {
			return e.b.QP.PostSend(&transport.SendWR{WRID: 1, Opcode: transport.WRLocalInv, Flags: transport.Signaled, InvRKey: e.w1.RKey()})
		}, transport.OpLocalInv, transport.LocQPOpErr},
		{"LOCAL_INV of a free type 2 window", func(e *env) error {
			return e.b.QP.PostSend(&transport.SendWR{WRID: 1, Opcode: transport.WRLocalInv, Flags: transport.Signaled, InvRKey: e.w2.RKey()})
		}, transport.OpLocalInv, transport.LocQPOpErr},
		{"LOCAL_INV of no key", func(e *env) error {
			return e.b.QP.PostSend(&transport.SendWR{WRID: 1, Opcode: transport.WRLocalInv, Flags: transport.Signaled, InvRKey: 0x7fff00})
		}, transport.OpLocalInv, transport.LocQPOpErr},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, b, target := mwPair(t)
			w1, err := b.PD.AllocMW(transport.MWType1)
			testharness.Must(t, err)
			w2, err := b.PD.AllocMW(transport.MWType2)
			testharness.Must(t, err)
			e := &env{b: b, target: target, w1: w1, w2: w2}
			testharness.Must(t, c.post(e))
			// A SEND behind it is flushed once the QP is in error.
			testharness.Must(t, b.QP.PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRSend, Flags: transport.Signaled}))
			wc := testharness.Wait(t, b.SCQ, 5*time.Second)
			if wc.WRID == 9 { // the case's first, good bind
				wc = testharness.Wait(t, b.SCQ, 5*time.Second)
			}
			if wc.WRID != 1 || wc.Opcode != c.op || wc.Status != c.st {
				t.Fatalf("completion %+v, want %v %v", wc, c.op, c.st)
			}
			if wc := testharness.Wait(t, b.SCQ, 5*time.Second); wc.WRID != 2 || wc.Status != transport.WRFlushErr {
				t.Fatalf("next completion %+v, want a flush", wc)
			}
			if st := b.QP.State(); st != transport.Err {
				t.Fatalf("QP in %v", st)
			}
		})
	}
}

// bind2 posts a signaled bind of the type 2 window w with wr_id 1.
func bind2(b *testharness.Peer, w *transport.MW, info transport.BindInfo) error {
	return b.QP.PostSend(&transport.SendWR{WRID: 1, Opcode: transport.WRBindMW, Flags: transport.Signaled,
		Bind: transport.MWBindWR{MW: w, RKey: transport.IncRKey(w.RKey()), Info: info}})
}

// TestMWPostChecks: what ibv_post_send refuses at once.
func TestMWPostChecks(t *testing.T) {
	_, b, target := mwPair(t)
	w1, err := b.PD.AllocMW(transport.MWType1)
	testharness.Must(t, err)
	w2, err := b.PD.AllocMW(transport.MWType2)
	testharness.Must(t, err)
	info := transport.BindInfo{MR: target, Addr: target.Addr(), Length: 64, Access: transport.RemoteRead}
	if err := b.QP.PostSend(&transport.SendWR{Opcode: transport.WRBindMW, Bind: transport.MWBindWR{MW: w1, RKey: transport.IncRKey(w1.RKey()), Info: info}}); !errors.Is(err, transport.ErrInvalid) {
		t.Errorf("BIND_MW work request of a type 1 window: %v", err)
	}
	if _, err := b.QP.BindMW(w2, info, 0, 0); !errors.Is(err, transport.ErrInvalid) || !errors.Is(err, transport.ErrMWType) {
		t.Errorf("BindMW of a type 2 window: %v", err)
	}
	if err := b.QP.PostSend(&transport.SendWR{Opcode: transport.WRBindMW}); !errors.Is(err, transport.ErrInvalid) {
		t.Errorf("BIND_MW without a window: %v", err)
	}
	if _, err := transport.MWType(3), error(nil); transport.MWType(3).String() != "MWType(3)" {
		t.Error(err)
	}
	if _, err := b.PD.AllocMW(3); !errors.Is(err, transport.ErrMWType) {
		t.Errorf("AllocMW(3): %v", err)
	}
	// Nothing was posted: the QP still works.
	if st := b.QP.State(); st != transport.RTS {
		t.Fatalf("QP in %v", st)
	}
}

// TestMWDeregAndDealloc: a region with a bound window cannot be
// deregistered; deallocating the window frees it and kills its key; a
// second Dealloc fails.
func TestMWDeregAndDealloc(t *testing.T) {
	a, b, target := mwPair(t)
	w, err := b.PD.AllocMW(transport.MWType1)
	testharness.Must(t, err)
	key, err := b.QP.BindMW(w, transport.BindInfo{MR: target, Addr: target.Addr(), Length: 64, Access: transport.RemoteWrite}, 1, transport.Signaled)
	testharness.Must(t, err)
	waitOp(t, b.SCQ, 1, transport.OpBindMW, transport.Success)
	if err := target.Dereg(); !errors.Is(err, transport.ErrMWBound) {
		t.Fatalf("Dereg with a bound window: %v", err)
	}
	if err := b.PD.Dealloc(); !errors.Is(err, transport.ErrPDBusy) {
		t.Fatalf("PD dealloc with a window: %v", err)
	}
	testharness.Must(t, w.Dealloc())
	if err := w.Dealloc(); !errors.Is(err, transport.ErrInvalidKey) {
		t.Fatalf("second Dealloc: %v", err)
	}
	testharness.Must(t, target.Dereg())
	if st := remoteWrite(t, a, key, target.Addr(), 8, 1); st != transport.RemAccessErr {
		t.Fatalf("write through a deallocated window: %v", st)
	}
}

// TestMWOrderAndRetransmission: a bind executes once, in send-queue
// order, and completes after the WRITE before it, though that WRITE's
// packets are lost and sent again after the bind has executed.
func TestMWOrderAndRetransmission(t *testing.T) {
	o := testharness.Options{Access: mwAccess, RdAtomic: 4, Timeout: 10}
	a, b, net := testharness.MemPair(t, o)
	target, err := a.PD.Register(make([]byte, 4096), transport.LocalWrite|transport.MWBind)
	testharness.Must(t, err)
	w, err := a.PD.AllocMW(transport.MWType2)
	testharness.Must(t, err)
	// Lose a's first two WRITE packets once.
	var lost atomic.Int32
	net.SetFilter(a.Addr, b.Addr, func(d []byte) mem.Verdict {
		// IPv4 and UDP headers, then the BTH's opcode: RC WRITE FIRST..ONLY.
		if op := bth.OpCode(d[28]); op >= bth.RCWriteFirst && op <= bth.RCWriteOnlyImm && lost.Load() < 2 {
			lost.Add(1)
			return mem.Drop
		}
		return mem.Pass
	})
	fill(a.Buf[:8192], 5)
	key := transport.IncRKey(w.RKey())
	testharness.Must(t, a.QP.PostSendList([]transport.SendWR{
		{WRID: 1, Opcode: transport.WRRDMAWrite, Flags: transport.Signaled, SGL: []transport.SGE{a.MR.SGE(0, 8192)}, RemoteAddr: b.MR.Addr(), RKey: b.MR.RKey()},
		{WRID: 2, Opcode: transport.WRBindMW, Flags: transport.Signaled, Bind: transport.MWBindWR{MW: w, RKey: key,
			Info: transport.BindInfo{MR: target, Addr: target.Addr(), Length: 4096, Access: transport.RemoteRead}}},
		{WRID: 3, Opcode: transport.WRRDMAWrite, Flags: transport.Signaled, SGL: []transport.SGE{a.MR.SGE(0, 100)}, RemoteAddr: b.MR.Addr() + 8192, RKey: b.MR.RKey()},
	}))
	waitOp(t, a.SCQ, 1, transport.OpRDMAWrite, transport.Success)
	waitOp(t, a.SCQ, 2, transport.OpBindMW, transport.Success)
	waitOp(t, a.SCQ, 3, transport.OpRDMAWrite, transport.Success)
	if lost.Load() != 2 {
		t.Fatalf("%d packets lost, want 2", lost.Load())
	}
	if !bytes.Equal(b.Buf[:8192], a.Buf[:8192]) || !bytes.Equal(b.Buf[8192:8292], a.Buf[:100]) {
		t.Fatal("data differs")
	}
	// b reads through the window a bound once.
	fill(target.Bytes(), 8)
	testharness.Must(t, b.QP.PostSend(&transport.SendWR{WRID: 4, Opcode: transport.WRRDMARead, Flags: transport.Signaled,
		SGL: []transport.SGE{b.MR.SGE(0, 4096)}, RemoteAddr: target.Addr(), RKey: key}))
	waitOp(t, b.SCQ, 4, transport.OpRDMARead, transport.Success)
	if !bytes.Equal(b.Buf[:4096], target.Bytes()) {
		t.Fatal("read through the window: bytes differ")
	}
}

// FuzzLocalWR posts binds, local invalidations and fast registrations
// drawn from the input on one QP, with the peer's WRITEs through whatever
// key the input picks in between, and checks that:
//   - every work request completes once, with a status libibverbs gives
//     for it (success, MW_BIND_ERR, LOC_QP_OP_ERR; the peer's WRITE
//     success or a remote access error), and the first error ends the
//     sequence with the QP in ERR;
//   - a WRITE that succeeds lands inside a range some bind or
//     registration of this input granted, and no byte of the target
//     region or the fast allocation outside those ranges ever changes.
//
// Each input starts from fresh QPs (RESET, then connected again) and
// zeroed memory, so inputs do not depend on each other.
func FuzzLocalWR(f *testing.F) {
	f.Add([]byte{0, 0, 1, 4, 2, 4, 0, 1, 8, 16})
	f.Add([]byte{1, 0, 2, 3, 1, 4, 1, 0, 8, 9, 2, 1})
	f.Add([]byte{3, 0, 0, 4, 3, 4, 2, 0, 8, 1, 2, 2, 4, 2, 0, 8})
	// A window of 64 bytes at 128 with remote write: a WRITE inside it,
	// then one at its end (which must get a remote access error).
	f.Add([]byte{0, 2, 1, 3, 4, 0, 5, 20, 4, 0, 6, 20})
	// The same through a fast registration of 64 bytes at 128.
	f.Add([]byte{3, 0, 2, 1, 3, 4, 2, 1, 20, 4, 2, 2, 20})
	o := testharness.Options{Access: mwAccess, RdAtomic: 4}
	o.MemDefaults()
	net := mem.NewNet(1)
	a := testharness.NewMemPeer(f, net, "10.0.0.1", o)
	b := testharness.NewMemPeer(f, net, "10.0.0.2", o)
	target, err := b.PD.Register(make([]byte, 16<<10), transport.LocalWrite|transport.MWBind)
	testharness.Must(f, err)
	backing := make([]byte, 16<<10)
	var fast *transport.MR
	var w1, w2 *transport.MW
	reset := func(t *testing.T) {
		// Fresh windows and a fresh fast region: what an earlier input
		// bound or registered must not reach this one's memory.
		if fast != nil {
			testharness.Must(t, w1.Dealloc())
			testharness.Must(t, w2.Dealloc())
			testharness.Must(t, fast.Dereg())
		}
		var err error
		w1, err = b.PD.AllocMW(transport.MWType1)
		testharness.Must(t, err)
		w2, err = b.PD.AllocMW(transport.MWType2)
		testharness.Must(t, err)
		fast, err = b.PD.AllocFastMR(backing)
		testharness.Must(t, err)
		for _, s := range []*testharness.Peer{a, b} {
			testharness.Must(t, s.QP.Modify(&transport.QPAttr{State: transport.Reset}, transport.AttrState))
			for _, c := range []*transport.CQ{s.SCQ, s.RCQ} {
				var wc [16]transport.WC
				for n, _ := c.Poll(wc[:]); n > 0; n, _ = c.Poll(wc[:]) {
				}
			}
		}
		testharness.ConnectQP(t, a, b, o, 0, 0)
		testharness.ConnectQP(t, b, a, o, 0, 0)
	}
	type span struct{ lo, hi int } // granted bytes of target (0) or the fast allocation (1)
	f.Fuzz(func(t *testing.T, in []byte) {
		reset(t)
		clear(target.Bytes())
		clear(fast.Backing())
		var granted [2][]span
		next := func() int {
			if len(in) == 0 {
				return 0
			}
			v := in[0]
			in = in[1:]
			return int(v)
		}
		wrID := uint64(0)
		// waitB checks the completion of b's work request wrID.
		waitB := func(op transport.WCOpcode, ok ...transport.WCStatus) transport.WCStatus {
			t.Helper()
			wc := testharness.Wait(t, b.SCQ, 10*time.Second)
			if wc.WRID != wrID || wc.Opcode != op && wc.Status == transport.Success {
				t.Fatalf("completion %+v, want wr_id %d %v", wc, wrID, op)
			}
			for _, s := range ok {
				if wc.Status == s {
					return s
				}
			}
			t.Fatalf("%v completed %v", op, wc.Status)
			return 0
		}
		access := func(v int) transport.Access {
			return transport.Access(v) & (transport.RemoteRead | transport.RemoteWrite | transport.RemoteAtomic | transport.LocalWrite | transport.ZeroBased)
		}
		for steps := 0; len(in) > 0 && steps < 12; steps++ {
			wrID++
			switch next() % 5 {
			case 0: // bind the type 1 window
				off, n, acc := next()*64, next()*64, access(next())
				info := transport.BindInfo{MR: target, Addr: target.Addr() + uint64(off), Length: uint64(n), Access: acc}
				if _, err := b.QP.BindMW(w1, info, wrID, transport.Signaled); err != nil {
					t.Fatal(err)
				}
				if waitB(transport.OpBindMW, transport.Success, transport.MWBindErr) != transport.Success {
					return
				}
				if n > 0 {
					granted[0] = append(granted[0], span{off, off + n})
				}
			case 1: // bind the type 2 window, with the next key or another
				key := transport.IncRKey(w2.RKey())
				if v := next(); v%4 == 3 {
					key = w2.RKey()&^0xff | uint32(v)
				}
				off, n, acc := next()*64, next()*64, access(next())
				info := transport.BindInfo{MR: target, Addr: target.Addr() + uint64(off), Length: uint64(n), Access: acc}
				testharness.Must(t, b.QP.PostSend(&transport.SendWR{WRID: wrID, Opcode: transport.WRBindMW, Flags: transport.Signaled, Bind: transport.MWBindWR{MW: w2, RKey: key, Info: info}}))
				if waitB(transport.OpBindMW, transport.Success, transport.MWBindErr) != transport.Success {
					return
				}
				granted[0] = append(granted[0], span{off, off + n})
			case 2: // local invalidate of one of the keys
				keys := []uint32{w1.RKey(), w2.RKey(), fast.RKey(), target.RKey(), uint32(next()) << 8}
				testharness.Must(t, b.QP.PostSend(&transport.SendWR{WRID: wrID, Opcode: transport.WRLocalInv, Flags: transport.Signaled, InvRKey: keys[next()%len(keys)]}))
				if waitB(transport.OpLocalInv, transport.Success, transport.LocQPOpErr) != transport.Success {
					return
				}
			case 3: // fast registration of a range of the allocation
				key := transport.IncRKey(fast.RKey())
				if v := next(); v%4 == 3 {
					key = fast.RKey()&^0xff | uint32(v)
				}
				off, n, acc := next()*64, next()*64, access(next())
				testharness.Must(t, b.QP.PostSend(&transport.SendWR{WRID: wrID, Opcode: transport.WRRegMR, Flags: transport.Signaled, Reg: transport.RegMR{MR: fast,
					Info: transport.RegInfo{Key: key, Offset: uint64(off), Length: uint64(n), IOVA: 0x100000, Access: acc}}}))
				if waitB(transport.OpRegMR, transport.Success, transport.LocQPOpErr) != transport.Success {
					return
				}
				granted[1] = append(granted[1], span{off, off + n})
			case 4: // the peer WRITEs through a key at an address
				k := next() % 3
				rkey := []uint32{w1.RKey(), w2.RKey(), fast.RKey()}[k]
				base := target.Addr()
				if k == 2 {
					base = 0x100000
				}
				addr, n := base+uint64(next()*32), next()%96+1
				st := remoteWrite(t, a, rkey, addr, n, byte(steps+1))
				if st != transport.Success && st != transport.RemAccessErr {
					t.Fatalf("the peer's WRITE completed %v", st)
				}
				if st != transport.Success {
					return
				}
			}
		}
		for i, buf := range [][]byte{target.Bytes(), fast.Backing()} {
			for j, c := range buf {
				if c == 0 {
					continue
				}
				inside := false
				for _, g := range granted[i] {
					// A zero-based window's bytes start at its Addr too.
					if j >= g.lo && j < g.hi {
						inside = true
					}
				}
				if !inside {
					t.Fatalf("byte %d of %s changed outside every granted range %v", j, []string{"the target", "the fast allocation"}[i], granted[i])
				}
			}
		}
	})
}

// TestMWInvalidateWhileInUse invalidates a type 2 window while the peer's
// three-packet WRITE through it is half done: the first packet, taken
// before the LOCAL_INV, landed; the rest, sent again after it, get a
// remote access error, and not a byte of them reaches the region.
func TestMWInvalidateWhileInUse(t *testing.T) {
	a, b, net := testharness.MemPair(t, testharness.Options{Access: mwAccess, RdAtomic: 4, Timeout: 10})
	target, err := b.PD.Register(make([]byte, 8192), transport.LocalWrite|transport.MWBind)
	testharness.Must(t, err)
	w, err := b.PD.AllocMW(transport.MWType2)
	testharness.Must(t, err)
	key := transport.IncRKey(w.RKey())
	testharness.Must(t, b.QP.PostSend(&transport.SendWR{WRID: 1, Opcode: transport.WRBindMW, Flags: transport.Signaled,
		Bind: transport.MWBindWR{MW: w, RKey: key, Info: transport.BindInfo{MR: target, Addr: target.Addr(), Length: 4096, Access: transport.RemoteWrite}}}))
	waitOp(t, b.SCQ, 1, transport.OpBindMW, transport.Success)
	// Only the WRITE's FIRST packet gets through until the window is gone.
	var hold atomic.Bool
	hold.Store(true)
	net.SetFilter(a.Addr, b.Addr, func(d []byte) mem.Verdict {
		if op := bth.OpCode(d[28]); hold.Load() && (op == bth.RCWriteMiddle || op == bth.RCWriteLast) {
			return mem.Drop
		}
		return mem.Pass
	})
	at, _ := b.QP.Query()
	fill(a.Buf[:3072], 9)
	testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRRDMAWrite, Flags: transport.Signaled,
		SGL: []transport.SGE{a.MR.SGE(0, 3072)}, RemoteAddr: target.Addr(), RKey: key}))
	// The FIRST has been taken once b's responder expects the next PSN:
	// it places the data and moves on under the QP's lock, which Query
	// takes. (Counted by the device, rcvd_pkts, it may not have reached
	// the QP yet: under load the invalidation then came first.)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if now, _ := b.QP.Query(); now.RQPSN != at.RQPSN {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the WRITE's first packet never arrived")
		}
		time.Sleep(time.Millisecond)
	}
	testharness.Must(t, b.QP.PostSend(&transport.SendWR{WRID: 3, Opcode: transport.WRLocalInv, Flags: transport.Signaled, InvRKey: key}))
	waitOp(t, b.SCQ, 3, transport.OpLocalInv, transport.Success)
	hold.Store(false)
	waitOp(t, a.SCQ, 2, transport.OpRDMAWrite, transport.RemAccessErr)
	if !bytes.Equal(target.Bytes()[:1024], a.Buf[:1024]) {
		t.Fatal("the first packet, taken before the invalidation, did not land")
	}
	if !bytes.Equal(target.Bytes()[1024:], make([]byte, 8192-1024)) {
		t.Fatal("bytes after the invalidation reached the region")
	}
}
