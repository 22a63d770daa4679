package bth

import "encoding/binary"

// Header sizes in bytes.
const (
	BTHLen          = 12
	RDETHLen        = 4
	DETHLen         = 8
	XRCETHLen       = 4
	FETHLen         = 4
	RETHLen         = 16
	AtomicETHLen    = 28
	ImmDtLen        = 4
	IETHLen         = 4
	AETHLen         = 4
	AtomicAckETHLen = 8
	CNPPadLen       = 16
	GRHLen          = 40 // IB global route header, as placed in UD receive buffers
	ICRCLen         = 4
	// MaxHdrLen is the longest BTH plus extended headers of any opcode:
	// RD CmpSwap and FetchAdd (RDETH, DETH, AtomicETH), 8 bytes more than
	// the longest XRC or RC header.
	MaxHdrLen = BTHLen + RDETHLen + DETHLen + AtomicETHLen
)

// DefaultPKey is the default partition key; RoCEv2 peers use it unless configured otherwise.
const DefaultPKey = 0xffff

// BTH is a view of the 12-byte Base Transport Header (IBA 9.2).
type BTH []byte

// BTHFields holds the fields of a BTH for encoding.
type BTHFields struct {
	OpCode   OpCode
	SE       bool // solicited event
	MigReq   bool // M: migration state
	PadCount uint8
	TVer     uint8 // transport header version, 0
	PKey     uint16
	FECN     bool
	BECN     bool
	DestQP   uint32
	AckReq   bool
	PSN      PSN
}

func (b BTH) OpCode() OpCode { return OpCode(b[0]) }
func (b BTH) SE() bool       { return b[1]&0x80 != 0 }
func (b BTH) MigReq() bool   { return b[1]&0x40 != 0 }
func (b BTH) PadCount() int  { return int(b[1]>>4) & 3 }
func (b BTH) TVer() uint8    { return b[1] & 0x0f }
func (b BTH) PKey() uint16   { return binary.BigEndian.Uint16(b[2:]) }
func (b BTH) FECN() bool     { return b[4]&0x80 != 0 }
func (b BTH) BECN() bool     { return b[4]&0x40 != 0 }
func (b BTH) Resv6() uint8   { return b[4] & 0x3f }
func (b BTH) DestQP() uint32 { return get24(b[5:]) }
func (b BTH) AckReq() bool   { return b[8]&0x80 != 0 }
func (b BTH) Resv7() uint8   { return b[8] & 0x7f }
func (b BTH) PSN() PSN       { return PSN(get24(b[9:])) }

func (b BTH) SetOpCode(o OpCode) { b[0] = byte(o) }
func (b BTH) SetPadCount(n int)  { b[1] = b[1]&^0x30 | byte(n&3)<<4 }
func (b BTH) SetSE(v bool)       { b[1] = setBit(b[1], 0x80, v) }
func (b BTH) SetPKey(p uint16)   { binary.BigEndian.PutUint16(b[2:], p) }
func (b BTH) SetFECN(v bool)     { b[4] = setBit(b[4], 0x80, v) }
func (b BTH) SetBECN(v bool)     { b[4] = setBit(b[4], 0x40, v) }
func (b BTH) SetDestQP(q uint32) { put24(b[5:], q) }
func (b BTH) SetAckReq(v bool)   { b[8] = setBit(b[8], 0x80, v) }
func (b BTH) SetPSN(p PSN)       { put24(b[9:], uint32(p)) }

// Encode writes every field of f; reserved bits become zero.
func (b BTH) Encode(f *BTHFields) {
	b[0] = byte(f.OpCode)
	b[1] = boolBit(f.SE, 0x80) | boolBit(f.MigReq, 0x40) | (f.PadCount&3)<<4 | f.TVer&0x0f
	binary.BigEndian.PutUint16(b[2:], f.PKey)
	b[4] = boolBit(f.FECN, 0x80) | boolBit(f.BECN, 0x40)
	put24(b[5:], f.DestQP)
	b[8] = boolBit(f.AckReq, 0x80)
	put24(b[9:], uint32(f.PSN))
}

// Fields decodes every field.
func (b BTH) Fields() BTHFields {
	return BTHFields{OpCode: b.OpCode(), SE: b.SE(), MigReq: b.MigReq(), PadCount: uint8(b.PadCount()),
		TVer: b.TVer(), PKey: b.PKey(), FECN: b.FECN(), BECN: b.BECN(), DestQP: b.DestQP(),
		AckReq: b.AckReq(), PSN: b.PSN()}
}

// RETH is a view of the RDMA Extended Transport Header (IBA 9.3.3): the
// remote virtual address, R_Key and DMA length of an RDMA WRITE or READ.
type RETH []byte

func (r RETH) VA() uint64         { return binary.BigEndian.Uint64(r) }
func (r RETH) RKey() uint32       { return binary.BigEndian.Uint32(r[8:]) }
func (r RETH) DMALen() uint32     { return binary.BigEndian.Uint32(r[12:]) }
func (r RETH) SetVA(v uint64)     { binary.BigEndian.PutUint64(r, v) }
func (r RETH) SetRKey(k uint32)   { binary.BigEndian.PutUint32(r[8:], k) }
func (r RETH) SetDMALen(n uint32) { binary.BigEndian.PutUint32(r[12:], n) }

// Encode writes all three fields.
func (r RETH) Encode(va uint64, rkey, dmaLen uint32) {
	r.SetVA(va)
	r.SetRKey(rkey)
	r.SetDMALen(dmaLen)
}

// AtomicETH is a view of the Atomic Extended Transport Header (IBA 9.3.4).
type AtomicETH []byte

func (a AtomicETH) VA() uint64      { return binary.BigEndian.Uint64(a) }
func (a AtomicETH) RKey() uint32    { return binary.BigEndian.Uint32(a[8:]) }
func (a AtomicETH) SwapAdd() uint64 { return binary.BigEndian.Uint64(a[12:]) }
func (a AtomicETH) Compare() uint64 { return binary.BigEndian.Uint64(a[20:]) }

// Encode writes all four fields.
func (a AtomicETH) Encode(va uint64, rkey uint32, swapAdd, compare uint64) {
	binary.BigEndian.PutUint64(a, va)
	binary.BigEndian.PutUint32(a[8:], rkey)
	binary.BigEndian.PutUint64(a[12:], swapAdd)
	binary.BigEndian.PutUint64(a[20:], compare)
}

// AtomicAckETH is a view of the Atomic Acknowledge Extended Transport Header:
// the remote data as it was before the atomic operation.
type AtomicAckETH []byte

func (a AtomicAckETH) OrigData() uint64     { return binary.BigEndian.Uint64(a) }
func (a AtomicAckETH) SetOrigData(v uint64) { binary.BigEndian.PutUint64(a, v) }

// ImmDt is a view of the 4-byte Immediate Data header. The value is carried
// opaque, in network byte order, as ibv_wc.imm_data is.
type ImmDt []byte

func (i ImmDt) Imm() uint32     { return binary.BigEndian.Uint32(i) }
func (i ImmDt) SetImm(v uint32) { binary.BigEndian.PutUint32(i, v) }

// IETH is a view of the Invalidate Extended Transport Header: the R_Key a
// SEND with Invalidate asks the responder to invalidate.
type IETH []byte

func (i IETH) RKey() uint32     { return binary.BigEndian.Uint32(i) }
func (i IETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(i, k) }

// DETH is a view of the Datagram Extended Transport Header (IBA 9.3.2).
type DETH []byte

func (d DETH) QKey() uint32      { return binary.BigEndian.Uint32(d) }
func (d DETH) SrcQP() uint32     { return get24(d[5:]) }
func (d DETH) Resv() uint8       { return d[4] }
func (d DETH) SetQKey(k uint32)  { binary.BigEndian.PutUint32(d, k) }
func (d DETH) SetSrcQP(q uint32) { d[4] = 0; put24(d[5:], q) }

// XRCETH is a view of the XRC Extended Transport Header: the XRC SRQ number.
type XRCETH []byte

func (x XRCETH) XRCSRQ() uint32     { return get24(x[1:]) }
func (x XRCETH) SetXRCSRQ(n uint32) { x[0] = 0; put24(x[1:], n) }

// RDETH is a view of the Reliable Datagram Extended Transport Header.
type RDETH []byte

func (r RDETH) EECnxt() uint32     { return get24(r[1:]) }
func (r RDETH) SetEECnxt(n uint32) { r[0] = 0; put24(r[1:], n) }

// FETH is a view of the Flush Extended Transport Header (IBA 1.5): the
// placement type and selectivity level of an RDMA FLUSH.
type FETH []byte

func (f FETH) SelectivityLevel() uint8 { return (f[3] >> 4) & 3 }
func (f FETH) PlacementType() uint8    { return f[3] & 0x0f }

func get24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

func put24(b []byte, v uint32) {
	b[0] = byte(v >> 16)
	b[1] = byte(v >> 8)
	b[2] = byte(v)
}

func setBit(b, mask byte, v bool) byte {
	if v {
		return b | mask
	}
	return b &^ mask
}

func boolBit(v bool, mask byte) byte {
	if v {
		return mask
	}
	return 0
}
