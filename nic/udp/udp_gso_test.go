package udp

import (
	"bytes"
	"net/netip"
	"testing"
	"unsafe"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/internal/linkio"
	"github.com/goroce/goroce/nic/internal/linktest"
	"golang.org/x/sys/unix"
)

// Opcodes of one RC message's packets.
const (
	opSendFirst, opSendMiddle, opSendLast = 0x00, 0x01, 0x02
	opWriteFirst, opWriteMiddle           = 0x06, 0x07
	opWriteLast                           = 0x08
	rethLen                               = 16
)

// message builds one RC message of n packets (FIRST, MIDDLEs, LAST) of
// payload bytes each from o, PSNs from psn0, as the engine builds and
// seals them. A WRITE's FIRST carries a RETH, so it is 16 bytes longer.
func message(o bth.Outer, write bool, psn0, n, payload int) []nic.Frame {
	frames := make([]nic.Frame, n)
	for i := range frames {
		op, ext := byte(opSendMiddle), 0
		switch {
		case i == 0 && write:
			op, ext = opWriteFirst, rethLen
		case i == 0:
			op = opSendFirst
		case i == n-1 && write:
			op = opWriteLast
		case i == n-1:
			op = opSendLast
		case write:
			op = opWriteMiddle
		}
		roceLen := bth.BTHLen + ext + payload + bth.ICRCLen
		b := make([]byte, nic.Headroom+o.Len()+roceLen)
		dg := b[nic.Headroom:]
		h := o.Put(dg, roceLen)
		bth.BTH(dg[h:]).Encode(&bth.BTHFields{OpCode: bth.OpCode(op), PKey: bth.DefaultPKey, DestQP: 0x11, PSN: bth.PSN(psn0 + i)})
		p := dg[h+bth.BTHLen+ext : len(dg)-bth.ICRCLen]
		for j := range p {
			p[j] = byte((psn0+i)*13 + j)
		}
		f, err := bth.DecodeIP(dg)
		if err != nil {
			panic(err)
		}
		f.PutICRC()
		frames[i] = nic.Frame{B: b, Off: nic.Headroom}
	}
	return frames
}

// roce returns a datagram's UDP payload (BTH through ICRC): what the
// sender built and the receiver must get byte for byte (the IPv4
// identification in front of it is the kernel's).
func roce(t *testing.T, dg []byte) []byte {
	t.Helper()
	f, err := bth.DecodeIP(dg)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return f.RoCE()
}

// receive takes want frames off l and checks each against sent, in order,
// byte for byte and verified. It returns the frames' buffers.
func receive(t *testing.T, l *Link, sent []nic.Frame) [][]byte {
	t.Helper()
	buf := make([]nic.Frame, 64)
	var got [][]byte
	for len(got) < len(sent) {
		k, err := l.Recv(buf)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range buf[:k] {
			i := len(got)
			if i >= len(sent) {
				t.Fatalf("more than the %d frames sent", len(sent))
			}
			if !f.Verified {
				t.Fatalf("frame %d not verified", i)
			}
			// Byte for byte but the ICRC: the sender corrected that for the
			// IPv4 identification the kernel gave the segment, and Verified
			// says it verifies.
			if w, g := roce(t, sent[i].Datagram()), roce(t, f.Datagram()); !bytes.Equal(w[:len(w)-bth.ICRCLen], g[:len(g)-bth.ICRCLen]) {
				t.Fatalf("frame %d: %d bytes, want %d, differ", i, len(g), len(w))
			}
			got = append(got, f.B)
		}
	}
	return got
}

// TestUDPGSOPlainReceiver: a GSO sender's message reaches a receiver
// without GRO as ordinary datagrams, one per packet, as rxe's receive
// takes them; and the message's FIRST packet left alone, the rest as one
// GSO send.
func TestUDPGSOPlainReceiver(t *testing.T) {
	a := openUDP(t, Config{Addr: netip.MustParseAddr("127.0.0.1")})
	b := openUDP(t, Config{Addr: netip.MustParseAddr("127.0.0.2"), NoGRO: true})
	if !a.GSO() || b.GRO() {
		t.Fatalf("sender GSO %v, receiver GRO %v", a.GSO(), b.GRO())
	}
	o := linktest.Outer(a, netip.MustParseAddr("127.0.0.2"), 1)
	const n = 12
	for _, write := range []bool{false, true} {
		s0, r0 := a.Stats(), b.Stats()
		sent := message(o, write, 0, n, 1024)
		if k, err := a.Send(sent); k != n || err != nil {
			t.Fatalf("Send: %d, %v", k, err)
		}
		receive(t, b, sent)
		s, r := a.Stats(), b.Stats()
		if d := s.TxGSOSegments - s0.TxGSOSegments; d != n-1 {
			t.Fatalf("write %v: %d packets sent as GSO segments, want %d (all but the FIRST)", write, d, n-1)
		}
		if r.RxGROSegments != r0.RxGROSegments || r.RxPackets-r0.RxPackets != n {
			t.Fatalf("receiver: %d coalesced, %d packets, want 0 and %d", r.RxGROSegments-r0.RxGROSegments, r.RxPackets-r0.RxPackets, n)
		}
	}
}

// TestUDPGSORefused: a send socket whose GSO sends the kernel refuses
// (SO_NO_CHECK: EINVAL, as EIO for a route without checksum offload)
// falls back to one datagram per packet and counts it; the link's other
// sockets keep GSO.
func TestUDPGSORefused(t *testing.T) {
	a := openUDP(t, Config{Addr: netip.MustParseAddr("127.0.0.1"), SrcPorts: 2})
	b := openUDP(t, Config{Addr: netip.MustParseAddr("127.0.0.2"), NoGRO: true})
	if len(a.tx) != 2 || !a.GSO() {
		t.Fatalf("%d send sockets, GSO %v", len(a.tx), a.GSO())
	}
	var serr error
	if err := a.tx[0].raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_NO_CHECK, 1) }); err != nil || serr != nil {
		t.Fatalf("SO_NO_CHECK: %v %v", err, serr)
	}
	const n = 8
	o := linktest.Outer(a, netip.MustParseAddr("127.0.0.2"), 1)
	for i, port := range []uint16{a.txPort[0], a.txPort[1], a.txPort[0]} {
		o.SrcPort = port
		s0 := a.Stats()
		sent := message(o, false, i*n, n, 512)
		if k, err := a.Send(sent); k != n || err != nil {
			t.Fatalf("Send from port %#x: %d, %v", port, k, err)
		}
		receive(t, b, sent)
		s := a.Stats()
		gso := s.TxGSOSegments - s0.TxGSOSegments
		if port == a.txPort[0] && gso != 0 || port == a.txPort[1] && gso != n-1 {
			t.Fatalf("send %d from port %#x: %d GSO segments", i, port, gso)
		}
		if s.TxPackets-s0.TxPackets != n || s.TxDropped != s0.TxDropped {
			t.Fatalf("send %d: %d packets sent, %d dropped", i, s.TxPackets-s0.TxPackets, s.TxDropped-s0.TxDropped)
		}
	}
	if s := a.Stats(); s.TxGSORefused != 1 || a.txGSO[0].Load() || !a.txGSO[1].Load() {
		t.Fatalf("refused %d; GSO per socket %v %v", s.TxGSORefused, a.txGSO[0].Load(), a.txGSO[1].Load())
	}
	if !a.Info().Offload.Has(nic.OffloadGSO) {
		t.Fatalf("offloads %v: a socket still sends with GSO", a.Info().Offload)
	}
}

// TestRunSplitInPlace: a GSO run arriving coalesced through GRO is split
// into frames where the kernel put it: once the queue has seen the run's
// segment size, every frame lies in the receive buffer itself, none in the
// copy area, and nothing is copied.
func TestRunSplitInPlace(t *testing.T) {
	a := openUDP(t, Config{Addr: netip.MustParseAddr("127.0.0.1")})
	b := openUDP(t, Config{Addr: netip.MustParseAddr("127.0.0.2")})
	if !a.GSO() || !b.GRO() {
		t.Fatalf("GSO %v, GRO %v", a.GSO(), b.GRO())
	}
	if want := nic.OffloadGSO | nic.OffloadGRO | nic.OffloadRxVerify; b.Info().Offload != want {
		t.Fatalf("offloads %v, want %v", b.Info().Offload, want)
	}
	o := linktest.Outer(a, netip.MustParseAddr("127.0.0.2"), 1)
	r := &b.rxq[0].r
	const n = 20
	// A run of MIDDLEs of 1000 bytes, cut at 1016: not the stride the
	// queue starts with (a 4096-byte MTU's), so the first is copied.
	run := func(psn0 int) []nic.Frame { return message(o, false, psn0, n+2, 1000)[1 : n+1] }
	for round := range 3 {
		s0 := b.Stats()
		sent := run(round * n)
		if k, err := a.Send(sent); k != n || err != nil {
			t.Fatalf("Send: %d, %v", k, err)
		}
		bufs := receive(t, b, sent)
		s := b.Stats()
		if s.RxGROSegments == s0.RxGROSegments {
			t.Fatal("the run did not arrive coalesced")
		}
		copies := s.RxGROCopies - s0.RxGROCopies
		if round == 0 {
			if copies == 0 {
				t.Fatal("a run cut at a size the queue was not laid out for counted no copies")
			}
			continue
		}
		if copies != 0 {
			t.Fatalf("round %d: %d copies", round, copies)
		}
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(r.buf)))
		for i, f := range bufs {
			if p := uintptr(unsafe.Pointer(unsafe.SliceData(f))); p < lo || p >= lo+uintptr(len(r.buf)) {
				t.Fatalf("round %d: frame %d is not in the receive buffer", round, i)
			}
		}
	}
}

// TestGROMalformed: a UDP_GRO control message with a segment size no
// RoCE sender cuts at, or not an int, drops its message, counted once,
// copying nothing; a well-formed one beside it is delivered.
func TestGROMalformed(t *testing.T) {
	for _, c := range []struct {
		name string
		size int // of the cmsg's value
		seg  uint32
	}{{"tiny", 4, 3}, {"zero", 4, 0}, {"huge", 4, 70000}, {"short", 2, 1040}} {
		t.Run(c.name, func(t *testing.T) {
			l := &Link{cfg: Config{Addr: netip.MustParseAddr("127.0.0.2")}, gro: true, info: nic.Info{MTU: 65536}}
			var r udpRx
			r.init(l, nil)
			from := netip.MustParseAddrPort("127.0.0.1:49152")
			for i := range 2 {
				linkio.PutSockaddr(&r.names[i], from, 0)
				r.msgs[i].Hdr.Flags = 0
			}
			// Message 0: 3000 bytes under the malformed size.
			r.msgs[0].Len = 3000
			r.msgs[0].Hdr.SetControllen(linkio.PutCmsg(r.ctrl[0][:], unix.SOL_UDP, unix.UDP_GRO, c.seg, c.size))
			// Message 1: one good packet.
			o := bth.Outer{Src: from.Addr(), Dst: l.cfg.Addr, SrcPort: from.Port()}
			good := roce(t, message(o, false, 0, 3, 200)[1].Datagram())
			copy(r.buf[r.slot+r.lay.phys(0):], good)
			r.msgs[1].Len = uint32(len(good))
			r.msgs[1].Hdr.SetControllen(0)
			r.got = 2
			frames := make([]nic.Frame, 64)
			k := r.deliver(frames)
			s := l.Stats()
			if k != 1 || s.RxDropped != 1 || s.RxGROCopies != 0 || s.RxPackets != 1 {
				t.Fatalf("%d frames, %d dropped, %d copies, %d packets", k, s.RxDropped, s.RxGROCopies, s.RxPackets)
			}
			if !bytes.Equal(roce(t, frames[0].Datagram()), good) || !frames[0].Verified {
				t.Fatal("the good packet came up changed")
			}
		})
	}
}

// FuzzSplitSeg: cutting a coalesced message into segments covers it
// exactly, no segment longer than the segment size and only the last
// shorter; and wherever the receive row's layout puts the bytes, each
// segment is read back as sent: in place, compacted (the first) or
// gathered.
func FuzzSplitSeg(f *testing.F) {
	f.Add(uint16(65000), uint16(4112), uint16(4112), uint16(0))
	f.Add(uint16(4128), uint16(4128), uint16(4112), uint16(1))
	f.Add(uint16(100), uint16(20), uint16(4112), uint16(2))
	f.Add(uint16(9000), uint16(3), uint16(256), uint16(3))
	f.Fuzz(func(t *testing.T, n, seg, stride, seed uint16) {
		nseg, ok := segments(int(n), int(seg))
		if !ok {
			if n > 0 && seg >= udpMinSeg {
				t.Fatalf("segments(%d, %d) refused", n, seg)
			}
			return
		}
		st := max(int(stride), udpMinStride)
		y := layout{stride: st, room: udpHdrRoom}
		msg := make([]byte, n)
		for i := range msg {
			msg[i] = byte(i*31) ^ byte(seed)
		}
		// The slot as the kernel fills the row of iovecs.
		k := (int(n) + st - 1) / st
		slot := make([]byte, k*(udpHdrRoom+st))
		for j := range k {
			copy(slot[y.phys(j*st):y.phys(j*st)+st], msg[j*st:min((j+1)*st, int(n))])
		}
		end := 0
		for i := range nseg {
			a, e := segment(i, int(n), int(seg))
			if a != end || e <= a || e-a > int(seg) || (i < nseg-1 && e-a != int(seg)) {
				t.Fatalf("segment %d of %d: [%d, %d) after %d, seg %d", i, nseg, a, e, end, seg)
			}
			end = e
		}
		if end != int(n) {
			t.Fatalf("segments end at %d of %d", end, n)
		}
		// In deliver's order: the first (which may be compacted over the
		// room behind it) before the rest, which must still be where the
		// layout says.
		for i := range nseg {
			a, e := segment(i, int(n), int(seg))
			var got []byte
			switch {
			case y.inPlace(a, e):
				if p := y.phys(a); p < nic.Headroom+40+8 {
					t.Fatalf("segment %d in place at %d: no room for headers", i, p)
				} else {
					got = slot[p : p+e-a]
				}
			case i == 0:
				y.compact(slot, e)
				got = slot[y.room : y.room+e]
			default:
				got = make([]byte, e-a)
				y.gather(got, slot, a, e)
			}
			if !bytes.Equal(got, msg[a:e]) {
				t.Fatalf("segment %d [%d, %d) of %d cut at %d, stride %d: bytes differ", i, a, e, n, seg, st)
			}
		}
	})
}
