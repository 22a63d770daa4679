package bth

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"testing"

	"github.com/goroce/goroce/inet"
)

// roundTrip encodes f, decodes the frame and its fields and returns them.
func roundTrip(t *testing.T, f *Fields) (Frame, *Fields) {
	t.Helper()
	b := mustAppend(t, f)
	fr, err := DecodeEthernet(b)
	if f.Ethernet == nil {
		fr, err = DecodeIP(b)
	}
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if !fr.VerifyICRC() {
		t.Fatal("ICRC of an encoded frame does not verify")
	}
	got, err := DecodeFields(fr)
	if err != nil {
		t.Fatalf("decode fields: %v", err)
	}
	if raw := got.AppendRaw(nil); !bytes.Equal(raw, b) {
		t.Fatalf("AppendRaw of decoded fields differs:\n got %x\nwant %x", raw, b)
	}
	var src, dst netip.Addr
	if got.IPv4 != nil {
		src, dst = got.IPv4.Src, got.IPv4.Dst
	} else {
		src, dst = got.IPv6.Src, got.IPv6.Dst
	}
	if fr.SrcAddr() != src || fr.DstAddr() != dst {
		t.Fatalf("Frame addresses %v -> %v, fields %v -> %v", fr.SrcAddr(), fr.DstAddr(), src, dst)
	}
	return fr, got
}

// computed returns f with what Append computes filled in as got has it,
// so the two can be compared whole.
func computed(f, got *Fields) *Fields {
	w := *f
	w.RoCE.BTH.PadCount = got.RoCE.BTH.PadCount
	w.RoCE.Pad = got.RoCE.Pad
	w.RoCE.ICRC = got.RoCE.ICRC
	w.UDP.Length = got.UDP.Length
	if w.Ethernet != nil {
		e := *w.Ethernet
		e.EtherType = got.Ethernet.EtherType
		w.Ethernet = &e
	}
	if w.IPv4 != nil {
		ip := *w.IPv4
		ip.IHL, ip.TotalLength, ip.Checksum, ip.Options = got.IPv4.IHL, got.IPv4.TotalLength, got.IPv4.Checksum, got.IPv4.Options
		w.IPv4 = &ip
	}
	if w.IPv6 != nil {
		ip := *w.IPv6
		ip.PayloadLength = got.IPv6.PayloadLength
		ip.Src, ip.Dst = netip.AddrFrom16(ip.Src.As16()), netip.AddrFrom16(ip.Dst.As16())
		w.IPv6 = &ip
	}
	return &w
}

// TestFieldsEveryOpcode builds a frame of every defined opcode with every
// field of its headers set, over IPv4 and IPv6, and decodes it back.
func TestFieldsEveryOpcode(t *testing.T) {
	for _, w := range opcodeTable {
		for _, v6 := range []bool{false, true} {
			n := 0
			if w.payload {
				n = 13
			}
			if w.op == RCAtomicWrite {
				n = 8
			}
			f := testFields(w.op, n)
			if v6 {
				f.IPv4 = nil
				f.IPv6 = &IPv6Fields{TrafficClass: 0x02, FlowLabel: 0xfedcb, NextHeader: inet.ProtoUDP, HopLimit: 64, Src: testSrc6, Dst: testDst6}
			}
			r := &f.RoCE
			r.BTH.SE, r.BTH.MigReq, r.BTH.FECN, r.BTH.BECN = true, true, true, true
			r.BTHResv6, r.BTHResv7 = 0x15, 0x2a
			r.RDETH = RDETHFields{Resv: 0x99, EECnxt: 0xabcdef}
			r.DETH = DETHFields{QKey: 0x80010000, Resv: 0x77, SrcQP: 0x000001}
			r.XRCETH = XRCETHFields{Resv: 0x55, XRCSRQ: 0x123456}
			r.FETH = FETHFields{Resv: 0x3ffffff, SelectivityLevel: 2, PlacementType: 0xa}
			r.RETH = RETHFields{VA: 0x00007f0012345678, RKey: 0x1234, DMALen: 0x10000}
			r.AtomicETH = AtomicETHFields{VA: 0xfffffffffffffff8, RKey: 0x4321, SwapAdd: 0x0102030405060708, Compare: 0x1112131415161718}
			r.ImmDt = 0xcafef00d
			r.IETH = 0x55667788
			r.AETH = AETHFields{Syndrome: RNRNAKSyndrome(12), MSN: 0xfffffe}
			r.AtomicAckETH = 0x8877665544332211
			r.CNPReserved = [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
			// Keep only what the opcode carries: the rest is not encoded.
			info := w.op.Info()
			keep := TransportFields{BTH: r.BTH, BTHResv6: r.BTHResv6, BTHResv7: r.BTHResv7, Payload: r.Payload}
			for _, e := range w.hdrs {
				switch e {
				case rd:
					keep.RDETH = r.RDETH
				case dt:
					keep.DETH = r.DETH
				case xrc:
					keep.XRCETH = r.XRCETH
				case fe:
					keep.FETH = r.FETH
				case re:
					keep.RETH = r.RETH
				case at:
					keep.AtomicETH = r.AtomicETH
				case im:
					keep.ImmDt = r.ImmDt
				case ie:
					keep.IETH = r.IETH
				case ae:
					keep.AETH = r.AETH
				case aa:
					keep.AtomicAckETH = r.AtomicAckETH
				case cnp:
					keep.CNPReserved = r.CNPReserved
				}
			}
			if n == 0 {
				keep.Payload = nil
			}
			fr, got := roundTrip(t, f)
			if p, _ := Parse(fr.RoCE()); p.HdrLen() != info.HdrLen || p.PayloadLen() != n {
				t.Errorf("%v: parsed header length %d payload %d", w.op, p.HdrLen(), p.PayloadLen())
			}
			f.RoCE = keep
			if want := computed(f, got); !reflect.DeepEqual(got, want) {
				t.Errorf("%v IPv6=%v: decoded\n%+v\nwant\n%+v", w.op, v6, got.RoCE, want.RoCE)
			}
		}
	}
}

func TestFieldsFraming(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Fields)
		len  int // of the frame without payload and transport
	}{
		{"plain", func(*Fields) {}, 14 + 20 + 8},
		{"802.1Q", func(f *Fields) {
			f.Ethernet.VLANs = []VLANTag{{TPID: EtherTypeVLAN, PCP: 3, DEI: true, VID: 100}}
		}, 18 + 20 + 8},
		{"QinQ", func(f *Fields) {
			f.Ethernet.VLANs = []VLANTag{{TPID: EtherTypeQinQ, PCP: 7, VID: 4095}, {TPID: EtherTypeVLAN, VID: 1}}
		}, 22 + 20 + 8},
		{"IPv4 options", func(f *Fields) {
			f.IPv4.Options = []byte{0x94, 0x04, 0, 0, 0x01, 0x01, 0x01, 0x00} // router alert, NOPs, end
		}, 14 + 28 + 8},
		{"IPv4 options padded", func(f *Fields) { f.IPv4.Options = []byte{0x01} }, 14 + 24 + 8},
		{"raw IPv4", func(f *Fields) { f.Ethernet = nil }, 20 + 8},
		{"raw IPv6", func(f *Fields) {
			f.Ethernet = nil
			f.IPv4 = nil
			f.IPv6 = &IPv6Fields{NextHeader: inet.ProtoUDP, HopLimit: 1, Src: testSrc6, Dst: testDst6}
		}, 40 + 8},
		{"IPv4-mapped IPv6", func(f *Fields) {
			f.IPv4 = nil
			f.IPv6 = &IPv6Fields{NextHeader: inet.ProtoUDP, HopLimit: 1,
				Src: netip.AddrFrom16(testSrc4.As16()), Dst: netip.AddrFrom16(testDst4.As16())}
		}, 14 + 40 + 8},
		{"trailer", func(f *Fields) { f.Trailer = []byte{0, 0, 0, 0} }, 14 + 20 + 8 + 4},
	} {
		f := testFields(RCSendOnly, 4)
		tc.mod(f)
		fr, got := roundTrip(t, f)
		if l := len(fr.Bytes()) + len(got.Trailer) - f.RoCE.Len(); l != tc.len {
			t.Errorf("%s: framing %d bytes, want %d", tc.name, l, tc.len)
		}
		if want := computed(f, got); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: decoded\n%+v\nwant\n%+v", tc.name, got, want)
		}
		if got.IPv4 != nil && got.IPv4.Checksum != inet.IPv4(fr.IP()).CalculateChecksum() {
			t.Errorf("%s: IPv4 checksum not computed", tc.name)
		}
	}
}

func TestFieldsAppendErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Fields)
	}{
		{"no IP", func(f *Fields) { f.IPv4 = nil }},
		{"two IPs", func(f *Fields) { f.IPv6 = &IPv6Fields{Src: testSrc6, Dst: testDst6} }},
		{"IPv6 address in IPv4", func(f *Fields) { f.IPv4.Dst = testDst6 }},
		{"no address in IPv4", func(f *Fields) { f.IPv4.Src = netip.Addr{} }},
		{"IPv4 address in IPv6", func(f *Fields) { f.IPv4 = nil; f.IPv6 = &IPv6Fields{Src: testSrc4, Dst: testDst6} }},
		{"three VLAN tags", func(f *Fields) { f.Ethernet.VLANs = make([]VLANTag, 3) }},
		{"41 bytes of options", func(f *Fields) { f.IPv4.Options = make([]byte, 41) }},
		{"64 KiB", func(f *Fields) { f.RoCE.Payload = make([]byte, 65536-20-8-12-4) }},
	} {
		f := testFields(RCSendOnly, 4)
		tc.mod(f)
		b, err := f.Append([]byte{1, 2})
		var ee EncodeError
		if !errors.As(err, &ee) || !bytes.Equal(b, []byte{1, 2}) {
			t.Errorf("%s: got %v and %d bytes, want an EncodeError and nothing appended", tc.name, err, len(b))
		}
	}
	// Up to the limit it works (payload plus pad is a multiple of 4).
	f := testFields(RCSendOnly, 65532-20-8-12-4)
	if _, err := f.Append(nil); err != nil {
		t.Errorf("65532-byte datagram: %v", err)
	}
}

// TestFieldsAppendRaw: AppendRaw writes what it is given, including what a
// correct sender never sends, and the parser notices.
func TestFieldsAppendRaw(t *testing.T) {
	f := testFields(RCSendOnly, 4)
	good := mustAppend(t, f)
	fr, _ := DecodeEthernet(good)
	d, _ := DecodeFields(fr)
	d.RoCE.BTH.OpCode = 0x1f // reserved: BTH alone, then the payload
	raw := d.AppendRaw(nil)
	if len(raw) != len(good) || !bytes.Equal(raw[:EthHeaderLen+28], good[:EthHeaderLen+28]) || raw[EthHeaderLen+28] != 0x1f {
		t.Errorf("reserved opcode frame % x", raw)
	}
	fr, err := DecodeEthernet(raw)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(fr.RoCE()); err != ErrReservedOpcode {
		t.Errorf("reserved opcode: %v", err)
	}
	if _, err := DecodeFields(fr); err != ErrReservedOpcode {
		t.Errorf("DecodeFields of a reserved opcode: %v", err)
	}
	// Pad bytes are carried as they are: a sender writing garbage there
	// is visible and the ICRC covers them.
	f = testFields(RCSendOnly, 3)
	f.RoCE.Pad = []byte{0xab}
	fr, got := roundTrip(t, f)
	if !bytes.Equal(got.RoCE.Pad, []byte{0xab}) || got.RoCE.BTH.PadCount != 1 {
		t.Errorf("pad %x count %d", got.RoCE.Pad, got.RoCE.BTH.PadCount)
	}
	// An address of the wrong family is written as zeros.
	f = testFields(RCSendOnly, 4)
	f.IPv4.Src = testSrc6
	if b := f.AppendRaw(nil); !bytes.Equal(b[EthHeaderLen+12:EthHeaderLen+16], []byte{0, 0, 0, 0}) {
		t.Errorf("IPv6 address in an IPv4 header written as % x", b[EthHeaderLen+12:EthHeaderLen+16])
	}
	// Decoding does not alias the frame's buffer.
	fr, _ = DecodeEthernet(good)
	d, _ = DecodeFields(fr)
	clear(good)
	if d.RoCE.Payload[0] == 0 {
		t.Error("decoded payload aliases the frame")
	}
}
