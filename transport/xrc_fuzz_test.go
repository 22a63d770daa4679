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

// FuzzXRCTarget feeds packets with a valid ICRC and arbitrary transport
// headers to a live XRC target QP whose domain holds one XRC SRQ, beside a
// second domain with an SRQ of its own. After every packet: no byte
// outside region A (the only one with remote write) changes, nor A when a
// header check dropped the packet; rcvd_pkts moves by one; no receive of
// the other domain's SRQ is ever consumed; receive completions never
// outnumber the receives posted. sel picks what to force: 0x20 the XRC
// transport, 0x40 the expected PSN, 0x80 the XRCETH (aim&3: the SRQ, the
// other domain's, none) and the RETH/AtomicETH key and address (aim>>2: an
// offset around region A).
func FuzzXRCTarget(f *testing.F) {
	x := func(op bth.OpCode) bth.OpCode { return bth.OpCode(bth.TransportXRC)<<5 | op }
	for _, s := range [][]byte{
		mkSeed(x(bth.SendOnly), 0, []byte("hello")),
		mkSeed(x(bth.SendFirst), 0, make([]byte, 1024)),
		mkSeed(x(bth.WriteOnlyImm), 0, make([]byte, 64), reth(0, 0, 64)),
		mkSeed(x(bth.ReadRequest), 0, nil, reth(0, 0, 5000)),
		mkSeed(x(bth.FetchAdd), 0, nil, atomicETH(0, 0, 1, 0)),
		mkSeed(x(bth.CompareSwap), 0, nil, atomicETH(0, 0, 1, 0)),
		mkSeed(x(bth.Acknowledge), 0, nil, aeth(ack, 1)), // misdirected: a target has no requester
	} {
		for _, sel := range []byte{0xe0, 0xe1, 0xe2, 0x20, 0} {
			for _, aim := range []uint16{64 << 2, 4000<<2 | 1, 10 << 2} {
				f.Add(sel, aim, s)
			}
		}
	}
	o := testharness.Options{}
	o.MemDefaults()
	net := mem.NewNet(1)
	s := testharness.NewMemPeer(f, net, "10.0.0.1", o)
	testharness.Must(f, s.MR.Dereg())
	r := newRawPeer(f, net, "10.0.0.9")

	const guard, size = 64, 8192
	backing := make([]byte, guard+size+guard+size+guard)
	for i := range backing {
		backing[i] = byte(i*31 + 7)
	}
	regA, err := s.PD.Register(backing[guard:guard+size], transport.LocalWrite|transport.RemoteWrite|transport.RemoteRead|transport.RemoteAtomic)
	testharness.Must(f, err)
	regB, err := s.PD.Register(backing[2*guard+size:2*guard+2*size], transport.LocalWrite)
	testharness.Must(f, err)
	frozen := append([]byte(nil), backing...)

	xrcd, err := s.Dev.OpenXRCD()
	testharness.Must(f, err)
	other, err := s.Dev.OpenXRCD()
	testharness.Must(f, err)
	srq, err := s.Dev.CreateSRQEx(s.PD, transport.SRQInitAttr{Type: transport.SRQXRC, XRCD: xrcd, CQ: s.RCQ, Attr: transport.SRQAttr{MaxWR: 64}})
	testharness.Must(f, err)
	otherSRQ, err := s.Dev.CreateSRQEx(s.PD, transport.SRQInitAttr{Type: transport.SRQXRC, XRCD: other, CQ: s.RCQ, Attr: transport.SRQAttr{MaxWR: 4}})
	testharness.Must(f, err)
	testharness.Must(f, otherSRQ.PostRecv(&transport.RecvWR{SGL: []transport.SGE{regB.SGE(0, 64)}}))
	tgt, err := s.Dev.CreateQP(nil, transport.QPInitAttr{Type: transport.XRCTgt, XRCD: xrcd})
	testharness.Must(f, err)
	peer := transport.Endpoint{QPN: r.qpn, GID: bth.GIDFromAddr(r.addr), MTU: transport.MTU1024}
	r.dst = &testharness.Peer{Dev: s.Dev, Addr: s.Addr, QP: tgt}
	connect := func(t testing.TB) {
		local, err := s.Dev.LocalEndpoint(tgt)
		testharness.Must(t, err)
		local.PSN = 5000
		testharness.Must(t, s.Dev.Connect(tgt, local, peer, transport.ConnectOptions{Access: transport.RemoteWrite | transport.RemoteRead | transport.RemoteAtomic, PathMTU: transport.MTU1024}))
	}
	connect(f)

	var posted, completed uint64
	var wc [64]transport.WC
	drain := func(t testing.TB) {
		for n, _ := s.RCQ.Poll(wc[:]); n > 0; n, _ = s.RCQ.Poll(wc[:]) {
			completed += uint64(n)
		}
		if completed > posted {
			t.Fatalf("%d receive completions for %d receives posted", completed, posted)
		}
	}
	srqns := [3]uint32{srq.SRQN(), otherSRQ.SRQN(), 0xfffffe}
	var memA []byte
	f.Fuzz(func(t *testing.T, sel byte, aim uint16, roce []byte) {
		if len(roce) < bth.BTHLen+bth.ICRCLen || len(roce) > 4200 {
			return
		}
		if tgt.State() == transport.Err {
			testharness.Must(t, tgt.Modify(&transport.QPAttr{State: transport.Reset}, transport.AttrState))
			connect(t)
		}
		for srq.Len() < 4 {
			testharness.Must(t, srq.PostRecv(&transport.RecvWR{SGL: []transport.SGE{regA.SGE(0, 4096)}}))
			posted++
		}
		roce = append([]byte(nil), roce...)
		if sel&0x20 != 0 {
			roce[0] = roce[0]&0x1f | byte(bth.TransportXRC)<<5
		}
		bth.BTH(roce).SetDestQP(tgt.QPN())
		if sel&0x40 != 0 {
			a, _ := tgt.Query()
			bth.BTH(roce).SetPSN(bth.PSN(a.RQPSN))
		}
		info := bth.OpCode(roce[0]).Info()
		if sel&0x80 != 0 && info.Headers.Has(bth.ExtXRCETH) && len(roce) >= info.HdrLen+bth.ICRCLen {
			bth.XRCETH(roce[info.Offset(bth.ExtXRCETH):]).SetXRCSRQ(srqns[int(aim&3)%3])
			if o := max(info.Offset(bth.ExtRETH), info.Offset(bth.ExtAtomicETH)); o >= 0 {
				at := int(aim>>2)%(size+2*guard) - guard
				binary.BigEndian.PutUint64(roce[o:], regA.Addr()+uint64(int64(at)))
				binary.BigEndian.PutUint32(roce[o+8:], regA.RKey())
			}
		}
		dg := sealed(r.addr, s.Addr, roce)
		memA = append(memA[:0], backing[guard:guard+size]...)
		before := s.Dev.Counters().List()
		var b transport.Burst
		s.Dev.Input(nic.Frame{B: dg}, &b)
		b.Flush()
		if !bytes.Equal(backing[:guard], frozen[:guard]) || !bytes.Equal(backing[guard+size:], frozen[guard+size:]) {
			t.Fatalf("%v wrote outside region A", bth.OpCode(roce[0]))
		}
		delta := counterDelta(before, s.Dev.Counters().List())
		if delta["rcvd_pkts"] != 1 {
			t.Fatalf("rcvd_pkts moved by %d for one packet", delta["rcvd_pkts"])
		}
		if otherSRQ.Len() != 1 {
			t.Fatalf("%v consumed a receive of another XRC domain's SRQ", bth.OpCode(roce[0]))
		}
		for _, c := range []string{"icrc_err", "malformed", "unknown_qp", "bad_state", "bad_pkey", "bad_source", "xrc_misdirected"} {
			if delta[c] != 0 && !bytes.Equal(backing[guard:guard+size], memA) {
				t.Fatalf("%v dropped (%s) but wrote region A", bth.OpCode(roce[0]), c)
			}
		}
		drain(t)
	})
}
