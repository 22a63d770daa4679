package bth

import (
	"testing"
)

// Short names for the expected-header lists below.
const (
	rd  = ExtRDETH
	dt  = ExtDETH
	xrc = ExtXRCETH
	fe  = ExtFETH
	re  = ExtRETH
	at  = ExtAtomicETH
	im  = ExtImmDt
	ie  = ExtIETH
	ae  = ExtAETH
	aa  = ExtAtomicAckETH
	cnp = ExtCNPPad
)

type opWant struct {
	op      OpCode
	hdrs    []Ext // after the BTH, in wire order
	payload bool
}

// opcodeTable is IBA vol 1 table 38 written out row by row (plus FLUSH and
// ATOMIC WRITE of IBA 1.5 for RC, and the CNP of Annex A17), not derived
// the way opcode.go derives it.
var opcodeTable = []opWant{
	// RC
	{0x00, nil, true}, {0x01, nil, true}, {0x02, nil, true}, {0x03, []Ext{im}, true},
	{0x04, nil, true}, {0x05, []Ext{im}, true},
	{0x06, []Ext{re}, true}, {0x07, nil, true}, {0x08, nil, true}, {0x09, []Ext{im}, true},
	{0x0a, []Ext{re}, true}, {0x0b, []Ext{re, im}, true},
	{0x0c, []Ext{re}, false},
	{0x0d, []Ext{ae}, true}, {0x0e, nil, true}, {0x0f, []Ext{ae}, true}, {0x10, []Ext{ae}, true},
	{0x11, []Ext{ae}, false}, {0x12, []Ext{ae, aa}, false},
	{0x13, []Ext{at}, false}, {0x14, []Ext{at}, false},
	{0x16, []Ext{ie}, true}, {0x17, []Ext{ie}, true},
	{0x1c, []Ext{fe, re}, false}, {0x1d, []Ext{re}, true},
	// UC: SEND and RDMA WRITE only
	{0x20, nil, true}, {0x21, nil, true}, {0x22, nil, true}, {0x23, []Ext{im}, true},
	{0x24, nil, true}, {0x25, []Ext{im}, true},
	{0x26, []Ext{re}, true}, {0x27, nil, true}, {0x28, nil, true}, {0x29, []Ext{im}, true},
	{0x2a, []Ext{re}, true}, {0x2b, []Ext{re, im}, true},
	// RD: RDETH on every packet, DETH on requests
	{0x40, []Ext{rd, dt}, true}, {0x41, []Ext{rd, dt}, true}, {0x42, []Ext{rd, dt}, true},
	{0x43, []Ext{rd, dt, im}, true}, {0x44, []Ext{rd, dt}, true}, {0x45, []Ext{rd, dt, im}, true},
	{0x46, []Ext{rd, dt, re}, true}, {0x47, []Ext{rd, dt}, true}, {0x48, []Ext{rd, dt}, true},
	{0x49, []Ext{rd, dt, im}, true}, {0x4a, []Ext{rd, dt, re}, true}, {0x4b, []Ext{rd, dt, re, im}, true},
	{0x4c, []Ext{rd, dt, re}, false},
	{0x4d, []Ext{rd, ae}, true}, {0x4e, []Ext{rd}, true}, {0x4f, []Ext{rd, ae}, true}, {0x50, []Ext{rd, ae}, true},
	{0x51, []Ext{rd, ae}, false}, {0x52, []Ext{rd, ae, aa}, false},
	{0x53, []Ext{rd, dt, at}, false}, {0x54, []Ext{rd, dt, at}, false},
	{0x55, []Ext{rd, dt}, false}, // RESYNC
	// UD
	{0x64, []Ext{dt}, true}, {0x65, []Ext{dt, im}, true},
	// CNP
	{0x81, []Ext{cnp}, false},
	// XRC: XRCETH on every request
	{0xa0, []Ext{xrc}, true}, {0xa1, []Ext{xrc}, true}, {0xa2, []Ext{xrc}, true}, {0xa3, []Ext{xrc, im}, true},
	{0xa4, []Ext{xrc}, true}, {0xa5, []Ext{xrc, im}, true},
	{0xa6, []Ext{xrc, re}, true}, {0xa7, []Ext{xrc}, true}, {0xa8, []Ext{xrc}, true}, {0xa9, []Ext{xrc, im}, true},
	{0xaa, []Ext{xrc, re}, true}, {0xab, []Ext{xrc, re, im}, true},
	{0xac, []Ext{xrc, re}, false},
	{0xad, []Ext{ae}, true}, {0xae, nil, true}, {0xaf, []Ext{ae}, true}, {0xb0, []Ext{ae}, true},
	{0xb1, []Ext{ae}, false}, {0xb2, []Ext{ae, aa}, false},
	{0xb3, []Ext{xrc, at}, false}, {0xb4, []Ext{xrc, at}, false},
	{0xb6, []Ext{xrc, ie}, true}, {0xb7, []Ext{xrc, ie}, true},
}

func TestOpcodeTable(t *testing.T) {
	want := map[OpCode]opWant{}
	for _, w := range opcodeTable {
		want[w.op] = w
	}
	if len(want) != 85 {
		t.Fatalf("expected table has %d rows", len(want))
	}
	for o := 0; o < 256; o++ {
		op := OpCode(o)
		info, ok := Lookup(op)
		w, defined := want[op]
		if ok != defined || op.Valid() != defined {
			t.Errorf("%#02x: Lookup ok=%v Valid=%v, want %v", o, ok, op.Valid(), defined)
			continue
		}
		if !defined {
			if p := op.String(); p == "" || info.Name != "" {
				t.Errorf("%#02x: reserved opcode named %q / %q", o, p, info.Name)
			}
			continue
		}
		off := BTHLen
		var set ExtSet
		for _, e := range w.hdrs {
			if got := info.Offset(e); got != off {
				t.Errorf("%v: %v at offset %d, want %d", op, e, got, off)
			}
			off += e.Size()
			set |= 1 << e
		}
		if info.Headers != set {
			t.Errorf("%v: headers %b, want %b", op, info.Headers, set)
		}
		for e := Ext(0); e < numExts; e++ {
			if !set.Has(e) && info.Offset(e) != -1 {
				t.Errorf("%v: %v at %d, want absent", op, e, info.Offset(e))
			}
		}
		if info.HdrLen != off {
			t.Errorf("%v: HdrLen %d, want %d", op, info.HdrLen, off)
		}
		if info.HdrLen > MaxHdrLen {
			t.Errorf("%v: HdrLen %d beyond MaxHdrLen %d", op, info.HdrLen, MaxHdrLen)
		}
		if info.Payload != w.payload {
			t.Errorf("%v: Payload %v, want %v", op, info.Payload, w.payload)
		}
		if info.Transport != op.Transport() || info.Imm != set.Has(ExtImmDt) || info.Inv != set.Has(ExtIETH) {
			t.Errorf("%v: transport/imm/inv %v/%v/%v", op, info.Transport, info.Imm, info.Inv)
		}
		if info.Name != op.String() || info.Name[:len(op.Transport().String())] != op.Transport().String() {
			t.Errorf("%v: name %q", op, info.Name)
		}
		// Requests and responses: responses carry an AETH or are READ
		// response middles; nothing else does.
		resp := set.Has(ExtAETH) || info.Kind == KindReadResponse
		if info.IsRequest() == resp && info.Kind != KindCNP {
			t.Errorf("%v: IsRequest %v", op, info.IsRequest())
		}
	}
}

func TestOpcodeNamesAndKinds(t *testing.T) {
	for _, tc := range []struct {
		op   OpCode
		name string
		kind Kind
		pos  Position
	}{
		{RCSendFirst, "RC SEND First", KindSend, PosFirst},
		{RCSendMiddle, "RC SEND Middle", KindSend, PosMiddle},
		{RCSendLastInv, "RC SEND Last with Invalidate", KindSend, PosLast},
		{RCSendOnlyImm, "RC SEND Only with Immediate", KindSend, PosOnly},
		{RCWriteOnlyImm, "RC RDMA WRITE Only with Immediate", KindWrite, PosOnly},
		{RCReadRequest, "RC RDMA READ Request", KindReadRequest, PosNone},
		{RCReadResponseMiddle, "RC RDMA READ Response Middle", KindReadResponse, PosMiddle},
		{RCAcknowledge, "RC Acknowledge", KindAcknowledge, PosNone},
		{RCAtomicAcknowledge, "RC ATOMIC Acknowledge", KindAtomicAcknowledge, PosNone},
		{RCCompareSwap, "RC CmpSwap", KindCompareSwap, PosNone},
		{RCFetchAdd, "RC FetchAdd", KindFetchAdd, PosNone},
		{RCFlush, "RC FLUSH", KindFlush, PosNone},
		{RCAtomicWrite, "RC ATOMIC WRITE", KindAtomicWrite, PosNone},
		{UCWriteLastImm, "UC RDMA WRITE Last with Immediate", KindWrite, PosLast},
		{UDSendOnly, "UD SEND Only", KindSend, PosOnly},
		{UDSendOnlyImm, "UD SEND Only with Immediate", KindSend, PosOnly},
		{0x55, "RD RESYNC", KindResync, PosNone},
		{CNP, "CNP", KindCNP, PosNone},
		{0xa4, "XRC SEND Only", KindSend, PosOnly},
	} {
		i := tc.op.Info()
		if i.Name != tc.name || i.Kind != tc.kind || i.Pos != tc.pos {
			t.Errorf("%#02x: %q %v %v, want %q %v %v", uint8(tc.op), i.Name, i.Kind, i.Pos, tc.name, tc.kind, tc.pos)
		}
	}
	if got := OpCode(0x15).String(); got != "reserved opcode 0x15" {
		t.Errorf("reserved opcode string %q", got)
	}
	for tr, name := range map[Transport]string{TransportRC: "RC", TransportUC: "UC", TransportRD: "RD",
		TransportUD: "UD", TransportCNP: "CNP", TransportXRC: "XRC", 6: "MFR6", 7: "MFR7"} {
		if tr.String() != name {
			t.Errorf("transport %d: %q", tr, tr.String())
		}
	}
}

func TestPacketLen(t *testing.T) {
	for _, tc := range []struct {
		op   OpCode
		n    int
		want int
	}{
		{RCAcknowledge, 0, 12 + 4 + 4},
		{RCSendOnly, 1, 12 + 1 + 3 + 4},
		{RCSendOnly, 64, 12 + 64 + 4},
		{RCWriteOnlyImm, 2, 12 + 16 + 4 + 2 + 2 + 4},
		{UDSendOnly, 1024, 12 + 8 + 1024 + 4},
		{CNP, 0, 12 + 16 + 4},
	} {
		if got := PacketLen(tc.op, tc.n); got != tc.want {
			t.Errorf("PacketLen(%v, %d) = %d, want %d", tc.op, tc.n, got, tc.want)
		}
	}
	for n, want := range []int{0, 3, 2, 1, 0} {
		if PadFor(n) != want {
			t.Errorf("PadFor(%d) = %d", n, PadFor(n))
		}
	}
}

// TestFind reads the table backwards: every defined opcode is found from
// its own description, and nothing is found where table 38 defines no
// opcode.
func TestFind(t *testing.T) {
	found := 0
	for o := range 256 {
		info, ok := Lookup(OpCode(o))
		if !ok {
			continue
		}
		found++
		got, ok := Find(info.Transport, info.Kind, info.Pos, info.Imm, info.Inv)
		if !ok || got != OpCode(o) {
			t.Errorf("Find(%v, %v, %q, imm %v, inv %v) = %v, %v; want %v", info.Transport, info.Kind, info.Pos,
				info.Imm, info.Inv, got, ok, OpCode(o))
		}
	}
	if found == 0 {
		t.Fatal("no opcode defined")
	}
	for _, c := range []struct {
		t        Transport
		k        Kind
		p        Position
		imm, inv bool
	}{
		{TransportUC, KindSend, PosOnly, false, true}, // UC has no SEND with Invalidate
		{TransportUC, KindReadRequest, PosNone, false, false},
		{TransportUD, KindSend, PosFirst, false, false}, // UD messages are one packet
		{TransportRC, KindSend, PosMiddle, true, false}, // immediate data only at the end
		{TransportRC, KindWrite, PosLast, false, true},  // no WRITE with Invalidate
		{TransportRC, KindReadRequest, PosOnly, false, false},
		{TransportXRC, KindFlush, PosNone, false, false},
		{TransportRC, numKinds, PosNone, false, false},
		{TransportRC, KindSend, numPositions, false, false},
	} {
		if op, ok := Find(c.t, c.k, c.p, c.imm, c.inv); ok {
			t.Errorf("Find(%v, %v, %q, imm %v, inv %v) = %v; want none", c.t, c.k, c.p, c.imm, c.inv, op)
		}
	}
	for _, c := range []struct {
		first, last bool
		want        Position
	}{{true, true, PosOnly}, {true, false, PosFirst}, {false, false, PosMiddle}, {false, true, PosLast}} {
		if got := MessagePosition(c.first, c.last); got != c.want {
			t.Errorf("MessagePosition(%v, %v) = %v, want %v", c.first, c.last, got, c.want)
		}
	}
}
