package transport_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/goroce/goroce/internal/testharness"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

// FuzzReceive feeds packets that pass every framing check and carry a
// valid ICRC, but whose transport headers are arbitrary, to live RC, UC and
// UD queue pairs: whatever a hostile or broken peer sends must be dropped,
// NAKed or executed within bounds. After every packet it checks:
//
//   - memory: no byte outside a registered region changes (guard bytes
//     surround and separate three regions), and the regions without remote
//     write access (one local-write only, one remote-read only) never change;
//   - counting: rcvd_pkts moves by exactly one; a packet that a header
//     check drops (icrc_err, malformed, cnps, unknown_qp, bad_state,
//     bad_pkey, bad_source) moves exactly one of those counters by one and
//     has no other effect: no memory, no QP state or PSN, no completion,
//     no protocol counter;
//   - completions: nothing is posted to a send queue, so no send completion
//     ever appears; receive completions never outnumber posted receives;
//     rdma_recvs moves by the number of successful SEND receives completed.
//
// aim picks the region (aim&3, 3 meaning A) and the offset (from a guard's width before
// the region to one after it) that RETH and AtomicETH keys and addresses
// point at, when sel&0x80 asks for it.
func FuzzReceive(f *testing.F) {
	seeds := [][]byte{
		mkSeed(bth.RCSendOnly, 0, []byte("hello")),
		mkSeed(bth.RCWriteOnly, 0, make([]byte, 64), reth(0, 0, 64)),
		mkSeed(bth.RCReadRequest, 0, nil, reth(0, 0, 5000)),
		mkSeed(bth.RCFetchAdd, 0, nil, atomicETH(0, 0, 1, 0)),
		mkSeed(bth.RCAcknowledge, 0, nil, aeth(bth.NAKSyndrome(bth.NAKPSNSequenceError), 0)),
		mkSeed(bth.RCReadResponseFirst, 0, make([]byte, 1024), aeth(ack, 1)),
		mkSeed(bth.UCSendFirst, 0, make([]byte, 1024)),
		mkSeed(bth.UCWriteOnly, 0, make([]byte, 64), reth(0, 0, 64)),
		mkSeed(bth.UDSendOnly, 0, []byte("x"), func(p []byte, i *bth.Info) { bth.DETH(p[i.Offset(bth.ExtDETH):]).SetQKey(0x11111111) }),
		// Dropped by header checks: a foreign P_Key, a foreign transport.
		mkSeed(bth.RCSendOnly, 0, []byte("pkey"), func(p []byte, _ *bth.Info) { bth.BTH(p).SetPKey(0x8001) }),
		mkSeed(bth.OpCode(bth.TransportXRC)<<5|bth.Acknowledge, 0, nil, aeth(ack, 1)),
	}
	for _, s := range seeds {
		for sel := range byte(3) {
			// A's start, B, C, across A's end, and from the guard before A.
			for _, aim := range []uint16{64 << 2, 164<<2 | 1, 164<<2 | 2, 8200 << 2, 10 << 2} {
				f.Add(sel|0xc0, aim, s)
			}
			f.Add(sel, uint16(0), s)
		}
	}
	o := testharness.Options{Timeout: 16}
	o.MemDefaults()
	net := mem.NewNet(1)
	s := testharness.NewMemPeer(f, net, "10.0.0.1", o)
	testharness.Must(f, s.MR.Dereg()) // only the guarded regions below are reachable
	r := newRawPeer(f, net, "10.0.0.9")
	connectRaw(f, s, r, o, 5000, 0)

	// One backing array: guard, A, guard, B, guard, C, guard.
	const guard = 64
	sizes := [3]int{8192, 4096, 4096}
	access := [3]transport.Access{
		transport.LocalWrite | transport.RemoteWrite | transport.RemoteRead | transport.RemoteAtomic, // A: receives land here too
		transport.LocalWrite, // B: no remote access
		transport.RemoteRead, // C: read only
	}
	backing := make([]byte, guard+sizes[0]+guard+sizes[1]+guard+sizes[2]+guard)
	for i := range backing {
		backing[i] = byte(i*31 + 7)
	}
	var regions [3]*transport.MR
	var starts [3]int
	off := guard
	for i := range regions {
		var err error
		starts[i] = off
		regions[i], err = s.PD.Register(backing[off:off+sizes[i]], access[i]) // capacity runs on: a bounds slip would write the guard, not panic
		testharness.Must(f, err)
		off += sizes[i] + guard
	}
	// Everything but region A must keep these bytes for ever.
	frozen := append([]byte(nil), backing...)
	recvSGE := regions[0].SGE(0, 4096)

	var qps [3]*transport.QP
	qps[0] = s.QP
	for i, typ := range []transport.QPType{transport.UC, transport.UD} {
		x := *s
		var err error
		x.QP, err = s.Dev.CreateQP(s.PD, transport.QPInitAttr{Type: typ, SendCQ: s.SCQ, RecvCQ: s.RCQ,
			Cap: transport.QPCap{MaxSendWR: 8, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			f.Fatal(err)
		}
		oo := o
		oo.Type = typ
		connectRaw(f, &x, r, oo, 5000, 0)
		qps[i+1] = x.QP
	}
	types := []transport.QPType{transport.RC, transport.UC, transport.UD}
	var posted, completed uint64 // receives, over the whole run
	var wc [64]transport.WC
	// drain polls every completion; it fails on a send completion (no send
	// is ever posted) and returns how many successful SEND receives it saw.
	drain := func(t testing.TB) (recvs uint64) {
		t.Helper()
		for n, _ := s.RCQ.Poll(wc[:]); n > 0; n, _ = s.RCQ.Poll(wc[:]) {
			completed += uint64(n)
			for _, w := range wc[:n] {
				if w.Status == transport.Success && w.Opcode == transport.OpRecv {
					recvs++
				}
			}
		}
		if completed > posted {
			t.Fatalf("%d receive completions for %d receives posted", completed, posted)
		}
		if n, _ := s.SCQ.Poll(wc[:]); n != 0 {
			t.Fatalf("send completion %+v, but no send was ever posted", wc[0])
		}
		return recvs
	}
	// revive brings a QP that an input drove to ERR back to RTS, so later
	// inputs reach the protocol rather than a closed door; and keeps
	// receives posted so SENDs reach the memory path.
	revive := func(t testing.TB, i int) {
		q := qps[i]
		if q.State() == transport.Err {
			drain(t) // the flushed receives
			testharness.Must(t, q.Modify(&transport.QPAttr{State: transport.Reset}, transport.AttrState))
			x := *s
			x.QP = q
			oo := o
			oo.Type = types[i]
			connectRaw(t, &x, r, oo, 5000, 0)
		}
		for range 4 {
			if q.PostRecv(&transport.RecvWR{SGL: []transport.SGE{recvSGE}}) == nil {
				posted++
			}
		}
		drain(t)
		if st := q.State(); st != transport.RTS {
			t.Fatalf("%v in %v: inputs would test a closed door", q, st)
		}
	}
	// The counters a header check moves when it drops a packet before any
	// QP protocol runs.
	headerDrops := map[string]bool{"icrc_err": true, "malformed": true, "cnps": true,
		"unknown_qp": true, "bad_state": true, "bad_pkey": true, "bad_source": true}
	// Moved asynchronously by the device worker finishing an earlier
	// packet's READ responses and the ACKs queued behind them.
	async := map[string]bool{"sent_pkts": true, "sent_acks": true, "sent_naks": true}
	var memA []byte
	f.Fuzz(func(t *testing.T, sel byte, aim uint16, roce []byte) {
		if len(roce) < bth.BTHLen+bth.ICRCLen || len(roce) > 4200 {
			return
		}
		i := int(sel) % len(qps)
		q := qps[i]
		revive(t, i)
		roce = append([]byte(nil), roce...)
		bth.BTH(roce).SetDestQP(q.QPN())
		if sel&0x40 != 0 { // in sequence, so the checks after the PSN's run
			a, _ := q.Query()
			bth.BTH(roce).SetPSN(bth.PSN(a.RQPSN))
		}
		// Point keys and addresses at a region, or just beside it, often
		// enough that the memory paths run, not only the key checks. RETH
		// and AtomicETH both start with the address and the key.
		if sel&0x80 != 0 && len(roce) >= bth.BTHLen+bth.RETHLen+bth.ICRCLen {
			m := regions[int(aim&3)%3]
			at := int(aim>>2)%(m.Len()+2*guard) - guard
			binary.BigEndian.PutUint64(roce[bth.BTHLen:], m.Addr()+uint64(int64(at)))
			binary.BigEndian.PutUint32(roce[bth.BTHLen+8:], m.RKey())
		}
		dg := sealed(r.addr, s.Addr, roce)

		memA = append(memA[:0], backing[starts[0]:starts[0]+sizes[0]]...)
		before := s.Dev.Counters().List()
		a0, _ := q.Query()
		var b transport.Burst
		s.Dev.Input(nic.Frame{B: dg}, &b)
		b.Flush()
		a1, _ := q.Query()

		// Memory outside A never changes; A only when the packet got past
		// the header checks.
		a := backing[starts[0] : starts[0]+sizes[0]]
		if !bytes.Equal(backing[:starts[0]], frozen[:starts[0]]) ||
			!bytes.Equal(backing[starts[0]+sizes[0]:], frozen[starts[0]+sizes[0]:]) {
			t.Fatalf("%v wrote outside region A (a guard, or region B or C)", bth.OpCode(roce[0]))
		}
		delta := counterDelta(before, s.Dev.Counters().List())
		if delta["rcvd_pkts"] != 1 {
			t.Fatalf("rcvd_pkts moved by %d for one packet", delta["rcvd_pkts"])
		}
		recvs := drain(t)
		if delta["rdma_recvs"] != recvs {
			t.Fatalf("rdma_recvs moved by %d, %d SEND receives completed", delta["rdma_recvs"], recvs)
		}
		var dropped []string
		for name := range delta {
			if headerDrops[name] {
				dropped = append(dropped, name)
			}
		}
		if len(dropped) == 0 {
			return // past the header checks: the protocol's to judge
		}
		for name, d := range delta {
			if name != "rcvd_pkts" && !async[name] && (!headerDrops[name] || d != 1 || len(dropped) != 1) {
				t.Fatalf("%v dropped by a header check moved %s by %d (counters %v)", bth.OpCode(roce[0]), name, d, delta)
			}
		}
		if a1.State != a0.State || a1.RQPSN != a0.RQPSN || a1.SQPSN != a0.SQPSN {
			t.Fatalf("%v dropped (%v) moved the QP: %v->%v, rq_psn %d->%d", bth.OpCode(roce[0]), dropped, a0.State, a1.State, a0.RQPSN, a1.RQPSN)
		}
		if !bytes.Equal(a, memA) || recvs != 0 {
			t.Fatalf("%v dropped (%v) but wrote memory or completed a receive", bth.OpCode(roce[0]), dropped)
		}
	})
}

// mkSeed builds the transport bytes of one packet.
func mkSeed(op bth.OpCode, psn uint32, payload []byte, hs ...hdr) []byte {
	info := op.Info()
	pad := bth.PadFor(len(payload))
	roce := make([]byte, info.HdrLen+len(payload)+pad+bth.ICRCLen)
	bth.BTH(roce).Encode(&bth.BTHFields{OpCode: op, PadCount: uint8(pad), PKey: 0xffff, PSN: bth.PSN(psn), AckReq: true})
	for _, h := range hs {
		h(roce, info)
	}
	copy(roce[info.HdrLen:], payload)
	return roce
}
