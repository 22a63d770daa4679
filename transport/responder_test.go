package transport_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testharness"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/manualclock"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

const rPSN = 1000 // the PSN the raw peer starts its requests at

// newRaw connects a device to a raw peer. The device's timers run on a
// manual clock (r.clk): no retransmission happens unless the test advances
// it.
func newRaw(t *testing.T, o testharness.Options) (*testharness.Peer, *rawPeer, *mem.Net) {
	t.Helper()
	o.MemDefaults()
	clk := manualclock.New()
	o.Clock = clk
	net := mem.NewNet(1)
	s := testharness.NewMemPeer(t, net, "10.0.0.1", o)
	r := newRawPeer(t, net, "10.0.0.9")
	r.clk = clk
	connectRaw(t, s, r, o, 5000, rPSN)
	return s, r, net
}

var (
	ack        = bth.ACKSyndrome(bth.CreditsInvalid)
	nakSeq     = bth.NAKSyndrome(bth.NAKPSNSequenceError)
	nakInvalid = bth.NAKSyndrome(bth.NAKInvalidRequest)
	nakAccess  = bth.NAKSyndrome(bth.NAKRemoteAccessError)
	nakOp      = bth.NAKSyndrome(bth.NAKRemoteOperational)
)

// TestResponderNAKs checks each error the responder detects, the NAK it
// sends and what becomes of the QP (IBA 9.7.5.2, 9.9.3).
func TestResponderNAKs(t *testing.T) {
	pay := func(n int) []byte { return bytes.Repeat([]byte{0xab}, n) }
	cases := []struct {
		name   string
		access transport.Access
		recv   []transport.SGE // nil: post a 4 KiB receive; empty non-nil: none
		run    func(s *testharness.Peer, r *rawPeer)
		syn    bth.Syndrome
		state  transport.QPState
		event  transport.EventType
		why    error              // what the event's Err wraps (with event)
		msg    string             // what the event's Err says, if set
		rstat  transport.WCStatus // receive completion status, if one is expected
	}{
		{name: "SEND MIDDLE without FIRST", syn: nakInvalid, state: transport.Err, event: transport.EventQPReqErr, why: transport.ErrInvalidRequest,
			run: func(s *testharness.Peer, r *rawPeer) { r.send(bth.RCSendMiddle, rPSN, true, pay(1024)) }},
		{name: "SEND FIRST shorter than the MTU", syn: nakInvalid, state: transport.Err, event: transport.EventQPReqErr, why: transport.ErrInvalidRequest, rstat: transport.RemInvReqErr,
			run: func(s *testharness.Peer, r *rawPeer) { r.send(bth.RCSendFirst, rPSN, true, pay(1000)) }},
		{name: "SEND beyond the receive buffer", recv: []transport.SGE{{Length: 10}}, syn: nakInvalid, state: transport.Err, rstat: transport.LocLenErr,
			run: func(s *testharness.Peer, r *rawPeer) { r.send(bth.RCSendOnly, rPSN, true, pay(64)) }},
		// An lkey is checked at post (TestSGECheckedAtPost); a region
		// deregistered after the post fails when the SEND lands.
		{name: "receive SGE of a deregistered region", recv: []transport.SGE{}, syn: nakOp, state: transport.Err, rstat: transport.LocProtErr,
			run: func(s *testharness.Peer, r *rawPeer) {
				m, err := s.PD.Register(make([]byte, 4096), transport.LocalWrite)
				if err != nil {
					panic(err)
				}
				if err := s.QP.PostRecv(&transport.RecvWR{WRID: 9, SGL: []transport.SGE{m.SGE(0, 100)}}); err != nil {
					panic(err)
				}
				m.Dereg()
				r.send(bth.RCSendOnly, rPSN, true, pay(64))
			}},
		{name: "WRITE with a bad rkey", syn: nakAccess, state: transport.Err, event: transport.EventQPAccessErr, why: transport.ErrInvalidKey,
			run: func(s *testharness.Peer, r *rawPeer) {
				r.send(bth.RCWriteOnly, rPSN, true, pay(64), reth(s.MR.Addr(), s.MR.RKey()^0x100, 64))
			}},
		{name: "WRITE beyond the region", syn: nakAccess, state: transport.Err, event: transport.EventQPAccessErr, why: transport.ErrBounds,
			run: func(s *testharness.Peer, r *rawPeer) {
				r.send(bth.RCWriteOnly, rPSN, true, pay(64), reth(s.MR.Addr()+uint64(len(s.Buf))-32, s.MR.RKey(), 64))
			}},
		{name: "WRITE below the region", syn: nakAccess, state: transport.Err, event: transport.EventQPAccessErr, why: transport.ErrBounds,
			run: func(s *testharness.Peer, r *rawPeer) {
				r.send(bth.RCWriteOnly, rPSN, true, pay(64), reth(s.MR.Addr()-8, s.MR.RKey(), 64))
			}},
		// The QP's access flags lacking the operation is an invalid request,
		// as rxe's check_op_valid answers it, not a remote access error.
		{name: "WRITE to a QP without remote write", access: transport.LocalWrite | transport.RemoteRead, syn: nakInvalid, state: transport.Err, event: transport.EventQPReqErr, why: transport.ErrQPAccess,
			run: func(s *testharness.Peer, r *rawPeer) {
				r.send(bth.RCWriteOnly, rPSN, true, pay(64), reth(s.MR.Addr(), s.MR.RKey(), 64))
			}},
		{name: "WRITE shorter than its DMA length", syn: nakInvalid, state: transport.Err, event: transport.EventQPReqErr, why: transport.ErrInvalidRequest,
			run: func(s *testharness.Peer, r *rawPeer) {
				r.send(bth.RCWriteOnly, rPSN, true, pay(64), reth(s.MR.Addr(), s.MR.RKey(), 100))
			}},
		{name: "READ from a QP without remote read", access: transport.LocalWrite | transport.RemoteWrite, syn: nakInvalid, state: transport.Err, event: transport.EventQPReqErr, why: transport.ErrQPAccess,
			msg: "READ to a QP without REMOTE_READ",
			run: func(s *testharness.Peer, r *rawPeer) {
				r.send(bth.RCReadRequest, rPSN, true, nil, reth(s.MR.Addr(), s.MR.RKey(), 64))
			}},
		{name: "atomic to a QP without remote atomic", access: transport.LocalWrite | transport.RemoteWrite | transport.RemoteRead, syn: nakInvalid, state: transport.Err, event: transport.EventQPReqErr, why: transport.ErrQPAccess,
			run: func(s *testharness.Peer, r *rawPeer) {
				r.send(bth.RCFetchAdd, rPSN, true, nil, atomicETH(s.MR.Addr(), s.MR.RKey(), 1, 0))
			}},
		{name: "WRITE to a region without remote write", syn: nakAccess, state: transport.Err, event: transport.EventQPAccessErr, why: transport.ErrAccess,
			run: func(s *testharness.Peer, r *rawPeer) {
				m, err := s.PD.Register(make([]byte, 4096), transport.LocalWrite|transport.RemoteRead)
				if err != nil {
					panic(err)
				}
				r.send(bth.RCWriteOnly, rPSN, true, pay(64), reth(m.Addr(), m.RKey(), 64))
			}},
		{name: "WRITE to a region of another PD", syn: nakAccess, state: transport.Err, event: transport.EventQPAccessErr, why: transport.ErrPD,
			run: func(s *testharness.Peer, r *rawPeer) {
				m, err := s.Dev.AllocPD().Register(make([]byte, 4096), transport.LocalWrite|transport.RemoteWrite)
				if err != nil {
					panic(err)
				}
				r.send(bth.RCWriteOnly, rPSN, true, pay(64), reth(m.Addr(), m.RKey(), 64))
			}},
		{name: "READ with a bad rkey", syn: nakAccess, state: transport.Err, event: transport.EventQPAccessErr, why: transport.ErrInvalidKey,
			msg: "READ rkey 0xdead00",
			run: func(s *testharness.Peer, r *rawPeer) {
				r.send(bth.RCReadRequest, rPSN, true, nil, reth(s.MR.Addr(), 0xdead00, 64))
			}},
		{name: "atomic on an unaligned address", syn: nakInvalid, state: transport.Err, event: transport.EventQPReqErr, why: transport.ErrInvalidRequest,
			run: func(s *testharness.Peer, r *rawPeer) {
				r.send(bth.RCFetchAdd, rPSN, true, nil, atomicETH(s.MR.Addr()+4, s.MR.RKey(), 1, 0))
			}},
		{name: "atomic with a bad rkey", syn: nakAccess, state: transport.Err, event: transport.EventQPAccessErr, why: transport.ErrInvalidKey,
			run: func(s *testharness.Peer, r *rawPeer) {
				r.send(bth.RCCompareSwap, rPSN, true, nil, atomicETH(s.MR.Addr(), s.MR.RKey()+1, 1, 0))
			}},
		{name: "unsupported FLUSH", syn: nakInvalid, state: transport.Err, event: transport.EventQPReqErr, why: transport.ErrInvalidRequest,
			run: func(s *testharness.Peer, r *rawPeer) {
				r.send(bth.RCFlush, rPSN, true, nil, reth(s.MR.Addr(), s.MR.RKey(), 64))
			}},
		{name: "zero-length WRITE checks no rkey", syn: ack, state: transport.RTS,
			run: func(s *testharness.Peer, r *rawPeer) { r.send(bth.RCWriteOnly, rPSN, true, nil, reth(0, 0, 0)) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := testharness.Options{Access: c.access}
			s, r, _ := newRaw(t, o)
			switch {
			case c.recv == nil:
				testharness.Must(t, s.QP.PostRecv(&transport.RecvWR{WRID: 9, SGL: []transport.SGE{s.MR.SGE(0, 4096)}}))
			case len(c.recv) > 0:
				sg := c.recv
				if sg[0].LKey == 0 {
					sg = []transport.SGE{s.MR.SGE(0, int(sg[0].Length))}
				}
				testharness.Must(t, s.QP.PostRecv(&transport.RecvWR{WRID: 9, SGL: sg}))
			}
			c.run(s, r)
			r.expectAck(c.syn, rPSN)
			if st := s.QP.State(); st != c.state {
				t.Fatalf("QP state %v, want %v", st, c.state)
			}
			if c.event != 0 {
				select {
				case e := <-s.Dev.Events():
					if e.Type != c.event || e.QP != s.QP || !errors.Is(e.Err, c.why) {
						t.Fatalf("event %v, want %v caused by %v", e, c.event, c.why)
					}
					if !strings.Contains(e.String(), c.msg) {
						t.Fatalf("event %q does not say %q", e, c.msg)
					}
				case <-time.After(time.Second):
					t.Fatalf("no %v event", c.event)
				}
			}
			if c.rstat != 0 {
				if wc := testharness.Wait(t, s.RCQ, time.Second); wc.Status != c.rstat || wc.WRID != 9 {
					t.Fatalf("receive completion %+v, want %v", wc, c.rstat)
				}
			}
		})
	}
}

func TestResponderSequence(t *testing.T) {
	s, r, _ := newRaw(t, testharness.Options{})
	for i := range 4 {
		testharness.Must(t, s.QP.PostRecv(&transport.RecvWR{WRID: uint64(i), SGL: []transport.SGE{s.MR.SGE(i*4096, 4096)}}))
	}
	// A gap: one NAK for the expected PSN (IBA 9.7.5.2.1); further packets
	// of the same gap are dropped without another NAK.
	r.send(bth.RCSendOnly, rPSN+1, true, []byte("second"))
	r.expectAck(nakSeq, rPSN)
	r.send(bth.RCSendOnly, rPSN+2, true, []byte("third"))
	r.quiet()
	// The expected PSN arrives: accepted and acknowledged with MSN 1.
	r.send(bth.RCSendOnly, rPSN, true, []byte("first"))
	if p := r.expectAck(ack, rPSN); p.AETH().MSN() != 1 {
		t.Fatalf("MSN %d, want 1", p.AETH().MSN())
	}
	// A duplicate is acknowledged again, not delivered twice (C9-105).
	r.send(bth.RCSendOnly, rPSN, true, []byte("first"))
	r.expectAck(ack, rPSN)
	if wc := testharness.Wait(t, s.RCQ, time.Second); wc.WRID != 0 || wc.ByteLen != 5 {
		t.Fatalf("completion %+v", wc)
	}
	if n := s.RCQ.Len(); n != 0 {
		t.Fatalf("%d extra completions", n)
	}
	// A multi-packet SEND without AckReq on its FIRST: only the LAST is ACKed.
	r.send(bth.RCSendFirst, rPSN+1, false, bytes.Repeat([]byte{1}, 1024))
	r.send(bth.RCSendLast, rPSN+2, true, []byte{2, 2})
	r.expectAck(ack, rPSN+2)
	if wc := testharness.Wait(t, s.RCQ, time.Second); wc.ByteLen != 1026 || wc.Status != transport.Success {
		t.Fatalf("completion %+v", wc)
	}
	// A SEND interrupting a SEND in progress is an invalid request.
	r.send(bth.RCSendFirst, rPSN+3, false, bytes.Repeat([]byte{1}, 1024))
	r.send(bth.RCSendOnly, rPSN+4, true, []byte{3})
	r.expectAck(nakInvalid, rPSN+4)
	if s.QP.State() != transport.Err {
		t.Fatal("QP not in ERR")
	}
	// The receive WQE in use completes with the error, the rest flush.
	if wc := testharness.Wait(t, s.RCQ, time.Second); wc.Status != transport.RemInvReqErr {
		t.Fatalf("completion %+v", wc)
	}
	if wc := testharness.Wait(t, s.RCQ, time.Second); wc.Status != transport.WRFlushErr {
		t.Fatalf("completion %+v", wc)
	}
}

func TestResponderRNR(t *testing.T) {
	s, r, _ := newRaw(t, testharness.Options{MinRNR: 14})
	r.send(bth.RCSendOnly, rPSN, true, []byte("x"))
	r.expectAck(bth.RNRNAKSyndrome(14), rPSN)
	if got := s.Dev.Counters().SendRNRErr.Load(); got != 1 {
		t.Fatalf("send_rnr_err %d", got)
	}
	// Packets that follow the RNR'd one wait for its retry: no sequence NAK.
	r.send(bth.RCSendOnly, rPSN+1, true, []byte("y"))
	r.quiet()
	// The PSN was not consumed: after a receive is posted the retry lands.
	testharness.Must(t, s.QP.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{s.MR.SGE(0, 64)}}))
	r.send(bth.RCSendOnly, rPSN, true, []byte("x"))
	r.expectAck(ack, rPSN)
	// WRITE with immediate needs a receive WQE too; no memory is touched
	// before the RNR NAK.
	r.send(bth.RCWriteOnlyImm, rPSN+1, true, []byte("zz"), reth(s.MR.Addr()+100, s.MR.RKey(), 2),
		func(p []byte, i *bth.Info) { bth.ImmDt(p[i.Offset(bth.ExtImmDt):]).SetImm(7) })
	r.expectAck(bth.RNRNAKSyndrome(14), rPSN+1)
	if s.Buf[100] != 0 {
		t.Fatal("memory written before the RNR NAK")
	}
}

func TestResponderReadReplay(t *testing.T) {
	s, r, _ := newRaw(t, testharness.Options{})
	fill(s.Buf[:5000], 3)
	r.send(bth.RCReadRequest, rPSN, true, nil, reth(s.MR.Addr(), s.MR.RKey(), 5000))
	want := []bth.OpCode{bth.RCReadResponseFirst, bth.RCReadResponseMiddle, bth.RCReadResponseMiddle,
		bth.RCReadResponseMiddle, bth.RCReadResponseLast}
	var got []byte
	for i, op := range want {
		p := r.expect(time.Second)
		if p.OpCode() != op || uint32(p.BTH().PSN()) != rPSN+uint32(i) {
			t.Fatalf("response %d: %v psn %d", i, p.OpCode(), p.BTH().PSN())
		}
		if a := p.AETH(); a != nil && a.MSN() != 1 {
			t.Fatalf("response %d MSN %d, want 1", i, a.MSN())
		}
		got = append(got, p.Payload()...)
	}
	if !bytes.Equal(got, s.Buf[:5000]) {
		t.Fatal("READ data differs")
	}
	// The next request's PSN is past the READ's five.
	testharness.Must(t, s.QP.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{s.MR.SGE(8192, 64)}}))
	r.send(bth.RCSendOnly, rPSN+5, true, []byte("after"))
	r.expectAck(ack, rPSN+5)
	// A retried READ for its last three packets is answered from the
	// responder resources, starting with a FIRST at the PSN asked for.
	fill(s.Buf[:5000], 4) // responses read memory as it is now
	r.send(bth.RCReadRequest, rPSN+2, true, nil, reth(s.MR.Addr()+2048, s.MR.RKey(), 5000-2048))
	for i, op := range []bth.OpCode{bth.RCReadResponseFirst, bth.RCReadResponseMiddle, bth.RCReadResponseLast} {
		p := r.expect(time.Second)
		if p.OpCode() != op || uint32(p.BTH().PSN()) != rPSN+2+uint32(i) {
			t.Fatalf("replay %d: %v psn %d", i, p.OpCode(), p.BTH().PSN())
		}
		if off := 2048 + 1024*i; !bytes.Equal(p.Payload(), s.Buf[off:off+p.PayloadLen()]) {
			t.Fatalf("replay %d data differs", i)
		}
	}
}

func TestResponderAtomicReplay(t *testing.T) {
	s, r, _ := newRaw(t, testharness.Options{})
	binary.LittleEndian.PutUint64(s.Buf[64:], 10)
	r.send(bth.RCFetchAdd, rPSN, true, nil, atomicETH(s.MR.Addr()+64, s.MR.RKey(), 5, 0))
	p := r.expect(time.Second)
	if p.OpCode() != bth.RCAtomicAcknowledge || p.AtomicAckETH().OrigData() != 10 {
		t.Fatalf("%v orig %d", p.OpCode(), p.AtomicAckETH().OrigData())
	}
	// The duplicate gets the same answer and does not add again.
	r.send(bth.RCFetchAdd, rPSN, true, nil, atomicETH(s.MR.Addr()+64, s.MR.RKey(), 5, 0))
	p = r.expect(time.Second)
	if p.OpCode() != bth.RCAtomicAcknowledge || p.AtomicAckETH().OrigData() != 10 || uint32(p.BTH().PSN()) != rPSN {
		t.Fatalf("replay: %v orig %d", p.OpCode(), p.AtomicAckETH().OrigData())
	}
	if v := binary.LittleEndian.Uint64(s.Buf[64:]); v != 15 {
		t.Fatalf("memory %d, want 15: the duplicate was executed", v)
	}
}

func TestResponderDropsForeignPackets(t *testing.T) {
	s, r, net := newRaw(t, testharness.Options{})
	testharness.Must(t, s.QP.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{s.MR.SGE(0, 64)}}))
	// From an address other than the QP's peer: dropped.
	stranger := newRawPeer(t, net, "10.0.0.77")
	stranger.dst = s
	stranger.send(bth.RCSendOnly, rPSN, true, []byte("x"))
	// With a foreign P_Key: dropped.
	r.send(bth.RCSendOnly, rPSN, true, []byte("y"), func(p []byte, _ *bth.Info) { bth.BTH(p).SetPKey(0x8001) })
	r.quiet() // counts what went to the stranger too
	c := s.Dev.Counters()
	if c.BadSource.Load() != 1 || c.BadPKey.Load() != 1 {
		t.Fatalf("bad_source %d bad_pkey %d", c.BadSource.Load(), c.BadPKey.Load())
	}
	// A corrupted ICRC never reaches the QP.
	r.send(bth.RCSendOnly, rPSN, true, []byte("z"), func(p []byte, _ *bth.Info) {})
	net.SetFaults(r.addr, s.Addr, mem.Faults{Corrupt: 1})
	r.send(bth.RCSendOnly, rPSN, true, []byte("z"))
	r.expectAck(ack, rPSN) // the first, intact one
	// The fence must get through.
	net.SetFaults(r.addr, s.Addr, mem.Faults{})
	r.quiet()
	if c.ICRCErr.Load()+c.Malformed.Load() != 1 {
		t.Fatalf("icrc_err %d malformed %d", c.ICRCErr.Load(), c.Malformed.Load())
	}
}

// TestDestroyAfterLastReceiveAcks destroys a QP the moment its receive
// completes, before the receive burst ends (the ACK is still queued then),
// as a ping-pong that has counted its last message does: the ACK must still
// go out, or the peer's send never completes.
func TestDestroyAfterLastReceiveAcks(t *testing.T) {
	s, r, _ := newRaw(t, testharness.Options{})
	testharness.Must(t, s.QP.PostRecv(&transport.RecvWR{WRID: 7, SGL: []transport.SGE{s.MR.SGE(0, 4096)}}))
	dg := r.build(bth.RCSendOnly, rPSN, true, bytes.Repeat([]byte{1}, 64))[nic.Headroom:]
	// The device's receive path, driven by hand so that the burst stays open.
	var b transport.Burst
	s.Dev.Input(nic.Frame{B: dg}, &b)
	if wc := testharness.Wait(t, s.RCQ, time.Second); wc.Status != transport.Success || wc.WRID != 7 {
		t.Fatalf("receive %+v", wc)
	}
	testharness.Must(t, s.Dev.DestroyQP(s.QP))
	b.Flush()
	r.expectAck(ack, rPSN)
	r.sentNoMore()
}

// TestErrAfterLastReceiveAcks moves a QP to ERR the moment its receive
// completes, before the receive burst ends, as rdma_disconnect does in a
// program that disconnects once its last message came (librdmacm's
// rdma_client): the queued ACK must still go out, or the peer's send never
// completes (rxe retries it for ever).
func TestErrAfterLastReceiveAcks(t *testing.T) {
	s, r, _ := newRaw(t, testharness.Options{})
	testharness.Must(t, s.QP.PostRecv(&transport.RecvWR{WRID: 7, SGL: []transport.SGE{s.MR.SGE(0, 4096)}}))
	dg := r.build(bth.RCSendOnly, rPSN, true, bytes.Repeat([]byte{1}, 64))[nic.Headroom:]
	var b transport.Burst
	s.Dev.Input(nic.Frame{B: dg}, &b)
	if wc := testharness.Wait(t, s.RCQ, time.Second); wc.Status != transport.Success || wc.WRID != 7 {
		t.Fatalf("receive %+v", wc)
	}
	testharness.Must(t, s.QP.Modify(&transport.QPAttr{State: transport.Err}, transport.AttrState))
	b.Flush()
	r.expectAck(ack, rPSN)
	r.sentNoMore()
}

// TestResponderPartialRetransmission replays what rxe sent in the stalled
// interop cases (interop/README.md, "A stall under load" and "rxe's
// requester stalls again, after a lost ACK"): a message acknowledged at
// its LAST, then a retransmission of it, while this side's own SEND goes
// out. A duplicate is acknowledged again as a new request is: only where
// it asks (AckReq), with its own PSN and the MSN unchanged (C9-105, ACKs
// coalesced). So no ACK covers a packet the requester has not sent again:
// one that did let rxe complete the WQE it was still retransmitting and
// stop for good. The duplicate LAST's ACK carries the WQE's last PSN,
// which is what rxe's completer completes a retried WQE on. Nothing is
// delivered twice, and the peer's next message is taken at LAST+1.
func TestResponderPartialRetransmission(t *testing.T) {
	s, r, _ := newRaw(t, testharness.Options{})
	const n = 4 // packets in the peer's message
	mtu := transport.MTU1024.Bytes()
	for i := range 2 {
		testharness.Must(t, s.QP.PostRecv(&transport.RecvWR{WRID: uint64(i), SGL: []transport.SGE{s.MR.SGE(i*n*mtu, n*mtu)}}))
	}
	msg := func(psn uint32, first, count int) {
		for i := first; i < first+count; i++ {
			op := bth.RCSendMiddle
			switch i {
			case 0:
				op = bth.RCSendFirst
			case n - 1:
				op = bth.RCSendLast
			}
			r.send(op, psn+uint32(i), i == n-1, bytes.Repeat([]byte{byte(psn + uint32(i))}, mtu))
		}
	}
	last := uint32(rPSN + n - 1)
	msg(rPSN, 0, n)
	if p := r.expectAck(ack, last); p.AETH().MSN() != 1 {
		t.Fatalf("MSN %d, want 1", p.AETH().MSN())
	}
	if wc := testharness.Wait(t, s.RCQ, time.Second); wc.WRID != 0 || wc.ByteLen != uint32(n*mtu) {
		t.Fatalf("completion %+v", wc)
	}
	payload := func(psn uint32) []byte { return bytes.Repeat([]byte{byte(psn)}, mtu) }
	// The retransmission's FIRST and MIDDLE, no AckReq: no ACK. The fence
	// (a duplicate with AckReq) must be answered first.
	msg(rPSN, 0, 2)
	r.fence()
	// A MIDDLE with AckReq (rxe asks every 65 packets): its own PSN.
	r.send(bth.RCSendMiddle, rPSN+2, true, payload(rPSN+2))
	if p := r.expectAck(ack, rPSN+2); p.AETH().MSN() != 1 {
		t.Fatalf("re-ACK of a MIDDLE: MSN %d, want 1", p.AETH().MSN())
	}
	// The duplicate LAST: the message's last PSN, which completes rxe's WQE.
	r.send(bth.RCSendLast, last, true, payload(last))
	if p := r.expectAck(ack, last); p.AETH().MSN() != 1 {
		t.Fatalf("re-ACK of the LAST: MSN %d, want 1", p.AETH().MSN())
	}
	next := func(want func(p bth.Packet) bool) {
		t.Helper()
		if p := r.expect(2 * time.Second); !want(p) {
			t.Fatalf("unexpected %v psn %d", p.OpCode(), p.BTH().PSN())
		}
	}
	// This side's own message goes out and is acknowledged.
	testharness.Must(t, s.QP.PostSend(&transport.SendWR{WRID: 7, Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{s.MR.SGE(3*n*mtu, 64)}}))
	next(func(p bth.Packet) bool { return p.OpCode() == bth.RCSendOnly && uint32(p.BTH().PSN()) == sPSN })
	r.send(bth.RCAcknowledge, sPSN, false, nil, aeth(ack, 1))
	// The peer's next message is taken at LAST+1.
	msg(rPSN+n, 0, n)
	next(func(p bth.Packet) bool {
		return p.OpCode() == bth.RCAcknowledge && p.AETH().Syndrome() == ack &&
			uint32(p.BTH().PSN()) == last+n && p.AETH().MSN() == 2
	})
	if wc := testharness.Wait(t, s.SCQ, time.Second); wc.WRID != 7 || wc.Status != transport.Success {
		t.Fatalf("send completion %+v", wc)
	}
	if wc := testharness.Wait(t, s.RCQ, time.Second); wc.WRID != 1 || wc.ByteLen != uint32(n*mtu) {
		t.Fatalf("second message: completion %+v (the duplicates must not be delivered)", wc)
	}
	// FIRST, MIDDLE, the fence, MIDDLE, LAST.
	if got := s.Dev.Counters().DuplicateRequest.Load(); got != 5 {
		t.Fatalf("duplicate_request %d, want 5", got)
	}
}
