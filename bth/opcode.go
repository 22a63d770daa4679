package bth

import "fmt"

// OpCode is the BTH opcode: the transport in the top three bits and the
// operation in the low five (IBA vol 1, table 38).
type OpCode uint8

// Transport is the service a packet belongs to: the top three bits of the opcode.
type Transport uint8

// Transports, by the value of the opcode's top three bits.
const (
	TransportRC  Transport = 0 // reliable connection
	TransportUC  Transport = 1 // unreliable connection
	TransportRD  Transport = 2 // reliable datagram
	TransportUD  Transport = 3 // unreliable datagram
	TransportCNP Transport = 4 // RoCEv2 congestion notification packet
	TransportXRC Transport = 5 // extended reliable connection
)

var transportNames = [8]string{"RC", "UC", "RD", "UD", "CNP", "XRC", "MFR6", "MFR7"}

// String returns the transport's short name ("RC").
func (t Transport) String() string { return transportNames[t&7] }

// Transport returns the transport the opcode belongs to.
func (o OpCode) Transport() Transport { return Transport(o >> 5) }

// Operations within a transport (the low five bits). RC, UC, RD and XRC
// share this numbering; UD uses SendOnly and SendOnlyImm at 4 and 5.
const (
	SendFirst          OpCode = 0x00
	SendMiddle         OpCode = 0x01
	SendLast           OpCode = 0x02
	SendLastImm        OpCode = 0x03
	SendOnly           OpCode = 0x04
	SendOnlyImm        OpCode = 0x05
	WriteFirst         OpCode = 0x06
	WriteMiddle        OpCode = 0x07
	WriteLast          OpCode = 0x08
	WriteLastImm       OpCode = 0x09
	WriteOnly          OpCode = 0x0a
	WriteOnlyImm       OpCode = 0x0b
	ReadRequest        OpCode = 0x0c
	ReadResponseFirst  OpCode = 0x0d
	ReadResponseMiddle OpCode = 0x0e
	ReadResponseLast   OpCode = 0x0f
	ReadResponseOnly   OpCode = 0x10
	Acknowledge        OpCode = 0x11
	AtomicAcknowledge  OpCode = 0x12
	CompareSwap        OpCode = 0x13
	FetchAdd           OpCode = 0x14
	Resync             OpCode = 0x15 // RD only
	SendLastInv        OpCode = 0x16
	SendOnlyInv        OpCode = 0x17
	Flush              OpCode = 0x1c // IBA 1.5 (RC, XRC)
	AtomicWrite        OpCode = 0x1d // IBA 1.5 (RC, XRC)
	opTransportShift          = 5
	opOperationMask    OpCode = 0x1f
	cnpOperation       OpCode = 0x01
)

// Full opcodes of the transports goroce speaks, for readability at call sites.
const (
	RCSendFirst          = OpCode(TransportRC)<<opTransportShift | SendFirst
	RCSendMiddle         = OpCode(TransportRC)<<opTransportShift | SendMiddle
	RCSendLast           = OpCode(TransportRC)<<opTransportShift | SendLast
	RCSendLastImm        = OpCode(TransportRC)<<opTransportShift | SendLastImm
	RCSendOnly           = OpCode(TransportRC)<<opTransportShift | SendOnly
	RCSendOnlyImm        = OpCode(TransportRC)<<opTransportShift | SendOnlyImm
	RCWriteFirst         = OpCode(TransportRC)<<opTransportShift | WriteFirst
	RCWriteMiddle        = OpCode(TransportRC)<<opTransportShift | WriteMiddle
	RCWriteLast          = OpCode(TransportRC)<<opTransportShift | WriteLast
	RCWriteLastImm       = OpCode(TransportRC)<<opTransportShift | WriteLastImm
	RCWriteOnly          = OpCode(TransportRC)<<opTransportShift | WriteOnly
	RCWriteOnlyImm       = OpCode(TransportRC)<<opTransportShift | WriteOnlyImm
	RCReadRequest        = OpCode(TransportRC)<<opTransportShift | ReadRequest
	RCReadResponseFirst  = OpCode(TransportRC)<<opTransportShift | ReadResponseFirst
	RCReadResponseMiddle = OpCode(TransportRC)<<opTransportShift | ReadResponseMiddle
	RCReadResponseLast   = OpCode(TransportRC)<<opTransportShift | ReadResponseLast
	RCReadResponseOnly   = OpCode(TransportRC)<<opTransportShift | ReadResponseOnly
	RCAcknowledge        = OpCode(TransportRC)<<opTransportShift | Acknowledge
	RCAtomicAcknowledge  = OpCode(TransportRC)<<opTransportShift | AtomicAcknowledge
	RCCompareSwap        = OpCode(TransportRC)<<opTransportShift | CompareSwap
	RCFetchAdd           = OpCode(TransportRC)<<opTransportShift | FetchAdd
	RCSendLastInv        = OpCode(TransportRC)<<opTransportShift | SendLastInv
	RCSendOnlyInv        = OpCode(TransportRC)<<opTransportShift | SendOnlyInv
	RCFlush              = OpCode(TransportRC)<<opTransportShift | Flush
	RCAtomicWrite        = OpCode(TransportRC)<<opTransportShift | AtomicWrite

	UCSendFirst    = OpCode(TransportUC)<<opTransportShift | SendFirst
	UCSendMiddle   = OpCode(TransportUC)<<opTransportShift | SendMiddle
	UCSendLast     = OpCode(TransportUC)<<opTransportShift | SendLast
	UCSendLastImm  = OpCode(TransportUC)<<opTransportShift | SendLastImm
	UCSendOnly     = OpCode(TransportUC)<<opTransportShift | SendOnly
	UCSendOnlyImm  = OpCode(TransportUC)<<opTransportShift | SendOnlyImm
	UCWriteFirst   = OpCode(TransportUC)<<opTransportShift | WriteFirst
	UCWriteMiddle  = OpCode(TransportUC)<<opTransportShift | WriteMiddle
	UCWriteLast    = OpCode(TransportUC)<<opTransportShift | WriteLast
	UCWriteLastImm = OpCode(TransportUC)<<opTransportShift | WriteLastImm
	UCWriteOnly    = OpCode(TransportUC)<<opTransportShift | WriteOnly
	UCWriteOnlyImm = OpCode(TransportUC)<<opTransportShift | WriteOnlyImm

	UDSendOnly    = OpCode(TransportUD)<<opTransportShift | SendOnly
	UDSendOnlyImm = OpCode(TransportUD)<<opTransportShift | SendOnlyImm

	CNP = OpCode(TransportCNP)<<opTransportShift | cnpOperation
)

// Ext identifies an extended transport header.
type Ext uint8

// Extended transport headers, in the order they follow the BTH when several
// are present (IBA vol 1, 9.2 and table 38; FETH from IBA 1.5).
const (
	ExtRDETH        Ext = iota // reliable datagram extended header, 4 bytes
	ExtDETH                    // datagram extended header, 8 bytes
	ExtXRCETH                  // XRC extended header, 4 bytes
	ExtFETH                    // flush extended header, 4 bytes
	ExtRETH                    // RDMA extended header, 16 bytes
	ExtAtomicETH               // atomic extended header, 28 bytes
	ExtImmDt                   // immediate data, 4 bytes
	ExtIETH                    // invalidate extended header, 4 bytes
	ExtAETH                    // ACK extended header, 4 bytes
	ExtAtomicAckETH            // atomic ACK extended header, 8 bytes
	ExtCNPPad                  // the 16 reserved bytes of a RoCEv2 CNP
	numExts
)

var extSizes = [numExts]int{
	ExtRDETH: RDETHLen, ExtDETH: DETHLen, ExtXRCETH: XRCETHLen, ExtFETH: FETHLen,
	ExtRETH: RETHLen, ExtAtomicETH: AtomicETHLen, ExtImmDt: ImmDtLen, ExtIETH: IETHLen,
	ExtAETH: AETHLen, ExtAtomicAckETH: AtomicAckETHLen, ExtCNPPad: CNPPadLen,
}

var extNames = [numExts]string{"RDETH", "DETH", "XRCETH", "FETH", "RETH", "AtomicETH",
	"ImmDt", "IETH", "AETH", "AtomicAckETH", "CNP-reserved"}

// String returns the header's name ("RETH").
func (e Ext) String() string {
	if e < numExts {
		return extNames[e]
	}
	return fmt.Sprintf("Ext(%d)", uint8(e))
}

// Size is the header's length in bytes.
func (e Ext) Size() int { return extSizes[e] }

// ExtSet is a set of extended headers.
type ExtSet uint16

// Has reports whether e is in the set.
func (s ExtSet) Has(e Ext) bool { return s&(1<<e) != 0 }

func exts(es ...Ext) ExtSet {
	var s ExtSet
	for _, e := range es {
		s |= 1 << e
	}
	return s
}

// Position is where a packet sits in its message.
type Position uint8

// Message positions.
const (
	PosNone   Position = iota // not part of a segmented message (ACK, READ request, atomic)
	PosFirst                  // FIRST: more packets follow
	PosMiddle                 // MIDDLE
	PosLast                   // LAST
	PosOnly                   // ONLY: the whole message
)

var posNames = [...]string{"", "FIRST", "MIDDLE", "LAST", "ONLY"}

const numPositions = PosOnly + 1

// MessagePosition returns the position of a packet that is, or is not, the
// first and the last of its message.
func MessagePosition(first, last bool) Position {
	switch {
	case first && last:
		return PosOnly
	case first:
		return PosFirst
	case last:
		return PosLast
	}
	return PosMiddle
}

// String returns FIRST, MIDDLE, LAST or ONLY ("" for none).
func (p Position) String() string { return posNames[p] }

// Kind is the operation class of an opcode.
type Kind uint8

// Operation kinds.
const (
	KindInvalid Kind = iota
	KindSend
	KindWrite
	KindReadRequest
	KindReadResponse
	KindAcknowledge
	KindAtomicAcknowledge
	KindCompareSwap
	KindFetchAdd
	KindResync
	KindFlush
	KindAtomicWrite
	KindCNP
	numKinds
)

var kindNames = [...]string{"invalid", "SEND", "RDMA WRITE", "RDMA READ request",
	"RDMA READ response", "ACK", "ATOMIC ACK", "COMPARE SWAP", "FETCH ADD", "RESYNC",
	"FLUSH", "ATOMIC WRITE", "CNP"}

// String returns the kind's name ("RDMA WRITE").
func (k Kind) String() string { return kindNames[k] }

// Info describes one opcode: what it is and which headers follow the BTH.
type Info struct {
	Name      string    // as in the specification and Wireshark, e.g. "RC SEND Only"
	Transport Transport // RC, UC, RD, UD, CNP or XRC: the opcode's top three bits
	Kind      Kind      // the operation
	Pos       Position  // where in a message the packet is
	Imm       bool      // carries ImmDt
	Inv       bool      // carries IETH
	Payload   bool      // may carry payload (and so pad bytes)
	Headers   ExtSet    // extended headers present
	HdrLen    int       // BTH plus extended headers
	offsets   [numExts]uint8
	valid     bool
}

// Offset is the offset of extended header e from the start of the BTH, or -1.
func (i *Info) Offset(e Ext) int {
	if !i.Headers.Has(e) {
		return -1
	}
	return int(i.offsets[e])
}

// IsRequest reports whether packets with this opcode travel from requester to
// responder (everything but READ responses and acknowledgements).
func (i *Info) IsRequest() bool {
	switch i.Kind {
	case KindReadResponse, KindAcknowledge, KindAtomicAcknowledge, KindCNP, KindInvalid:
		return false
	}
	return true
}

// Lookup returns the description of o; ok is false for reserved opcodes.
func Lookup(o OpCode) (info *Info, ok bool) {
	info = &opTable[o]
	return info, info.valid
}

// Valid reports whether o is a defined opcode.
func (o OpCode) Valid() bool { return opTable[o].valid }

// Info returns the opcode's description (zero Info for a reserved opcode).
func (o OpCode) Info() *Info { return &opTable[o] }

// String returns the opcode's name as Wireshark gives it ("RC SEND Only").
func (o OpCode) String() string {
	if i := &opTable[o]; i.valid {
		return i.Name
	}
	return fmt.Sprintf("reserved opcode 0x%02x", uint8(o))
}

// Find returns the opcode of transport t for operation k at position p of
// its message, carrying ImmDt (imm) or an IETH (inv): the opcode table read
// backwards, so that a sender picks its opcodes from the table rather than
// from switches of its own. ok is false where table 38 defines none (a UC
// SEND with Invalidate, a MIDDLE packet with immediate data).
func Find(t Transport, k Kind, p Position, imm, inv bool) (op OpCode, ok bool) {
	if k >= numKinds || p >= numPositions {
		return 0, false
	}
	v := opIndex[t&7][k][p][b2i(imm)][b2i(inv)]
	return OpCode(v), v&opFound != 0
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// opIndex is Find's table: the opcode with opFound set, or 0 for none.
var opIndex [8][numKinds][numPositions][2][2]uint16

const opFound = 0x100

// opTable is the opcode table of IBA vol 1 table 38 (plus FLUSH and ATOMIC
// WRITE of IBA 1.5 and the RoCEv2 CNP of Annex A17), built once from the
// per-operation rows below.
var opTable [256]Info

type opRow struct {
	op      OpCode
	name    string
	kind    Kind
	pos     Position
	imm     bool
	inv     bool
	payload bool
	hdrs    ExtSet // for RC; other transports add their own headers
}

// Rows shared by the connected transports, by operation number.
var connectedOps = []opRow{
	{SendFirst, "SEND First", KindSend, PosFirst, false, false, true, 0},
	{SendMiddle, "SEND Middle", KindSend, PosMiddle, false, false, true, 0},
	{SendLast, "SEND Last", KindSend, PosLast, false, false, true, 0},
	{SendLastImm, "SEND Last with Immediate", KindSend, PosLast, true, false, true, exts(ExtImmDt)},
	{SendOnly, "SEND Only", KindSend, PosOnly, false, false, true, 0},
	{SendOnlyImm, "SEND Only with Immediate", KindSend, PosOnly, true, false, true, exts(ExtImmDt)},
	{WriteFirst, "RDMA WRITE First", KindWrite, PosFirst, false, false, true, exts(ExtRETH)},
	{WriteMiddle, "RDMA WRITE Middle", KindWrite, PosMiddle, false, false, true, 0},
	{WriteLast, "RDMA WRITE Last", KindWrite, PosLast, false, false, true, 0},
	{WriteLastImm, "RDMA WRITE Last with Immediate", KindWrite, PosLast, true, false, true, exts(ExtImmDt)},
	{WriteOnly, "RDMA WRITE Only", KindWrite, PosOnly, false, false, true, exts(ExtRETH)},
	{WriteOnlyImm, "RDMA WRITE Only with Immediate", KindWrite, PosOnly, true, false, true, exts(ExtRETH, ExtImmDt)},
	{ReadRequest, "RDMA READ Request", KindReadRequest, PosNone, false, false, false, exts(ExtRETH)},
	{ReadResponseFirst, "RDMA READ Response First", KindReadResponse, PosFirst, false, false, true, exts(ExtAETH)},
	{ReadResponseMiddle, "RDMA READ Response Middle", KindReadResponse, PosMiddle, false, false, true, 0},
	{ReadResponseLast, "RDMA READ Response Last", KindReadResponse, PosLast, false, false, true, exts(ExtAETH)},
	{ReadResponseOnly, "RDMA READ Response Only", KindReadResponse, PosOnly, false, false, true, exts(ExtAETH)},
	{Acknowledge, "Acknowledge", KindAcknowledge, PosNone, false, false, false, exts(ExtAETH)},
	{AtomicAcknowledge, "ATOMIC Acknowledge", KindAtomicAcknowledge, PosNone, false, false, false, exts(ExtAETH, ExtAtomicAckETH)},
	{CompareSwap, "CmpSwap", KindCompareSwap, PosNone, false, false, false, exts(ExtAtomicETH)},
	{FetchAdd, "FetchAdd", KindFetchAdd, PosNone, false, false, false, exts(ExtAtomicETH)},
	{SendLastInv, "SEND Last with Invalidate", KindSend, PosLast, false, true, true, exts(ExtIETH)},
	{SendOnlyInv, "SEND Only with Invalidate", KindSend, PosOnly, false, true, true, exts(ExtIETH)},
	{Flush, "FLUSH", KindFlush, PosNone, false, false, false, exts(ExtFETH, ExtRETH)},
	{AtomicWrite, "ATOMIC WRITE", KindAtomicWrite, PosNone, false, false, true, exts(ExtRETH)},
}

func init() {
	add := func(t Transport, r opRow, hdrs ExtSet) {
		o := OpCode(t)<<opTransportShift | r.op
		i := Info{Name: t.String() + " " + r.name, Transport: t, Kind: r.kind, Pos: r.pos,
			Imm: r.imm, Inv: r.inv, Payload: r.payload, Headers: hdrs, valid: true}
		off := BTHLen
		for e := Ext(0); e < numExts; e++ {
			if hdrs.Has(e) {
				i.offsets[e] = uint8(off)
				off += extSizes[e]
			}
		}
		i.HdrLen = off
		opTable[o] = i
		opIndex[t][r.kind][r.pos][b2i(r.imm)][b2i(r.inv)] = opFound | uint16(o)
	}
	for _, r := range connectedOps {
		// RC: every operation.
		add(TransportRC, r, r.hdrs)
		// XRC: the RC operations; requests carry an XRCETH (IBA 9.2.5).
		// FLUSH and ATOMIC WRITE are defined here for RC only, as Linux rxe does.
		if r.kind == KindFlush || r.kind == KindAtomicWrite {
			continue
		}
		h := r.hdrs
		if isRequestKind(r.kind) {
			h |= exts(ExtXRCETH)
		}
		add(TransportXRC, r, h)
		// UC: SEND and RDMA WRITE only, no invalidate (IBA table 38).
		if (r.kind == KindSend && !r.inv) || r.kind == KindWrite {
			add(TransportUC, r, r.hdrs)
		}
		// RD: everything but invalidate, FLUSH and ATOMIC WRITE; every packet
		// carries an RDETH and requests a DETH too.
		if !r.inv && r.kind != KindFlush && r.kind != KindAtomicWrite {
			h := r.hdrs | exts(ExtRDETH)
			if isRequestKind(r.kind) {
				h |= exts(ExtDETH)
			}
			add(TransportRD, r, h)
		}
	}
	add(TransportRD, opRow{Resync, "RESYNC", KindResync, PosNone, false, false, false, 0}, exts(ExtRDETH, ExtDETH))
	add(TransportUD, opRow{SendOnly, "SEND Only", KindSend, PosOnly, false, false, true, 0}, exts(ExtDETH))
	add(TransportUD, opRow{SendOnlyImm, "SEND Only with Immediate", KindSend, PosOnly, true, false, true, 0}, exts(ExtDETH, ExtImmDt))
	opTable[CNP] = Info{Name: "CNP", Transport: TransportCNP, Kind: KindCNP, Headers: exts(ExtCNPPad),
		HdrLen: BTHLen + CNPPadLen, valid: true}
	opTable[CNP].offsets[ExtCNPPad] = BTHLen
	opIndex[TransportCNP][KindCNP][PosNone][0][0] = opFound | uint16(CNP)
}

func isRequestKind(k Kind) bool {
	switch k {
	case KindReadResponse, KindAcknowledge, KindAtomicAcknowledge:
		return false
	}
	return true
}
