package transport_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testharness"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/manualclock"
	"github.com/goroce/goroce/internal/rawpeer"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

// rawPeer is a hand-driven peer, the tests' scripted raw peer
// (internal/rawpeer) on a mem link: it sends packets built field by field
// and reads what the engine answers, so a test can play a misbehaving HCA.
type rawPeer struct {
	*rawpeer.Peer
	t    testing.TB
	addr netip.Addr
	qpn  uint32
	dst  *testharness.Peer
	clk  *manualclock.Clock // the device's clock (newRaw)
	read uint64             // packets taken from Rx
}

func newRawPeer(t testing.TB, net *mem.Net, addr string) *rawPeer {
	a := netip.MustParseAddr(addr)
	l, err := net.Attach(a, mem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := &rawPeer{Peer: rawpeer.New(l, a, netip.Addr{}, 0xc123, 1024, nil), t: t, addr: a, qpn: 0x99}
	t.Cleanup(func() { l.Close() })
	return r
}

// connectRaw moves s to RTS towards the raw peer.
func connectRaw(t testing.TB, s *testharness.Peer, r *rawPeer, o testharness.Options, sPSN, rPSN uint32) {
	r.dst = s
	sIdx, _ := s.Dev.GIDIndex(s.Addr)
	testharness.ModifyToRTS(t, s, o, r.qpn, transport.AHAttr{DGID: bth.GIDFromAddr(r.addr), SGIDIndex: sIdx}, sPSN, rPSN, transport.RTS)
}

// hdr sets a packet's extended headers before it is sealed.
type hdr = rawpeer.Hdr

var (
	reth      = rawpeer.RETH
	atomicETH = rawpeer.AtomicETH
	aeth      = rawpeer.AETH
)

// send builds and sends one packet to the connected QP.
func (r *rawPeer) send(op bth.OpCode, psn uint32, ackReq bool, payload []byte, hs ...hdr) {
	if err := r.SendBuilt(r.build(op, psn, ackReq, payload, hs...)); err != nil {
		r.t.Fatal(err)
	}
}

// build returns one sealed packet to the connected QP, its datagram at
// nic.Headroom.
func (r *rawPeer) build(op bth.OpCode, psn uint32, ackReq bool, payload []byte, hs ...hdr) []byte {
	r.Dst = r.dst.Addr // a test may point r at another device (r.dst)
	return r.Build(rawpeer.Packet{Op: op, DestQP: r.dst.QP.QPN(), PSN: psn, AckReq: ackReq, Payload: payload, Headers: hs})
}

// expect reads the next packet from the engine, failing after d.
func (r *rawPeer) expect(d time.Duration) bth.Packet {
	r.t.Helper()
	select {
	case rf, ok := <-r.Rx:
		if !ok {
			r.t.Fatal("link closed")
		}
		r.read++
		p, err := rawpeer.Decode(rf.Datagram)
		if err != nil {
			r.t.Fatalf("engine sent a bad packet: %v", err)
		}
		return p
	case <-time.After(d):
		r.t.Fatal("no packet from the engine")
	}
	return bth.Packet{}
}

// fencePSN is far behind any PSN a test uses, so a request there is a
// duplicate for every responder (IBA 9.7.5.1.3), in any state that answers.
const fencePSN = (rPSN - 1<<20) & bth.PSNMask

// fence proves that the engine has dealt with everything sent to it so far:
// it sends a duplicate SEND, which the responder acknowledges again
// (C9-105) after whatever the packets before it made it send, and requires
// that ACK to be the next packet. The receive path handles packets in
// order, so anything the earlier ones caused (a NAK, a request) would come
// first and fail here. It needs an RC QP in a state that answers.
func (r *rawPeer) fence() {
	r.t.Helper()
	r.send(bth.RCSendOnly, fencePSN, true, nil)
	p := r.expect(5 * time.Second)
	if p.OpCode() != bth.RCAcknowledge || p.AETH().Syndrome() != ack {
		r.t.Fatalf("unexpected packet %v psn %d (syndrome %v) before the fence's ACK",
			p.OpCode(), p.BTH().PSN(), aethSyndrome(p))
	}
}

func aethSyndrome(p bth.Packet) any {
	if a := p.AETH(); a != nil {
		return a.Syndrome()
	}
	return "none"
}

// quiet checks that the engine sent nothing more: after a fence, it must
// have sent exactly the packets read here (this counts what went to any
// address, so it also covers a stranger peer). Nothing is left to send
// later on its own: the device's timers run on r.clk, which only the test
// moves.
func (r *rawPeer) quiet() {
	r.t.Helper()
	r.fence()
	r.sentNoMore()
}

// sentNoMore checks that the engine sent no packet beyond those read here,
// without a fence, for a QP that no longer answers (ERR, destroyed): the
// caller has made sure the engine has handled what it was sent.
func (r *rawPeer) sentNoMore() {
	r.t.Helper()
	if sent := r.dst.Mem.Stats().TxPackets; sent != r.read {
		var extra []string
		for len(r.Rx) > 0 {
			dg := (<-r.Rx).Datagram
			f, _ := bth.DecodeIP(dg)
			p, _ := bth.Parse(f.RoCE())
			extra = append(extra, fmt.Sprintf("%v psn %d", p.OpCode(), p.BTH().PSN()))
		}
		r.t.Fatalf("engine sent %d packets, %d expected; unexpected: %v", sent, r.read, extra)
	}
}

// waitCount waits until a counter reaches want, failing if it does not
// within a generous bound (the bound is not the event: the count is) or if
// it goes past want.
func waitCount(t testing.TB, name string, load func() uint64, want uint64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); load() < want && time.Now().Before(deadline); {
		time.Sleep(100 * time.Microsecond)
	}
	if got := load(); got != want {
		t.Fatalf("%s %d, want %d", name, got, want)
	}
}

// expectAck reads an ACK/NAK and checks its syndrome class/code and PSN.
func (r *rawPeer) expectAck(syn bth.Syndrome, psn uint32) bth.Packet {
	r.t.Helper()
	p := r.expect(2 * time.Second)
	if p.OpCode() != bth.RCAcknowledge {
		r.t.Fatalf("got %v psn %d, want Acknowledge", p.OpCode(), p.BTH().PSN())
	}
	if got := p.AETH().Syndrome(); got != syn || uint32(p.BTH().PSN()) != psn {
		r.t.Fatalf("got %v psn %d, want %v psn %d", got, p.BTH().PSN(), syn, psn)
	}
	return p
}
