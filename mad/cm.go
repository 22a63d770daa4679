package mad

import (
	"encoding/binary"
	"fmt"
)

// CMClassVersion is the CM class version Linux sends and accepts (cm.c's
// IB_CM_CLASS_VERSION).
const CMClassVersion = 2

// AttrID is a MAD attribute ID.
type AttrID uint16

// CM attribute IDs (the kernel's CM_*_ATTR_ID in cm_msgs.h).
const (
	AttrClassPortInfo AttrID = 0x0001
	AttrREQ           AttrID = 0x0010
	AttrMRA           AttrID = 0x0011
	AttrREJ           AttrID = 0x0012
	AttrREP           AttrID = 0x0013
	AttrRTU           AttrID = 0x0014
	AttrDREQ          AttrID = 0x0015
	AttrDREP          AttrID = 0x0016
	AttrSIDRREQ       AttrID = 0x0017
	AttrSIDRREP       AttrID = 0x0018
	AttrLAP           AttrID = 0x0019
	AttrAPR           AttrID = 0x001a
)

var attrNames = map[AttrID]string{
	AttrClassPortInfo: "ClassPortInfo", AttrREQ: "REQ", AttrMRA: "MRA", AttrREJ: "REJ",
	AttrREP: "REP", AttrRTU: "RTU", AttrDREQ: "DREQ", AttrDREP: "DREP",
	AttrSIDRREQ: "SIDR_REQ", AttrSIDRREP: "SIDR_REP", AttrLAP: "LAP", AttrAPR: "APR",
}

// String names a CM attribute, or gives its number.
func (a AttrID) String() string {
	if s, ok := attrNames[a]; ok {
		return s
	}
	return fmt.Sprintf("attr(%#04x)", uint16(a))
}

// ParseCM checks that b is a CM MAD (Parse's checks, class CM, class
// version 2, a CM attribute) and returns it as a view.
func ParseCM(b []byte) (MAD, error) {
	m, err := Parse(b)
	if err != nil {
		return nil, err
	}
	if c := m.Class(); c != ClassCM {
		return nil, fmt.Errorf("%w: %#02x, want CM (0x07)", ErrClass, uint8(c))
	}
	if v := m.ClassVersion(); v != CMClassVersion {
		return nil, fmt.Errorf("%w: CM class version %d, want %d", ErrClassVersion, v, CMClassVersion)
	}
	if a := m.AttrID(); attrNames[a] == "" {
		return nil, fmt.Errorf("%w: CM attribute %#04x", ErrAttribute, uint16(a))
	}
	return m, nil
}

// NewCM returns a zeroed CM MAD of attribute a: base version 1, class CM,
// class version 2, method Send, as every CM message is sent.
func NewCM(a AttrID) MAD {
	m := New()
	m.SetClass(ClassCM)
	m.SetClassVersion(CMClassVersion)
	m.SetMethod(MethodSend)
	m.SetAttrID(a)
	return m
}

// Views of a MAD's data as each CM message. The MAD must have passed Parse
// (so Data is 232 bytes); the attribute ID is the caller's to check.

// REQ returns the data as a REQ.
func (m MAD) REQ() REQ { return REQ(m.Data()) }

// MRA returns the data as an MRA.
func (m MAD) MRA() MRA { return MRA(m.Data()) }

// REJ returns the data as a REJ.
func (m MAD) REJ() REJ { return REJ(m.Data()) }

// REP returns the data as a REP.
func (m MAD) REP() REP { return REP(m.Data()) }

// RTU returns the data as an RTU.
func (m MAD) RTU() RTU { return RTU{m.Data()} }

// DREQ returns the data as a DREQ.
func (m MAD) DREQ() DREQ { return DREQ(m.Data()) }

// DREP returns the data as a DREP.
func (m MAD) DREP() DREP { return DREP{m.Data()} }

// LAP returns the data as a LAP.
func (m MAD) LAP() LAP { return LAP(m.Data()) }

// APR returns the data as an APR.
func (m MAD) APR() APR { return APR(m.Data()) }

// SIDRREQ returns the data as a SIDR_REQ.
func (m MAD) SIDRREQ() SIDRREQ { return SIDRREQ(m.Data()) }

// SIDRREP returns the data as a SIDR_REP.
func (m MAD) SIDRREP() SIDRREP { return SIDRREP(m.Data()) }

// MsgKind says which message an MRA or REJ answers (the kernel's
// CM_MSG_RESPONSE_*).
type MsgKind uint8

// Message kinds of MRA's "Message MRAed" and REJ's "Message REJected".
const (
	MsgREQ   MsgKind = 0
	MsgREP   MsgKind = 1
	MsgOther MsgKind = 2 // LAP for an MRA; anything else for a REJ
)

// String names the kind.
func (k MsgKind) String() string {
	switch k {
	case MsgREQ:
		return "REQ"
	case MsgREP:
		return "REP"
	case MsgOther:
		return "other"
	}
	return fmt.Sprintf("msg(%d)", uint8(k))
}

// ErrPrivateData is returned by a SetPrivateData given more bytes than the
// message holds.
var ErrPrivateData = fmt.Errorf("mad: private data too long")

// Bit-field helpers. The kernel's IBA_FIELD_BLOC numbers bits from the most
// significant bit of a byte; these take the shift from the least
// significant one, width bits wide.
func bits(b byte, shift, width uint) uint8 { return b >> shift & (1<<width - 1) }

func setBits(b []byte, off int, shift, width uint, v uint8) {
	mask := byte(1<<width-1) << shift
	b[off] = b[off]&^mask | v<<shift&mask
}

func flag(b byte, shift uint) bool { return b>>shift&1 != 0 }

func setFlag(b []byte, off int, shift uint, v bool) {
	var x uint8
	if v {
		x = 1
	}
	setBits(b, off, shift, 1, x)
}

func get24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

func put24(b []byte, v uint32) { b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v) }

// flowLabel reads the 20-bit flow label in the top of the 32-bit word at b.
func flowLabel(b []byte) uint32 { return binary.BigEndian.Uint32(b) >> 12 }

func setFlowLabel(b []byte, v uint32) {
	w := binary.BigEndian.Uint32(b)
	binary.BigEndian.PutUint32(b, w&0xfff|(v&0xfffff)<<12)
}

// setPrivate copies p into the private-data field dst and zeroes the rest:
// a short private data is padded with zeros, as the kernel sends it.
func setPrivate(dst, p []byte, msg string) error {
	if len(p) > len(dst) {
		return fmt.Errorf("%w: %s holds %d bytes, got %d", ErrPrivateData, msg, len(dst), len(p))
	}
	clear(dst[copy(dst, p):])
	return nil
}
