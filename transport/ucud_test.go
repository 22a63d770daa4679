package transport_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testharness"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

func TestUCOperations(t *testing.T) {
	a, b, _ := testharness.MemPair(t, testharness.Options{Type: transport.UC})
	for _, op := range []transport.WROpcode{transport.WRSend, transport.WRSendWithImm, transport.WRRDMAWrite, transport.WRRDMAWriteWithImm} {
		for _, n := range []int{0, 1, 1024, 1025, 9000} {
			checkOp(t, a, b, op, n, 2)
		}
	}
	// UC sends no acknowledgement, and READ and atomics are not UC operations.
	if c := b.Dev.Counters(); c.SentACKs.Load()+c.SentNAKs.Load() != 0 {
		t.Fatalf("UC responder acknowledged: %d ACKs", c.SentACKs.Load())
	}
	if err := a.QP.PostSend(&transport.SendWR{Opcode: transport.WRRDMARead, SGL: []transport.SGE{a.MR.SGE(0, 8)}}); !errors.Is(err, transport.ErrInvalid) {
		t.Fatalf("UC READ: %v", err)
	}
}

// A PSN gap makes the UC responder drop the rest of the message and resume
// at the next FIRST or ONLY (IBA 9.8.2); the receive WQE is reused.
func TestUCDropUntilNextMessage(t *testing.T) {
	a, b, net := testharness.MemPair(t, testharness.Options{Type: transport.UC})
	var n int
	net.SetFilter(a.Addr, b.Addr, func(d []byte) mem.Verdict {
		n++
		if n == 6 { // the second packet of the second message (4 packets each)
			return mem.Drop
		}
		return mem.Pass
	})
	for i := range 3 {
		testharness.Must(t, b.QP.PostRecv(&transport.RecvWR{WRID: uint64(i), SGL: []transport.SGE{b.MR.SGE(i*8192, 8192)}}))
	}
	for i := range 3 {
		fill(a.Buf[i*4000:(i+1)*4000], byte(i))
		testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: uint64(i), Opcode: transport.WRSend, Flags: transport.Signaled,
			SGL: []transport.SGE{a.MR.SGE(i*4000, 4000)}}))
	}
	// The sender completes all three locally: UC has no ACKs.
	for i := range 3 {
		if wc := testharness.Wait(t, a.SCQ, time.Second); wc.Status != transport.Success || wc.WRID != uint64(i) {
			t.Fatalf("send %d: %+v", i, wc)
		}
	}
	// Messages 1 and 3 arrive; 3 lands in the WQE 2 was filling.
	for _, want := range []struct{ wrid, msg int }{{0, 0}, {1, 2}} {
		wc := testharness.Wait(t, b.RCQ, time.Second)
		if wc.Status != transport.Success || wc.WRID != uint64(want.wrid) || wc.ByteLen != 4000 {
			t.Fatalf("receive: %+v", wc)
		}
		if !bytes.Equal(b.Buf[want.wrid*8192:want.wrid*8192+4000], a.Buf[want.msg*4000:(want.msg+1)*4000]) {
			t.Fatalf("WQE %d holds the wrong message", want.wrid)
		}
	}
	if got := b.Dev.Counters().UCDropped.Load(); got != 2 {
		t.Fatalf("uc_dropped %d, want 2 (the rest of message 2)", got)
	}
}

// udPair makes two UD QPs with Q_Key 0x11111111 (what ibv_ud_pingpong uses).
func udPair(t *testing.T, addrA, addrB string) (*testharness.Peer, *testharness.Peer, *transport.AH, *mem.Net) {
	o := testharness.Options{Type: transport.UD}
	o.MemDefaults()
	net := mem.NewNet(5)
	a := testharness.NewMemPeer(t, net, addrA, o)
	b := testharness.NewMemPeer(t, net, addrB, o)
	testharness.ConnectQP(t, a, b, o, 1, 2)
	testharness.ConnectQP(t, b, a, o, 2, 1)
	gi, _ := b.Dev.GIDIndex(b.Addr)
	g, _ := b.Dev.GID(gi)
	si, _ := a.Dev.GIDIndex(a.Addr)
	ah, err := a.Dev.CreateAH(a.PD, transport.AHAttr{DGID: g, SGIDIndex: si, PortNum: 1, HopLimit: 7, TrafficClass: 0x28})
	testharness.Must(t, err)
	return a, b, ah, net
}

func TestUD(t *testing.T) {
	for _, fam := range []struct{ name, a, b string }{{"IPv4", "10.0.0.1", "10.0.0.2"}, {"IPv6", "fd00::1", "fd00::2"}} {
		t.Run(fam.name, func(t *testing.T) {
			a, b, ah, _ := udPair(t, fam.a, fam.b)
			fill(a.Buf[:1024], 5)
			testharness.Must(t, b.QP.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{b.MR.SGE(0, 40+1024)}}))
			testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRSendWithImm, Flags: transport.Signaled, Imm: 0x01020304,
				SGL: []transport.SGE{a.MR.SGE(0, 1024)}, AH: ah, RemoteQPN: b.QP.QPN(), RemoteQKey: 0x11111111}))
			if wc := testharness.Wait(t, a.SCQ, time.Second); wc.Status != transport.Success {
				t.Fatalf("send %+v", wc)
			}
			wc := testharness.Wait(t, b.RCQ, time.Second)
			if wc.Status != transport.Success || wc.ByteLen != 40+1024 || wc.SrcQP != a.QP.QPN() ||
				wc.Flags != transport.WithGRH|transport.WithImm || wc.ImmData != 0x01020304 {
				t.Fatalf("receive %+v", wc)
			}
			if !bytes.Equal(b.Buf[40:40+1024], a.Buf[:1024]) {
				t.Fatal("payload differs")
			}
			// The GRH area holds the network header as rdma-core reads it.
			g := bth.GRH(b.Buf[:40])
			src := netip.MustParseAddr(fam.a)
			if g.Source() != src {
				t.Fatalf("GRH source %v, want %v", g.Source(), src)
			}
			if fam.name == "IPv4" {
				// Traffic class 0x28 from the AH, with ECT(0) in its ECN
				// bits: the device marks what it sends (congestion control).
				if !bytes.Equal(b.Buf[:20], make([]byte, 20)) || b.Buf[20] != 0x45 || b.Buf[21] != 0x2a || b.Buf[28] != 7 {
					t.Fatalf("IPv4 GRH area % x", b.Buf[:40])
				}
			} else if g.IPVer() != 6 || g.TClass() != 0x2a || g.HopLimit() != 7 {
				t.Fatalf("IPv6 GRH: version %d tclass %#x hop %d", g.IPVer(), g.TClass(), g.HopLimit())
			}
			// The AH made from the completion answers the sender.
			back, err := transport.AHAttrFromWC(&wc, b.Buf[:40], 0)
			if err != nil || back.DGID != bth.GIDFromAddr(src) {
				t.Fatalf("AH from WC: %+v %v", back, err)
			}
		})
	}
}

func TestUDQKey(t *testing.T) {
	a, b, ah, _ := udPair(t, "10.0.0.1", "10.0.0.2")
	send := func(qkey uint32, n int) {
		testharness.Must(t, a.QP.PostSend(&transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{a.MR.SGE(0, n)}, AH: ah,
			RemoteQPN: b.QP.QPN(), RemoteQKey: qkey}))
	}
	testharness.Must(t, b.QP.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{b.MR.SGE(0, 100)}}))
	send(0x22222222, 8) // wrong Q_Key: dropped and counted
	// A Q_Key with its high bit set means the sending QP's own (IBA 10.2.5),
	// 0x11111111 here, which matches. It arrives after the wrong one, so
	// its completion shows the wrong one was dealt with.
	send(0x80000000, 9)
	if wc := testharness.Wait(t, b.RCQ, time.Second); wc.Status != transport.Success || wc.ByteLen != bth.GRHLen+9 {
		t.Fatalf("%+v, want the 9-byte message", wc)
	}
	if b.RCQ.Len() != 0 || b.Dev.Counters().BadQKey.Load() != 1 {
		t.Fatalf("wrong Q_Key: %d more completions, bad_qkey %d", b.RCQ.Len(), b.Dev.Counters().BadQKey.Load())
	}
}

func TestUDLimits(t *testing.T) {
	a, b, ah, _ := udPair(t, "10.0.0.1", "10.0.0.2")
	mtu := a.Dev.ActiveMTU().Bytes()
	err := a.QP.PostSend(&transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{a.MR.SGE(0, mtu+1)}, AH: ah, RemoteQPN: b.QP.QPN()})
	if !errors.Is(err, transport.ErrInvalid) {
		t.Fatalf("UD send over the MTU: %v", err)
	}
	for _, op := range []transport.WROpcode{transport.WRRDMAWrite, transport.WRRDMARead, transport.WRAtomicFetchAndAdd} {
		if err := a.QP.PostSend(&transport.SendWR{Opcode: op, SGL: []transport.SGE{a.MR.SGE(0, 8)}, AH: ah}); !errors.Is(err, transport.ErrInvalid) {
			t.Errorf("UD %v: %v", op, err)
		}
	}
	// A receive without room for GRH and payload completes with a local
	// length error; without a receive the message is dropped and counted.
	testharness.Must(t, b.QP.PostRecv(&transport.RecvWR{WRID: 7, SGL: []transport.SGE{b.MR.SGE(0, 40+10)}}))
	for range 2 {
		testharness.Must(t, a.QP.PostSend(&transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{a.MR.SGE(0, 11)}, AH: ah,
			RemoteQPN: b.QP.QPN(), RemoteQKey: 0x11111111}))
	}
	if wc := testharness.Wait(t, b.RCQ, time.Second); wc.Status != transport.LocLenErr || wc.WRID != 7 {
		t.Fatalf("%+v", wc)
	}
	waitCount(t, "no_recv_wqe", b.Dev.Counters().NoRecvWQE.Load, 1)
	if b.QP.State() != transport.RTS {
		t.Fatalf("UD QP left RTS: %v", b.QP.State())
	}
}

func TestGSIReserved(t *testing.T) {
	o := testharness.Options{}
	o.MemDefaults()
	s := testharness.NewMemPeer(t, mem.NewNet(1), "10.0.0.1", o)
	for range 5 {
		q, err := s.Dev.CreateQP(s.PD, transport.QPInitAttr{Type: transport.UD, SendCQ: s.SCQ, RecvCQ: s.RCQ, Cap: transport.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
		testharness.Must(t, err)
		if q.QPN() <= 1 {
			t.Fatalf("QPN %d: 0 and 1 are the SMI and GSI (connection manager) QPs", q.QPN())
		}
	}
}
