package transport_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testharness"

	"github.com/goroce/goroce/transport"
)

// regAccess is what the fast registrations of these tests grant.
const regAccess = transport.LocalWrite | transport.RemoteWrite | transport.RemoteRead

// register posts a signaled fast registration of n bytes at off of f's
// allocation, addressed from iova, under f's next key, and waits for it.
func register(t *testing.T, s *testharness.Peer, f *transport.MR, wrID, off, n, iova uint64) uint32 {
	t.Helper()
	key := transport.IncRKey(f.RKey())
	testharness.Must(t, s.QP.PostSend(&transport.SendWR{WRID: wrID, Opcode: transport.WRRegMR, Flags: transport.Signaled,
		Reg: transport.RegMR{MR: f, Info: transport.RegInfo{Key: key, Offset: off, Length: n, IOVA: iova, Access: regAccess}}}))
	waitOp(t, s.SCQ, wrID, transport.OpRegMR, transport.Success)
	return key
}

// TestFastReg registers a range of an allocation by a work request, lets
// the peer WRITE and READ it under the new key at the chosen address,
// and invalidates it locally: the key then gets a remote access error.
func TestFastReg(t *testing.T) {
	a, b, _ := testharness.MemPair(t, testharness.Options{Access: mwAccess, RdAtomic: 4})
	backing := make([]byte, 64<<10)
	f, err := b.PD.AllocFastMR(backing)
	testharness.Must(t, err)
	if !f.Fast() || f.Len() != 0 {
		t.Fatalf("a new fast region: fast %v, %d bytes reachable", f.Fast(), f.Len())
	}
	const iova = 0x7000_0000
	key := register(t, b, f, 1, 4096, 8192, iova)
	if f.RKey() != key || f.LKey() != key || f.Addr() != iova || f.Len() != 8192 || f.Access() != regAccess {
		t.Fatalf("after REG_MR: key 0x%x/0x%x addr 0x%x len %d access %v", f.LKey(), f.RKey(), f.Addr(), f.Len(), f.Access())
	}
	if st := remoteWrite(t, a, key, iova, 8192, 7); st != transport.Success {
		t.Fatalf("write under the new key: %v", st)
	}
	if !bytes.Equal(backing[4096:4096+8192], a.Buf[:8192]) || !bytes.Equal(backing[:4096], make([]byte, 4096)) {
		t.Fatal("the write did not land at the registered range of the allocation")
	}
	clear(a.Buf[:8192])
	testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRRDMARead, Flags: transport.Signaled,
		SGL: []transport.SGE{a.MR.SGE(0, 8192)}, RemoteAddr: iova, RKey: key}))
	waitOp(t, a.SCQ, 2, transport.OpRDMARead, transport.Success)
	if !bytes.Equal(a.Buf[:8192], backing[4096:4096+8192]) {
		t.Fatal("read: bytes differ")
	}
	testharness.Must(t, b.QP.PostSend(&transport.SendWR{WRID: 3, Opcode: transport.WRLocalInv, Flags: transport.Signaled, InvRKey: key}))
	waitOp(t, b.SCQ, 3, transport.OpLocalInv, transport.Success)
	if st := remoteWrite(t, a, key, iova, 8, 1); st != transport.RemAccessErr {
		t.Fatalf("write under an invalidated key: %v", st)
	}
}

// TestFastRegRekeyPerIO registers, uses and has the peer invalidate the
// same region 300 times, as a storage target does per I/O, each under
// the next key (all 256 variants come round), and at the end a key the
// peer kept from the previous I/O gets a remote access error.
func TestFastRegRekeyPerIO(t *testing.T) {
	a, b, _ := testharness.MemPair(t, testharness.Options{Access: mwAccess, RdAtomic: 4})
	backing := make([]byte, 16<<10)
	f, err := b.PD.AllocFastMR(backing)
	testharness.Must(t, err)
	seen := map[uint32]bool{}
	var first uint32
	for i := range 300 {
		off := uint64(i%4) * 4096
		key := register(t, b, f, uint64(10+i), off, 4096, 0x1000)
		if i == 0 {
			first = key
		}
		seen[key] = true
		if st := remoteWrite(t, a, key, 0x1000+8, 64, byte(i)); st != transport.Success {
			t.Fatalf("I/O %d: write: %v", i, st)
		}
		if !bytes.Equal(backing[off+8:off+72], a.Buf[:64]) {
			t.Fatalf("I/O %d: bytes differ", i)
		}
		testharness.Must(t, b.QP.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{b.MR.SGE(0, 64)}}))
		testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: 5, Opcode: transport.WRSendWithInv, Flags: transport.Signaled, InvRKey: key}))
		waitOp(t, a.SCQ, 5, transport.OpSend, transport.Success)
		if wc := testharness.Wait(t, b.RCQ, 5*time.Second); wc.Flags&transport.WithInv == 0 || wc.InvalidatedRKey != key {
			t.Fatalf("I/O %d: receive %+v", i, wc)
		}
	}
	if len(seen) != 256 {
		t.Fatalf("%d distinct keys in 300 registrations, want all 256 variants", len(seen))
	}
	// Registered once more: the previous I/O's key, which the peer may
	// have kept, reaches nothing though the region is valid again.
	prev := f.RKey()
	key := register(t, b, f, 400, 0, 4096, 0x1000)
	if key == prev || key>>8 != first>>8 {
		t.Fatalf("key 0x%x after 0x%x (first 0x%x)", key, prev, first)
	}
	if st := remoteWrite(t, a, prev, 0x1000, 8, 1); st != transport.RemAccessErr {
		t.Fatalf("write under the previous I/O's key: %v", st)
	}
}

// TestFastRegErrors: each rule a registration breaks completes with
// LOC_QP_OP_ERR (rxe_do_local_ops) and flushes what follows; what can be
// told at post time fails the post.
func TestFastRegErrors(t *testing.T) {
	cases := []struct {
		name string
		info func(f *transport.MR) transport.RegInfo
		pre  func(t *testing.T, b *testharness.Peer, f *transport.MR) // before the registration
		pd   bool                                                     // the region is of another PD
	}{
		{name: "registered already", info: func(f *transport.MR) transport.RegInfo {
			return transport.RegInfo{Key: transport.IncRKey(f.RKey()), Length: 64, Access: regAccess}
		}, pre: func(t *testing.T, b *testharness.Peer, f *transport.MR) { register(t, b, f, 9, 0, 64, 0) }},
		{name: "key of another index", info: func(f *transport.MR) transport.RegInfo {
			return transport.RegInfo{Key: f.RKey() + 0x100, Length: 64, Access: regAccess}
		}},
		{name: "past the allocation", info: func(f *transport.MR) transport.RegInfo {
			return transport.RegInfo{Key: transport.IncRKey(f.RKey()), Offset: 4000, Length: 97, Access: regAccess}
		}},
		{name: "length 0", info: func(f *transport.MR) transport.RegInfo {
			return transport.RegInfo{Key: transport.IncRKey(f.RKey()), Access: regAccess}
		}},
		{name: "remote write without local write", info: func(f *transport.MR) transport.RegInfo {
			return transport.RegInfo{Key: transport.IncRKey(f.RKey()), Length: 64, Access: transport.RemoteWrite}
		}},
		{name: "region of another PD", pd: true, info: func(f *transport.MR) transport.RegInfo {
			return transport.RegInfo{Key: transport.IncRKey(f.RKey()), Length: 64, Access: regAccess}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, b, _ := testharness.MemPair(t, testharness.Options{Access: mwAccess})
			pd := b.PD
			if c.pd {
				pd = b.Dev.AllocPD()
			}
			f, err := pd.AllocFastMR(make([]byte, 4096))
			testharness.Must(t, err)
			if c.pre != nil {
				c.pre(t, b, f)
			}
			testharness.Must(t, b.QP.PostSend(&transport.SendWR{WRID: 1, Opcode: transport.WRRegMR, Flags: transport.Signaled, Reg: transport.RegMR{MR: f, Info: c.info(f)}}))
			testharness.Must(t, b.QP.PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRSend, Flags: transport.Signaled}))
			waitOp(t, b.SCQ, 1, transport.OpRegMR, transport.LocQPOpErr)
			waitOp(t, b.SCQ, 2, transport.OpSend, transport.WRFlushErr)
		})
	}
	t.Run("post checks", func(t *testing.T) {
		_, b, _ := testharness.MemPair(t, testharness.Options{Access: mwAccess})
		if err := b.QP.PostSend(&transport.SendWR{Opcode: transport.WRRegMR, Reg: transport.RegMR{MR: b.MR}}); !errors.Is(err, transport.ErrInvalid) {
			t.Errorf("REG_MR of a registered region: %v", err)
		}
		if err := b.QP.PostSend(&transport.SendWR{Opcode: transport.WRRegMR}); !errors.Is(err, transport.ErrInvalid) {
			t.Errorf("REG_MR without a region: %v", err)
		}
		if _, err := b.PD.AllocFastMR(nil); !errors.Is(err, transport.ErrEmpty) {
			t.Errorf("AllocFastMR(nil): %v", err)
		}
		if st := b.QP.State(); st != transport.RTS {
			t.Errorf("QP in %v", st)
		}
	})
}
