package bth

import (
	"bytes"
	"net/netip"
	"testing"
)

// TestDraft: a packet built as a Draft decodes as what was asked, over
// IPv4 and IPv6, with its ICRC right and its pad zero, whatever the
// buffer held before.
func TestDraft(t *testing.T) {
	for _, tc := range []struct {
		name     string
		src, dst string
		op       OpCode
		pay      int
	}{
		{"v4 RDMA WRITE First", "192.0.2.1", "192.0.2.2", RCWriteFirst, 1024},
		{"v4 SEND Only padded", "192.0.2.1", "192.0.2.2", RCSendOnly, 5},
		{"v6 UD SEND Only", "2001:db8::1", "2001:db8::2", UDSendOnly, 256},
		{"v6 Acknowledge", "2001:db8::1", "2001:db8::2", RCAcknowledge, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Outer{Src: netip.MustParseAddr(tc.src), Dst: netip.MustParseAddr(tc.dst), SrcPort: 0xc123}
			n := DraftLen(&o, tc.op, tc.pay)
			buf := bytes.Repeat([]byte{0xee}, n+7) // stale bytes must not leak into the pad
			d := NewDraft(buf, &o, BTHFields{OpCode: tc.op, PKey: DefaultPKey, DestQP: 0x12345, PSN: 0xabcdef}, tc.pay)
			for i := range d.Payload() {
				d.Payload()[i] = byte(i)
			}
			info := d.Info()
			if info.Headers.Has(ExtRETH) {
				RETH(d.Ext(ExtRETH)).Encode(0x1000, 0x77, 4096)
			}
			if info.Headers.Has(ExtDETH) {
				DETH(d.Ext(ExtDETH)).SetQKey(0x11111111)
			}
			if info.Headers.Has(ExtAETH) {
				AETH(d.Ext(ExtAETH)).Encode(ACKSyndrome(CreditsInvalid), 9)
			}
			d.BTH().SetAckReq(true)
			dg := d.Seal()
			if len(dg) != n {
				t.Fatalf("datagram %d bytes, DraftLen %d", len(dg), n)
			}
			f, err := DecodeIP(dg)
			if err != nil || !f.VerifyICRC() {
				t.Fatalf("decode %v, ICRC ok %v", err, err == nil && f.VerifyICRC())
			}
			if f.SrcAddr() != o.Src || f.DstAddr() != o.Dst || f.UDP().SrcPort() != o.SrcPort {
				t.Errorf("outer %v > %v port %d", f.SrcAddr(), f.DstAddr(), f.UDP().SrcPort())
			}
			p, err := Parse(f.RoCE())
			if err != nil {
				t.Fatal(err)
			}
			b := p.BTH()
			if p.OpCode() != tc.op || b.DestQP() != 0x12345 || b.PSN() != 0xabcdef || !b.AckReq() || b.PadCount() != PadFor(tc.pay) {
				t.Errorf("BTH %v qp %#x psn %#x ackreq %v pad %d", p.OpCode(), b.DestQP(), b.PSN(), b.AckReq(), b.PadCount())
			}
			if got := p.Payload(); len(got) != tc.pay || (tc.pay > 0 && got[tc.pay-1] != byte(tc.pay-1)) {
				t.Errorf("payload %d bytes", len(got))
			}
			roce := f.RoCE()
			for _, c := range roce[len(roce)-ICRCLen-PadFor(tc.pay) : len(roce)-ICRCLen] {
				if c != 0 {
					t.Fatalf("pad not zero: % x", roce[len(roce)-ICRCLen-PadFor(tc.pay):])
				}
			}
			if r := p.RETH(); r != nil && (r.VA() != 0x1000 || r.DMALen() != 4096) {
				t.Errorf("RETH va %#x len %d", r.VA(), r.DMALen())
			}
			if a := p.AETH(); a != nil && a.MSN() != 9 {
				t.Errorf("AETH msn %d", a.MSN())
			}
		})
	}
}

// TestDraftReservedAndCut: a reserved opcode gets the BTH alone; Cut
// shortens the transport part and the ICRC still covers what is left.
func TestDraftReservedAndCut(t *testing.T) {
	o := Outer{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2")}
	buf := make([]byte, 2048)
	d := NewDraft(buf, &o, BTHFields{OpCode: 0x1f, DestQP: 1}, 8)
	if got := len(d.RoCE()); got != BTHLen+8+ICRCLen {
		t.Fatalf("reserved opcode: %d transport bytes, want %d", got, BTHLen+8+ICRCLen)
	}
	d = NewDraft(buf, &o, BTHFields{OpCode: RCWriteOnly, DestQP: 1}, 100)
	d.Cut(BTHLen + 4) // half a RETH
	dg := d.Seal()
	f, err := DecodeIP(dg)
	if err != nil || !f.VerifyICRC() {
		t.Fatalf("cut packet: decode %v", err)
	}
	if len(f.RoCE()) != BTHLen+4+ICRCLen {
		t.Fatalf("cut to %d transport bytes", len(f.RoCE()))
	}
	if _, err := Parse(f.RoCE()); err == nil {
		t.Fatal("a WRITE cut inside its RETH parsed")
	}
	d.Cut(0) // out of range: nothing changes
	if len(d.RoCE()) != BTHLen+4+ICRCLen {
		t.Fatal("Cut(0) changed the packet")
	}
}

// TestDraftNoAlloc: building and sealing into the caller's buffer
// allocates nothing, as the engine's send path needs.
func TestDraftNoAlloc(t *testing.T) {
	o := Outer{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2")}
	buf := make([]byte, 2048)
	if n := testing.AllocsPerRun(100, func() {
		d := NewDraft(buf, &o, BTHFields{OpCode: RCSendOnly, DestQP: 1}, 64)
		d.Seal()
	}); n != 0 {
		t.Fatalf("%v allocations per packet", n)
	}
}
