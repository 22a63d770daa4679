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
	OpCode   OpCode // the opcode
	SE       bool   // solicited event
	MigReq   bool   // M: migration state
	PadCount uint8  // pad bytes after the payload, 0..3
	TVer     uint8  // transport header version, 0
	PKey     uint16 // partition key
	FECN     bool   // forward explicit congestion notification
	BECN     bool   // backward explicit congestion notification
	DestQP   uint32 // destination QP number, 24 bits
	AckReq   bool   // acknowledge request
	PSN      PSN    // packet sequence number
}

// OpCode returns the opcode (byte 0).
func (b BTH) OpCode() OpCode { return OpCode(b[0]) }

// SE returns the solicited event bit.
func (b BTH) SE() bool { return b[1]&0x80 != 0 }

// MigReq returns the migration state bit (M).
func (b BTH) MigReq() bool { return b[1]&0x40 != 0 }

// PadCount returns how many pad bytes (0..3) follow the payload.
func (b BTH) PadCount() int { return int(b[1]>>4) & 3 }

// TVer returns the transport header version (0).
func (b BTH) TVer() uint8 { return b[1] & 0x0f }

// PKey returns the partition key.
func (b BTH) PKey() uint16 { return binary.BigEndian.Uint16(b[2:]) }

// FECN returns the forward explicit congestion notification bit.
func (b BTH) FECN() bool { return b[4]&0x80 != 0 }

// BECN returns the backward explicit congestion notification bit.
func (b BTH) BECN() bool { return b[4]&0x40 != 0 }

// Resv6 returns the six reserved bits of byte 4.
func (b BTH) Resv6() uint8 { return b[4] & 0x3f }

// DestQP returns the destination QP number (24 bits).
func (b BTH) DestQP() uint32 { return get24(b[5:]) }

// AckReq returns the acknowledge request bit.
func (b BTH) AckReq() bool { return b[8]&0x80 != 0 }

// Resv7 returns the seven reserved bits of byte 8.
func (b BTH) Resv7() uint8 { return b[8] & 0x7f }

// PSN returns the packet sequence number.
func (b BTH) PSN() PSN { return PSN(get24(b[9:])) }

// SetOpCode sets the opcode.
func (b BTH) SetOpCode(o OpCode) { b[0] = byte(o) }

// SetPadCount sets the pad count (n&3).
func (b BTH) SetPadCount(n int) { b[1] = b[1]&^0x30 | byte(n&3)<<4 }

// SetSE sets the solicited event bit.
func (b BTH) SetSE(v bool) { b[1] = setBit(b[1], 0x80, v) }

// SetPKey sets the partition key.
func (b BTH) SetPKey(p uint16) { binary.BigEndian.PutUint16(b[2:], p) }

// SetFECN sets the FECN bit.
func (b BTH) SetFECN(v bool) { b[4] = setBit(b[4], 0x80, v) }

// SetBECN sets the BECN bit.
func (b BTH) SetBECN(v bool) { b[4] = setBit(b[4], 0x40, v) }

// SetDestQP sets the destination QP number (24 bits).
func (b BTH) SetDestQP(q uint32) { put24(b[5:], q) }

// SetAckReq sets the acknowledge request bit.
func (b BTH) SetAckReq(v bool) { b[8] = setBit(b[8], 0x80, v) }

// SetPSN sets the packet sequence number.
func (b BTH) SetPSN(p PSN) { put24(b[9:], uint32(p)) }

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

// VA returns the remote virtual address.
func (r RETH) VA() uint64 { return binary.BigEndian.Uint64(r) }

// RKey returns the remote key of the region addressed.
func (r RETH) RKey() uint32 { return binary.BigEndian.Uint32(r[8:]) }

// DMALen returns the length of the whole RDMA message in bytes.
func (r RETH) DMALen() uint32 { return binary.BigEndian.Uint32(r[12:]) }

// SetVA sets the remote virtual address.
func (r RETH) SetVA(v uint64) { binary.BigEndian.PutUint64(r, v) }

// SetRKey sets the remote key.
func (r RETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(r[8:], k) }

// SetDMALen sets the message length.
func (r RETH) SetDMALen(n uint32) { binary.BigEndian.PutUint32(r[12:], n) }

// Encode writes all three fields.
func (r RETH) Encode(va uint64, rkey, dmaLen uint32) {
	r.SetVA(va)
	r.SetRKey(rkey)
	r.SetDMALen(dmaLen)
}

// AtomicETH is a view of the Atomic Extended Transport Header (IBA 9.3.4).
type AtomicETH []byte

// VA returns the remote virtual address of the 64-bit word (8-byte aligned).
func (a AtomicETH) VA() uint64 { return binary.BigEndian.Uint64(a) }

// RKey returns the remote key of the region holding the word.
func (a AtomicETH) RKey() uint32 { return binary.BigEndian.Uint32(a[8:]) }

// SwapAdd returns the swap value of compare-and-swap, or the addend of
// fetch-and-add.
func (a AtomicETH) SwapAdd() uint64 { return binary.BigEndian.Uint64(a[12:]) }

// Compare returns the compare value of compare-and-swap.
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

// OrigData returns the word's value before the atomic operation.
func (a AtomicAckETH) OrigData() uint64 { return binary.BigEndian.Uint64(a) }

// SetOrigData sets the original value.
func (a AtomicAckETH) SetOrigData(v uint64) { binary.BigEndian.PutUint64(a, v) }

// ImmDt is a view of the 4-byte Immediate Data header. The value is carried
// opaque, in network byte order, as ibv_wc.imm_data is.
type ImmDt []byte

// Imm returns the immediate data.
func (i ImmDt) Imm() uint32 { return binary.BigEndian.Uint32(i) }

// SetImm sets the immediate data.
func (i ImmDt) SetImm(v uint32) { binary.BigEndian.PutUint32(i, v) }

// IETH is a view of the Invalidate Extended Transport Header: the R_Key a
// SEND with Invalidate asks the responder to invalidate.
type IETH []byte

// RKey returns the R_Key to invalidate.
func (i IETH) RKey() uint32 { return binary.BigEndian.Uint32(i) }

// SetRKey sets the R_Key to invalidate.
func (i IETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(i, k) }

// DETH is a view of the Datagram Extended Transport Header (IBA 9.3.2).
type DETH []byte

// QKey returns the queue key the datagram carries.
func (d DETH) QKey() uint32 { return binary.BigEndian.Uint32(d) }

// SrcQP returns the sending QP number (24 bits).
func (d DETH) SrcQP() uint32 { return get24(d[5:]) }

// Resv returns the reserved byte.
func (d DETH) Resv() uint8 { return d[4] }

// SetQKey sets the queue key.
func (d DETH) SetQKey(k uint32) { binary.BigEndian.PutUint32(d, k) }

// SetSrcQP sets the sending QP number and clears the reserved byte.
func (d DETH) SetSrcQP(q uint32) { d[4] = 0; put24(d[5:], q) }

// XRCETH is a view of the XRC Extended Transport Header: the XRC SRQ number.
type XRCETH []byte

// XRCSRQ returns the XRC shared receive queue number (24 bits).
func (x XRCETH) XRCSRQ() uint32 { return get24(x[1:]) }

// SetXRCSRQ sets the XRC SRQ number and clears the reserved byte.
func (x XRCETH) SetXRCSRQ(n uint32) { x[0] = 0; put24(x[1:], n) }

// RDETH is a view of the Reliable Datagram Extended Transport Header.
type RDETH []byte

// EECnxt returns the end-to-end context number (24 bits).
func (r RDETH) EECnxt() uint32 { return get24(r[1:]) }

// SetEECnxt sets the EE context and clears the reserved byte.
func (r RDETH) SetEECnxt(n uint32) { r[0] = 0; put24(r[1:], n) }

// FETH is a view of the Flush Extended Transport Header (IBA 1.5): the
// placement type and selectivity level of an RDMA FLUSH.
type FETH []byte

// SelectivityLevel returns the FLUSH selectivity level (bits 5-4).
func (f FETH) SelectivityLevel() uint8 { return (f[3] >> 4) & 3 }

// PlacementType returns the FLUSH placement type (bits 3-0).
func (f FETH) PlacementType() uint8 { return f[3] & 0x0f }

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
