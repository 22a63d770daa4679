package testharness

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

// Stream moves total bytes from a to b with op (SEND, WRITE or READ, which
// reads b's bytes into a), inFlight messages of random sizes up to msgMax
// at a time, and checks every completion, in order, and every byte. On a
// path that loses, duplicates and reorders it is the RC retransmission
// machinery that is under test. It returns how long the transfer took.
func Stream(t testing.TB, a, b *Peer, op transport.WROpcode, total int64, msgMax, inFlight int, seed uint64) time.Duration {
	t.Helper()
	if 2*inFlight*msgMax > len(a.Buf) || 2*inFlight*msgMax > len(b.Buf) {
		t.Fatalf("%d messages of up to %d bytes need %d-byte buffers", inFlight, msgMax, 2*inFlight*msgMax)
	}
	rng := rand.New(rand.NewPCG(seed, uint64(op)))
	sizes := make([]int, inFlight)
	srcs := make([]int, inFlight) // READ: where in b's read-only region (see Peer.RO)
	start := time.Now()
	var round uint32
	for moved := int64(0); moved < total; round++ {
		k := 0
		for ; k < inFlight && moved < total; k++ {
			n := 1 + rng.IntN(msgMax)
			n = int(min(int64(n), total-moved))
			sizes[k] = n
			src, dst := k*msgMax, (inFlight+k)*msgMax
			if op == transport.WRRDMARead {
				src = rng.IntN(len(b.RO) - n + 1)
			}
			srcs[k] = src
			wr := transport.SendWR{WRID: uint64(k), Opcode: op, Flags: transport.Signaled}
			switch op {
			case transport.WRRDMARead:
				clear(a.Buf[dst : dst+n])
				wr.SGL = []transport.SGE{a.MR.SGE(dst, n)}
				wr.RemoteAddr, wr.RKey = b.ROMR.Addr()+uint64(src), b.ROMR.RKey()
			case transport.WRRDMAWrite:
				Fill(a.Buf[src:src+n], round<<8|uint32(k))
				clear(b.Buf[dst : dst+n])
				wr.SGL = []transport.SGE{a.MR.SGE(src, n)}
				wr.RemoteAddr, wr.RKey = b.MR.Addr()+uint64(dst), b.MR.RKey()
			default:
				Fill(a.Buf[src:src+n], round<<8|uint32(k))
				clear(b.Buf[dst : dst+n])
				Must(t, b.QP.PostRecv(&transport.RecvWR{WRID: uint64(k), SGL: []transport.SGE{b.MR.SGE(dst, msgMax)}}))
				wr.SGL = []transport.SGE{a.MR.SGE(src, n)}
			}
			Settle(a, b)
			Must(t, a.QP.PostSend(&wr))
			moved += int64(n)
		}
		for i := range k {
			if wc := Wait(t, a.SCQ, completionWait); wc.Status != transport.Success || wc.WRID != uint64(i) {
				t.Fatalf("%v round %d message %d (%d bytes): %+v", op, round, i, sizes[i], wc)
			}
			if op == transport.WRSend {
				if rc := Wait(t, b.RCQ, completionWait); rc.Status != transport.Success || rc.WRID != uint64(i) || rc.ByteLen != uint32(sizes[i]) {
					t.Fatalf("%v round %d receive %d (%d bytes): %+v", op, round, i, sizes[i], rc)
				}
			}
			Settle(a, b)
			src, dst := srcs[i], (inFlight+i)*msgMax
			from, to := a.Buf[src:src+sizes[i]], b.Buf[dst:dst+sizes[i]]
			if op == transport.WRRDMARead {
				from, to = b.RO[src:src+sizes[i]], a.Buf[dst:dst+sizes[i]]
			}
			if !bytes.Equal(from, to) {
				t.Fatalf("%v round %d message %d (%d bytes): data differs at byte %d", op, round, i, sizes[i], firstDiff(from, to))
			}
		}
	}
	if n := a.SCQ.Len() + b.RCQ.Len(); n != 0 {
		t.Fatalf("%d completions left over", n)
	}
	return time.Since(start)
}

// Counting runs count fetch-and-adds of one and count compare-and-swaps
// that each move a counter of b's from i to i+1, with many in flight, and
// checks the final value and every original value returned: on a path
// that duplicates and loses, a replayed atomic must be answered from the
// responder's resources, never executed twice (IBA 9.7.5.1.3).
func Counting(t testing.TB, a, b *Peer, count int) {
	t.Helper()
	const word, results = 0, 4096
	inFlight := int(a.Opt.RdAtomic)
	binary.LittleEndian.PutUint64(b.Buf[word:], 0)
	Settle(b)
	for _, op := range []transport.WROpcode{transport.WRAtomicFetchAndAdd, transport.WRAtomicCmpAndSwp} {
		Settle(b)
		base := binary.LittleEndian.Uint64(b.Buf[word:])
		for i := 0; i < count; i += inFlight {
			k := min(inFlight, count-i)
			for j := range k {
				v := base + uint64(i+j)
				wr := transport.SendWR{WRID: uint64(j), Opcode: op, Flags: transport.Signaled, SGL: []transport.SGE{a.MR.SGE(results+8*j, 8)},
					RemoteAddr: b.MR.Addr() + word, RKey: b.MR.RKey(), CompareAdd: 1}
				if op == transport.WRAtomicCmpAndSwp {
					// Compare-and-swaps in flight together must apply in
					// order: each expects the value the one before made.
					wr.CompareAdd, wr.Swap = v, v+1
				}
				Must(t, a.QP.PostSend(&wr))
			}
			for j := range k {
				if wc := Wait(t, a.SCQ, completionWait); wc.Status != transport.Success || wc.WRID != uint64(j) {
					t.Fatalf("%v %d: %+v", op, i+j, wc)
				}
				Settle(a)
				if got, want := binary.LittleEndian.Uint64(a.Buf[results+8*j:]), base+uint64(i+j); got != want {
					t.Fatalf("%v %d returned %d, want %d: an atomic ran twice or out of order", op, i+j, got, want)
				}
			}
		}
		Settle(b)
		if got, want := binary.LittleEndian.Uint64(b.Buf[word:]), base+uint64(count); got != want {
			t.Fatalf("after %d %vs the counter is %d, want %d", count, op, got, want)
		}
	}
}

// Datagrams sends count messages of size bytes from a to b over UC or UD,
// burst at a time, with the receive queue kept full, and returns how many
// arrived and how many of those were repeats. UC and UD do not recover
// what the path loses; what does arrive must be whole and right: each
// message carries its number and a pattern derived from it. Every send
// must complete successfully (UC and UD complete on the wire).
func Datagrams(t testing.TB, a, b *Peer, count, size, burst int) (got, repeats int) {
	t.Helper()
	ud := a.QP.Type() == transport.UD
	var ah *transport.AH
	hdr := 0
	if ud {
		ah, hdr = a.AH(t, b), bth.GRHLen
	}
	slot := hdr + size
	slots := int(b.Opt.RQDepth)
	if slots*slot > len(b.Buf) || burst*size > len(a.Buf) {
		t.Fatal("buffers too small for the receive queue")
	}
	for i := range slots {
		Must(t, b.QP.PostRecv(&transport.RecvWR{WRID: uint64(i), SGL: []transport.SGE{b.MR.SGE(i*slot, slot)}}))
	}
	seen := make([]int, count)
	want := make([]byte, size)
	var wcs [64]transport.WC
	drain := func(quiet time.Duration) {
		for deadline := time.Now().Add(quiet); time.Now().Before(deadline); {
			n, _ := b.RCQ.Poll(wcs[:])
			if n == 0 {
				time.Sleep(200 * time.Microsecond)
				continue
			}
			deadline = time.Now().Add(quiet)
			for _, wc := range wcs[:n] {
				if wc.Status != transport.Success || wc.ByteLen != uint32(slot) {
					t.Fatalf("receive completion %+v, want %d bytes", wc, slot)
				}
				m := b.Buf[int(wc.WRID)*slot+hdr : int(wc.WRID)*slot+slot]
				num := int(binary.BigEndian.Uint32(m))
				if num >= count {
					t.Fatalf("message number %d of %d: corrupt", num, count)
				}
				binary.BigEndian.PutUint32(want, uint32(num))
				Fill(want[4:], uint32(num))
				if !bytes.Equal(m, want) {
					t.Fatalf("message %d: data differs at byte %d", num, firstDiff(m, want))
				}
				seen[num]++
				Must(t, b.QP.PostRecv(&transport.RecvWR{WRID: wc.WRID, SGL: []transport.SGE{b.MR.SGE(int(wc.WRID)*slot, slot)}}))
			}
		}
	}
	for i := 0; i < count; i += burst {
		k := min(burst, count-i)
		for j := range k {
			m := a.Buf[j*size : (j+1)*size]
			binary.BigEndian.PutUint32(m, uint32(i+j))
			Fill(m[4:], uint32(i+j))
			Settle(a)
			wr := transport.SendWR{WRID: uint64(i + j), Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{a.MR.SGE(j*size, size)}}
			if ud {
				wr.AH, wr.RemoteQPN, wr.RemoteQKey = ah, b.QP.QPN(), QKey
			}
			Must(t, a.QP.PostSend(&wr))
		}
		for j := range k {
			if wc := Wait(t, a.SCQ, completionWait); wc.Status != transport.Success || wc.WRID != uint64(i+j) {
				t.Fatalf("send %d: %+v", i+j, wc)
			}
		}
		drain(5 * time.Millisecond)
	}
	drain(200 * time.Millisecond)
	for _, s := range seen {
		if s > 0 {
			got++
			repeats += s - 1
		}
	}
	return got, repeats
}
