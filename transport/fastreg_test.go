package device_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest"

	"github.com/goroce/goroce/cq"
	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/qp"
)

// regAccess is what the fast registrations of these tests grant.
const regAccess = mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead

// register posts a signaled fast registration of n bytes at off of f's
// allocation, addressed from iova, under f's next key, and waits for it.
func register(t *testing.T, s *rdmatest.Peer, f *mr.MR, wrID, off, n, iova uint64) uint32 {
	t.Helper()
	key := mr.IncRKey(f.RKey())
	rdmatest.Must(t, s.QP.PostSend(&qp.SendWR{WRID: wrID, Opcode: qp.WRRegMR, Flags: qp.Signaled,
		Reg: qp.RegMR{MR: f, Info: mr.RegInfo{Key: key, Offset: off, Length: n, IOVA: iova, Access: regAccess}}}))
	waitOp(t, s.SCQ, wrID, cq.OpRegMR, cq.Success)
	return key
}

// TestFastReg registers a range of an allocation by a work request, lets
// the peer WRITE and READ it under the new key at the chosen address,
// and invalidates it locally: the key then gets a remote access error.
func TestFastReg(t *testing.T) {
	a, b, _ := rdmatest.MemPair(t, rdmatest.Options{Access: mwAccess, RdAtomic: 4})
	backing := make([]byte, 64<<10)
	f, err := b.PD.AllocFastMR(backing)
	rdmatest.Must(t, err)
	if !f.Fast() || f.Len() != 0 {
		t.Fatalf("a new fast region: fast %v, %d bytes reachable", f.Fast(), f.Len())
	}
	const iova = 0x7000_0000
	key := register(t, b, f, 1, 4096, 8192, iova)
	if f.RKey() != key || f.LKey() != key || f.Addr() != iova || f.Len() != 8192 || f.Access() != regAccess {
		t.Fatalf("after REG_MR: key 0x%x/0x%x addr 0x%x len %d access %v", f.LKey(), f.RKey(), f.Addr(), f.Len(), f.Access())
	}
	if st := remoteWrite(t, a, key, iova, 8192, 7); st != cq.Success {
		t.Fatalf("write under the new key: %v", st)
	}
	if !bytes.Equal(backing[4096:4096+8192], a.Buf[:8192]) || !bytes.Equal(backing[:4096], make([]byte, 4096)) {
		t.Fatal("the write did not land at the registered range of the allocation")
	}
	clear(a.Buf[:8192])
	rdmatest.Must(t, a.QP.PostSend(&qp.SendWR{WRID: 2, Opcode: qp.WRRDMARead, Flags: qp.Signaled,
		SGL: []mr.SGE{a.MR.SGE(0, 8192)}, RemoteAddr: iova, RKey: key}))
	waitOp(t, a.SCQ, 2, cq.OpRDMARead, cq.Success)
	if !bytes.Equal(a.Buf[:8192], backing[4096:4096+8192]) {
		t.Fatal("read: bytes differ")
	}
	rdmatest.Must(t, b.QP.PostSend(&qp.SendWR{WRID: 3, Opcode: qp.WRLocalInv, Flags: qp.Signaled, InvRKey: key}))
	waitOp(t, b.SCQ, 3, cq.OpLocalInv, cq.Success)
	if st := remoteWrite(t, a, key, iova, 8, 1); st != cq.RemAccessErr {
		t.Fatalf("write under an invalidated key: %v", st)
	}
}

// TestFastRegRekeyPerIO registers, uses and has the peer invalidate the
// same region 300 times, as a storage target does per I/O, each under
// the next key (all 256 variants come round), and at the end a key the
// peer kept from the previous I/O gets a remote access error.
func TestFastRegRekeyPerIO(t *testing.T) {
	a, b, _ := rdmatest.MemPair(t, rdmatest.Options{Access: mwAccess, RdAtomic: 4})
	backing := make([]byte, 16<<10)
	f, err := b.PD.AllocFastMR(backing)
	rdmatest.Must(t, err)
	seen := map[uint32]bool{}
	var first uint32
	for i := range 300 {
		off := uint64(i%4) * 4096
		key := register(t, b, f, uint64(10+i), off, 4096, 0x1000)
		if i == 0 {
			first = key
		}
		seen[key] = true
		if st := remoteWrite(t, a, key, 0x1000+8, 64, byte(i)); st != cq.Success {
			t.Fatalf("I/O %d: write: %v", i, st)
		}
		if !bytes.Equal(backing[off+8:off+72], a.Buf[:64]) {
			t.Fatalf("I/O %d: bytes differ", i)
		}
		rdmatest.Must(t, b.QP.PostRecv(&qp.RecvWR{WRID: 1, SGL: []mr.SGE{b.MR.SGE(0, 64)}}))
		rdmatest.Must(t, a.QP.PostSend(&qp.SendWR{WRID: 5, Opcode: qp.WRSendWithInv, Flags: qp.Signaled, InvRKey: key}))
		waitOp(t, a.SCQ, 5, cq.OpSend, cq.Success)
		if wc := rdmatest.Wait(t, b.RCQ, 5*time.Second); wc.Flags&cq.WithInv == 0 || wc.InvalidatedRKey != key {
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
	if st := remoteWrite(t, a, prev, 0x1000, 8, 1); st != cq.RemAccessErr {
		t.Fatalf("write under the previous I/O's key: %v", st)
	}
}

// TestFastRegErrors: each rule a registration breaks completes with
// LOC_QP_OP_ERR (rxe_do_local_ops) and flushes what follows; what can be
// told at post time fails the post.
func TestFastRegErrors(t *testing.T) {
	cases := []struct {
		name string
		info func(f *mr.MR) mr.RegInfo
		pre  func(t *testing.T, b *rdmatest.Peer, f *mr.MR) // before the registration
		pd   bool                                           // the region is of another PD
	}{
		{name: "registered already", info: func(f *mr.MR) mr.RegInfo {
			return mr.RegInfo{Key: mr.IncRKey(f.RKey()), Length: 64, Access: regAccess}
		}, pre: func(t *testing.T, b *rdmatest.Peer, f *mr.MR) { register(t, b, f, 9, 0, 64, 0) }},
		{name: "key of another index", info: func(f *mr.MR) mr.RegInfo {
			return mr.RegInfo{Key: f.RKey() + 0x100, Length: 64, Access: regAccess}
		}},
		{name: "past the allocation", info: func(f *mr.MR) mr.RegInfo {
			return mr.RegInfo{Key: mr.IncRKey(f.RKey()), Offset: 4000, Length: 97, Access: regAccess}
		}},
		{name: "length 0", info: func(f *mr.MR) mr.RegInfo {
			return mr.RegInfo{Key: mr.IncRKey(f.RKey()), Access: regAccess}
		}},
		{name: "remote write without local write", info: func(f *mr.MR) mr.RegInfo {
			return mr.RegInfo{Key: mr.IncRKey(f.RKey()), Length: 64, Access: mr.RemoteWrite}
		}},
		{name: "region of another PD", pd: true, info: func(f *mr.MR) mr.RegInfo {
			return mr.RegInfo{Key: mr.IncRKey(f.RKey()), Length: 64, Access: regAccess}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, b, _ := rdmatest.MemPair(t, rdmatest.Options{Access: mwAccess})
			pd := b.PD
			if c.pd {
				pd = b.Dev.AllocPD()
			}
			f, err := pd.AllocFastMR(make([]byte, 4096))
			rdmatest.Must(t, err)
			if c.pre != nil {
				c.pre(t, b, f)
			}
			rdmatest.Must(t, b.QP.PostSend(&qp.SendWR{WRID: 1, Opcode: qp.WRRegMR, Flags: qp.Signaled, Reg: qp.RegMR{MR: f, Info: c.info(f)}}))
			rdmatest.Must(t, b.QP.PostSend(&qp.SendWR{WRID: 2, Opcode: qp.WRSend, Flags: qp.Signaled}))
			waitOp(t, b.SCQ, 1, cq.OpRegMR, cq.LocQPOpErr)
			waitOp(t, b.SCQ, 2, cq.OpSend, cq.WRFlushErr)
		})
	}
	t.Run("post checks", func(t *testing.T) {
		_, b, _ := rdmatest.MemPair(t, rdmatest.Options{Access: mwAccess})
		if err := b.QP.PostSend(&qp.SendWR{Opcode: qp.WRRegMR, Reg: qp.RegMR{MR: b.MR}}); !errors.Is(err, qp.ErrInvalid) {
			t.Errorf("REG_MR of a registered region: %v", err)
		}
		if err := b.QP.PostSend(&qp.SendWR{Opcode: qp.WRRegMR}); !errors.Is(err, qp.ErrInvalid) {
			t.Errorf("REG_MR without a region: %v", err)
		}
		if _, err := b.PD.AllocFastMR(nil); !errors.Is(err, mr.ErrEmpty) {
			t.Errorf("AllocFastMR(nil): %v", err)
		}
		if st := b.QP.State(); st != qp.RTS {
			t.Errorf("QP in %v", st)
		}
	})
}
