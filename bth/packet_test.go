package bth

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/goroce/goroce/inet"
)

var (
	testSrc4 = netip.MustParseAddr("198.51.100.1")
	testDst4 = netip.MustParseAddr("198.51.100.2")
	testSrc6 = netip.MustParseAddr("2001:db8::1")
	testDst6 = netip.MustParseAddr("2001:db8::2")
)

// testFields returns the fields of an Ethernet/IPv4 RoCEv2 frame with
// opcode op and n payload bytes.
func testFields(op OpCode, n int) *Fields {
	pay := make([]byte, n)
	for i := range pay {
		pay[i] = byte(i*7 + 1)
	}
	return &Fields{
		Ethernet: &EthernetFields{Dst: [6]byte{2, 0, 0, 0, 0, 2}, Src: [6]byte{2, 0, 0, 0, 0, 1}},
		IPv4:     &IPv4Fields{Flags: IPv4FlagDF, TTL: 64, Protocol: inet.ProtoUDP, Src: testSrc4, Dst: testDst4},
		UDP:      UDPFields{SrcPort: 0xc000, DstPort: UDPPort},
		RoCE: TransportFields{
			BTH:     BTHFields{OpCode: op, PKey: DefaultPKey, DestQP: 0x11, AckReq: true, PSN: 0x123456},
			Payload: pay,
		},
	}
}

func mustAppend(t testing.TB, f *Fields) []byte {
	t.Helper()
	b, err := f.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestErrors has a case for every kind of bth.Error: the smallest change to
// a good frame that produces it.
func TestErrors(t *testing.T) {
	good := mustAppend(t, testFields(RCSendOnly, 8))
	if fr, err := DecodeEthernet(good); err != nil || fr.CheckICRC() != nil {
		t.Fatalf("base frame: %v", err)
	}
	const ipOff = EthHeaderLen
	const udpOff = ipOff + inet.IPv4HeaderLen
	const bthOff = udpOff + inet.UDPHeaderLen
	fixCsum := func(b []byte) { h := inet.IPv4(b[ipOff:]); h.SetChecksum(h.CalculateChecksum()) }
	// transport builds a frame around a transport packet that mod made
	// malformed, its lengths and IP checksum right for its size.
	transport := func(op OpCode, n int, mod func(*TransportFields)) func([]byte) []byte {
		return func([]byte) []byte {
			f := testFields(op, n)
			f.RoCE.BTH.PadCount = uint8(PadFor(n))
			f.RoCE.Pad = make([]byte, PadFor(n))
			mod(&f.RoCE)
			f.Ethernet.EtherType = EtherTypeIPv4
			f.IPv4.IHL = 5
			f.UDP.Length = uint16(inet.UDPHeaderLen + f.RoCE.Len())
			f.IPv4.TotalLength = inet.IPv4HeaderLen + f.UDP.Length
			b := f.AppendRaw(nil)
			fixCsum(b)
			return b
		}
	}
	for _, tc := range []struct {
		name  string
		mod   func([]byte) []byte
		want  Error
		check func([]byte) error // default: DecodeEthernet, then Parse, then the ICRC
	}{
		{"truncated Ethernet", func(b []byte) []byte { return b[:13] }, ErrTruncated, nil},
		{"truncated IP", func(b []byte) []byte { return b[:ipOff+10] }, ErrTruncated, nil},
		{"truncated transport", nil, ErrTruncated, func([]byte) error { _, err := Parse(make([]byte, 15)); return err }},
		{"headers longer than packet", nil, ErrTruncated, func([]byte) error {
			_, err := Parse(append([]byte{byte(RCWriteOnly)}, make([]byte, 12+3)...))
			return err
		}},
		{"reserved opcode", transport(RCSendOnly, 8, func(t *TransportFields) { t.BTH.OpCode = 0x15 }), ErrReservedOpcode, nil},
		{"TVer 1", transport(RCSendOnly, 8, func(t *TransportFields) { t.BTH.TVer = 1 }), ErrTVer, nil},
		{"pad on ACK", transport(RCAcknowledge, 0, func(t *TransportFields) { t.BTH.PadCount = 1 }), ErrPadCount, nil},
		{"pad longer than payload", transport(RCSendOnly, 0, func(t *TransportFields) { t.BTH.PadCount = 3 }), ErrPadCount, nil},
		{"payload not aligned", transport(RCSendOnly, 5, func(t *TransportFields) { t.Pad = nil; t.BTH.PadCount = 0 }), ErrPayloadAlign, nil},
		{"payload on ACK", transport(RCAcknowledge, 0, func(t *TransportFields) { t.Payload = make([]byte, 4) }), ErrPayloadLength, nil},
		{"ATOMIC WRITE of 4 bytes", transport(RCAtomicWrite, 4, func(*TransportFields) {}), ErrPayloadLength, nil},
		{"ICRC", func(b []byte) []byte { b[bthOff+20]++; return b }, ErrICRC, nil},
		{"ARP", func(b []byte) []byte { b[12], b[13] = 0x08, 0x06; return b }, ErrNotIP, nil},
		{"three VLAN tags", func(b []byte) []byte {
			tags := []byte{0x81, 0, 0, 1, 0x81, 0, 0, 2, 0x81, 0, 0, 3}
			return append(append(append([]byte{}, b[:12]...), tags...), b[12:]...)
		}, ErrNotIP, nil},
		{"IP version 5", func(b []byte) []byte { b[ipOff] = 0x55; return b }, ErrIPVersion, nil},
		{"IPv4 under the IPv6 EtherType", func(b []byte) []byte { b[12], b[13] = 0x86, 0xdd; return b }, ErrIPVersion, nil},
		{"IHL 4", func(b []byte) []byte { b[ipOff] = 0x44; return b }, ErrIPHeaderLength, nil},
		{"IHL beyond frame", func(b []byte) []byte { return b[:ipOff+21] }, ErrIPHeaderLength, func(b []byte) error {
			b[ipOff] = 0x46
			_, err := DecodeEthernet(b)
			return err
		}},
		{"total length beyond frame", func(b []byte) []byte { b[ipOff+2]++; fixCsum(b); return b }, ErrIPLength, nil},
		{"total length below IHL", func(b []byte) []byte { b[ipOff+2], b[ipOff+3] = 0, 19; fixCsum(b); return b }, ErrIPLength, nil},
		{"more fragments", func(b []byte) []byte { b[ipOff+6] |= 0x20; fixCsum(b); return b }, ErrIPFragment, nil},
		{"fragment offset", func(b []byte) []byte { b[ipOff+7] = 1; fixCsum(b); return b }, ErrIPFragment, nil},
		{"IPv4 checksum", func(b []byte) []byte { b[ipOff+10]++; return b }, ErrIPChecksum, nil},
		{"TCP", func(b []byte) []byte { b[ipOff+9] = 6; fixCsum(b); return b }, ErrNotUDP, nil},
		{"UDP length", func(b []byte) []byte { b[udpOff+5]--; return b }, ErrUDPLength, nil},
		{"port 4790", func(b []byte) []byte { b[udpOff+3]--; return b }, ErrNotRoCEv2, nil},
		{"link type", nil, ErrLinkType, func(b []byte) error { _, err := DecodeLink(147, b); return err }},
	} {
		b := bytes.Clone(good)
		if tc.mod != nil {
			b = tc.mod(b)
		}
		var err error
		if tc.check != nil {
			err = tc.check(b)
		} else {
			var fr Frame
			if fr, err = DecodeEthernet(b); err == nil {
				if _, err = Parse(fr.RoCE()); err == nil {
					err = fr.CheckICRC()
				}
			}
		}
		if err != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
		var be Error
		if err != nil && (!errors.As(err, &be) || !strings.HasPrefix(err.Error(), "bth: ")) {
			t.Errorf("%s: %v is not a bth.Error", tc.name, err)
		}
	}
	for e := Error(1); e <= ErrLinkType; e++ {
		if s := e.Error(); s == "bth: malformed packet" || !strings.HasPrefix(s, "bth: ") {
			t.Errorf("Error(%d) has no text of its own: %q", e, s)
		}
	}
	if s := Error(200).Error(); s != "bth: malformed packet" {
		t.Errorf("unknown error: %q", s)
	}
}

// TestParseAccessors: the views a parsed packet hands out are the right
// bytes.
func TestParseAccessors(t *testing.T) {
	f := testFields(RCWriteOnlyImm, 5)
	f.RoCE.RETH = RETHFields{VA: 0x1122334455667788, RKey: 0xaabbccdd, DMALen: 5}
	f.RoCE.ImmDt = 0xdeadbeef
	b := mustAppend(t, f)
	fr, err := DecodeEthernet(b)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(fr.RoCE())
	if err != nil {
		t.Fatal(err)
	}
	if p.OpCode() != RCWriteOnlyImm || p.HdrLen() != 32 || p.PayloadLen() != 5 || p.PadCount() != 3 ||
		!bytes.Equal(p.Payload(), f.RoCE.Payload) || p.Info() != RCWriteOnlyImm.Info() {
		t.Errorf("packet %+v", p)
	}
	if r := p.RETH(); r.VA() != 0x1122334455667788 || r.RKey() != 0xaabbccdd || r.DMALen() != 5 {
		t.Errorf("RETH % x", []byte(r))
	}
	if p.ImmDt().Imm() != 0xdeadbeef || p.AETH() != nil || p.DETH() != nil || p.Ext(ExtIETH) != nil {
		t.Error("wrong extended headers")
	}
	if p.ICRC() != fr.StoredICRC() || p.ICRC() != fr.ComputeICRC() || !bytes.Equal(p.Bytes(), fr.RoCE()) {
		t.Error("ICRC or bytes disagree")
	}
	if h := p.BTH(); h.PSN() != 0x123456 || h.DestQP() != 0x11 || !h.AckReq() || h.PKey() != 0xffff || h.PadCount() != 3 {
		t.Errorf("BTH % x", []byte(h))
	}
}

func TestGRH(t *testing.T) {
	g := GRH(make([]byte, GRHLen))
	for i := range g {
		g[i] = 0xee // PutNetworkHeader must overwrite every byte
	}
	v4 := mustAppend(t, testFields(UDSendOnly, 4))[EthHeaderLen:]
	g.PutNetworkHeader(v4)
	if !g.IsIPv4() || !bytes.Equal(g[:20], make([]byte, 20)) || !bytes.Equal(g[20:], v4[:20]) {
		t.Errorf("IPv4 GRH area % x", []byte(g))
	}
	if g.Source() != testSrc4 {
		t.Errorf("IPv4 source %v", g.Source())
	}
	f := testFields(UDSendOnly, 4)
	f.IPv4 = nil
	f.IPv6 = &IPv6Fields{TrafficClass: 0xb8, FlowLabel: 0xabcde, NextHeader: inet.ProtoUDP, HopLimit: 9, Src: testSrc6, Dst: testDst6}
	v6 := mustAppend(t, f)[EthHeaderLen:]
	g.PutNetworkHeader(v6)
	if g.IsIPv4() || g.IPVer() != 6 || g.TClass() != 0xb8 || g.FlowLabel() != 0xabcde || g.NextHdr() != inet.ProtoUDP ||
		g.HopLimit() != 9 || int(g.PayLen()) != len(v6)-inet.IPv6HeaderLen {
		t.Errorf("IPv6 GRH % x", []byte(g))
	}
	if g.SGID() != testSrc6.As16() || g.DGID() != testDst6.As16() || g.Source() != testSrc6 {
		t.Errorf("IPv6 GIDs %x %x", g.SGID(), g.DGID())
	}
	if GIDAddr(AddrGID(testSrc4)) != testSrc4 || GIDAddr(AddrGID(testSrc6)) != testSrc6 {
		t.Error("GID conversion does not round trip")
	}
}
