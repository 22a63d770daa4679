package transport_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testharness"
	"github.com/goroce/goroce/transport"
)

// TestVethXRC: goroce against goroce across a veth pair over the UDP
// link, one target node serving eight XRC initiator QPs of four
// "processes" (each its own PD, region and CQ, two QPs apiece) on the
// other node, through one XRC SRQ shared by all eight target QPs. Every
// message carries a pattern of its sender and sequence number, each
// receive is checked byte for byte and against the QP and length it came
// from, and in order per sender; then each initiator WRITEs into the
// target and READs it back, and all eight fetch-and-add one shared word.
func TestVethXRC(t *testing.T) {
	testharness.NoLeaks(t)
	n := testharness.NewNet(t, testharness.Config{MTU: testharness.VethMTU(transport.MTU1024)})
	open := func(e int) *transport.Device {
		end, addr := n.A, n.A.IPv4
		if e == 1 {
			end, addr = n.B, n.B.IPv4
		}
		l, err := testharness.OpenLink(testharness.UDP, end, addr)
		if err != nil {
			t.Fatal(err)
		}
		d, err := transport.Open(l, transport.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	ini, tgt := open(0), open(1)
	const procs, qpsPerProc, rounds, depth = 4, 2, 6, 8
	const nQP = procs * qpsPerProc
	mtu := ini.ActiveMTU().Bytes()
	slot := 3*mtu + 64
	access := transport.LocalWrite | transport.RemoteWrite | transport.RemoteRead | transport.RemoteAtomic

	// The target: one XRC domain, one XRC SRQ, a target QP per initiator.
	xrcd, err := tgt.OpenXRCD()
	noErr(t, err)
	tpd := tgt.AllocPD()
	tbuf := make([]byte, 256*slot)
	tmr, err := tpd.Register(tbuf, access)
	noErr(t, err)
	tcq := tgt.CreateCQ(1024)
	srq, err := tgt.CreateSRQEx(tpd, transport.SRQInitAttr{Type: transport.SRQXRC, XRCD: xrcd, CQ: tcq, Attr: transport.SRQAttr{MaxWR: 128, MaxSGE: 1}})
	noErr(t, err)
	for i := range 128 {
		noErr(t, srq.PostRecv(&transport.RecvWR{WRID: uint64(i), SGL: []transport.SGE{tmr.SGE(i*slot, slot)}}))
	}

	// The initiator node: four processes, each with two XRC_INI QPs.
	type proc struct {
		pd  *transport.PD
		buf []byte
		mr  *transport.MR
		cq  *transport.CQ
	}
	var ps [procs]proc
	var inis, tgts [nQP]*transport.QP
	byTgt := map[uint32]int{}
	for p := range ps {
		ps[p].pd = ini.AllocPD()
		ps[p].buf = make([]byte, qpsPerProc*depth*slot)
		ps[p].mr, err = ps[p].pd.Register(ps[p].buf, access)
		noErr(t, err)
		ps[p].cq = ini.CreateCQ(256)
		for k := range qpsPerProc {
			j := p*qpsPerProc + k
			inis[j], err = ini.CreateQP(ps[p].pd, transport.QPInitAttr{Type: transport.XRCIni, SendCQ: ps[p].cq,
				Cap: transport.QPCap{MaxSendWR: 64, MaxSendSGE: 1}})
			noErr(t, err)
			tgts[j], err = tgt.CreateQP(nil, transport.QPInitAttr{Type: transport.XRCTgt, XRCD: xrcd})
			noErr(t, err)
			byTgt[tgts[j].QPN()] = j
			ei, err := ini.LocalEndpoint(inis[j])
			noErr(t, err)
			et, err := tgt.LocalEndpoint(tgts[j])
			noErr(t, err)
			o := transport.ConnectOptions{Access: access}
			noErr(t, ini.Connect(inis[j], ei, et, o))
			noErr(t, tgt.Connect(tgts[j], et, ei, o))
		}
	}
	procOf := func(j int) *proc { return &ps[j/qpsPerProc] }
	srcOff := func(j, i int) int { return (j%qpsPerProc*depth + i%depth) * slot }
	size := func(j, i int) int { return (j*131 + i*977) % (3*mtu + 1) } // 0 .. 3 MTUs
	seed := func(j, i int) uint32 { return uint32(j)<<16 | uint32(i) }
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wcs := make([]transport.WC, 64)
	next := [nQP]int{} // the next sequence number expected from each initiator

	for r := range rounds {
		for j := range nQP {
			pr := procOf(j)
			for k := range depth {
				i := r*depth + k
				src := pr.buf[srcOff(j, i) : srcOff(j, i)+size(j, i)]
				testharness.Fill(src, seed(j, i))
				noErr(t, inis[j].PostSend(&transport.SendWR{WRID: uint64(i), Opcode: transport.WRSend, Flags: transport.Signaled,
					SGL: []transport.SGE{pr.mr.SGE(srcOff(j, i), len(src))}, RemoteSRQN: srq.SRQN()}))
			}
		}
		// Every receive, from whichever initiator, through the one SRQ.
		want := make([]byte, 3*mtu)
		for got := 0; got < nQP*depth; {
			m, err := tcq.PollWait(ctx, wcs)
			if err != nil {
				t.Fatalf("round %d: %d of %d receives: %v", r, got, nQP*depth, err)
			}
			for _, wc := range wcs[:m] {
				j, ok := byTgt[wc.QPNum]
				if wc.Status != transport.Success || wc.Opcode != transport.OpRecv || !ok || wc.SrcQP != inis[j].QPN() {
					t.Fatalf("receive completion %+v", wc)
				}
				tgts[j].State() // orders the engine's write before the read (race detector)
				i := next[j]
				next[j]++
				if int(wc.ByteLen) != size(j, i) {
					t.Fatalf("initiator %d message %d: %d bytes, want %d (out of order?)", j, i, wc.ByteLen, size(j, i))
				}
				testharness.Fill(want[:size(j, i)], seed(j, i))
				at := int(wc.WRID) * slot
				if !bytes.Equal(tbuf[at:at+size(j, i)], want[:size(j, i)]) {
					t.Fatalf("initiator %d message %d: data differs", j, i)
				}
				noErr(t, srq.PostRecv(&transport.RecvWR{WRID: wc.WRID, SGL: []transport.SGE{tmr.SGE(at, slot)}}))
			}
			got += m
		}
		for p := range ps {
			for got := 0; got < qpsPerProc*depth; {
				m, err := ps[p].cq.PollWait(ctx, wcs)
				if err != nil {
					t.Fatalf("process %d: %d sends completed: %v", p, got, err)
				}
				for _, wc := range wcs[:m] {
					if wc.Status != transport.Success || wc.Opcode != transport.OpSend {
						t.Fatalf("process %d: send completion %+v", p, wc)
					}
				}
				got += m
			}
		}
	}

	// WRITE into the target, READ it back, and fetch-and-add a shared word.
	counter := 200 * slot
	wait := func(c *transport.CQ, op transport.WCOpcode) {
		t.Helper()
		if wc := testharness.Wait(t, c, 20*time.Second); wc.Status != transport.Success || wc.Opcode != op {
			t.Fatalf("%v: completion %+v", op, wc)
		}
	}
	for j := range nQP {
		pr := procOf(j)
		n := 2*mtu + j
		at := 130*slot + j*slot
		src := pr.buf[srcOff(j, 0) : srcOff(j, 0)+n]
		testharness.Fill(src, seed(j, 1000))
		noErr(t, inis[j].PostSend(&transport.SendWR{Opcode: transport.WRRDMAWrite, Flags: transport.Signaled, SGL: []transport.SGE{pr.mr.SGE(srcOff(j, 0), n)},
			RemoteAddr: tmr.Addr() + uint64(at), RKey: tmr.RKey(), RemoteSRQN: srq.SRQN()}))
		wait(pr.cq, transport.OpRDMAWrite)
		dst := srcOff(j, 1)
		clear(pr.buf[dst : dst+n])
		noErr(t, inis[j].PostSend(&transport.SendWR{Opcode: transport.WRRDMARead, Flags: transport.Signaled, SGL: []transport.SGE{pr.mr.SGE(dst, n)},
			RemoteAddr: tmr.Addr() + uint64(at), RKey: tmr.RKey(), RemoteSRQN: srq.SRQN()}))
		wait(pr.cq, transport.OpRDMARead)
		inis[j].State()
		if !bytes.Equal(pr.buf[dst:dst+n], src) {
			t.Fatalf("initiator %d: READ did not bring back what WRITE wrote", j)
		}
		noErr(t, inis[j].PostSend(&transport.SendWR{Opcode: transport.WRAtomicFetchAndAdd, Flags: transport.Signaled, CompareAdd: uint64(j + 1),
			SGL: []transport.SGE{pr.mr.SGE(srcOff(j, 2), 8)}, RemoteAddr: tmr.Addr() + uint64(counter), RKey: tmr.RKey(), RemoteSRQN: srq.SRQN()}))
		wait(pr.cq, transport.OpFetchAdd)
	}
	for _, q := range tgts {
		q.State() // each executed one of the adds (race detector)
	}
	if got, want := binary.LittleEndian.Uint64(tbuf[counter:]), uint64(nQP*(nQP+1)/2); got != want {
		t.Fatalf("shared word %d after eight fetch-and-adds, want %d", got, want)
	}
	for _, d := range []*transport.Device{ini, tgt} {
		c := d.Counters()
		if c.XRCBadSRQN.Load()+c.XRCDomainViolation.Load()+c.XRCMisdirected.Load()+c.SentNAKs.Load() != 0 {
			t.Fatalf("XRC drops or NAKs: %v", c.List())
		}
	}
	t.Logf("%d XRC_INI QPs in %d processes -> %d XRC_TGT QPs and 1 XRC SRQ: %d messages, every byte checked",
		nQP, procs, nQP, rounds*depth*nQP)
}

func noErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
