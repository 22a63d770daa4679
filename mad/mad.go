package mad

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Sizes of a MAD (the kernel's IB_MGMT_MAD_SIZE and
// IB_MGMT_MAD_HDR): every MAD is 256 bytes, a 24-byte common
// header and 232 bytes of class data.
const (
	Len       = 256
	HeaderLen = 24
	DataLen   = Len - HeaderLen
)

// BaseVersion is the only MAD base version of InfiniBand (OPA's 0x80 MADs
// are not RoCE's).
const BaseVersion = 1

// Offsets of the common MAD header fields (the kernel's struct ib_mad_hdr).
const (
	offBaseVersion  = 0
	offMgmtClass    = 1
	offClassVersion = 2
	offMethod       = 3
	offStatus       = 4
	offClassSpec    = 6
	offTID          = 8
	offAttrID       = 16
	offAttrMod      = 20
)

// Class is a management class.
type Class uint8

// Management classes (the kernel's IB_MGMT_CLASS_*).
const (
	ClassSubnLIDRouted     Class = 0x01
	ClassSubnAdm           Class = 0x03
	ClassPerfMgmt          Class = 0x04
	ClassBM                Class = 0x05
	ClassDeviceMgmt        Class = 0x06
	ClassCM                Class = 0x07
	ClassSNMP              Class = 0x08
	ClassDeviceAdm         Class = 0x10
	ClassBootMgmt          Class = 0x11
	ClassBIS               Class = 0x12
	ClassCongMgmt          Class = 0x21
	ClassSubnDirectedRoute Class = 0x81
	classVendorRange1Start Class = 0x09
	classVendorRange1End   Class = 0x0f
	classVendorRange2Start Class = 0x30
	classVendorRange2End   Class = 0x4f
)

// Known reports whether c is a class the specification defines or a vendor
// class range; anything else is malformed.
func (c Class) Known() bool {
	switch c {
	case ClassSubnLIDRouted, ClassSubnAdm, ClassPerfMgmt, ClassBM, ClassDeviceMgmt,
		ClassCM, ClassSNMP, ClassDeviceAdm, ClassBootMgmt, ClassBIS, ClassCongMgmt,
		ClassSubnDirectedRoute:
		return true
	}
	return c >= classVendorRange1Start && c <= classVendorRange1End ||
		c >= classVendorRange2Start && c <= classVendorRange2End
}

// Method is a MAD method, the response bit (0x80) included.
type Method uint8

// Methods (the kernel's IB_MGMT_METHOD_*).
const (
	MethodGet         Method = 0x01
	MethodSet         Method = 0x02
	MethodSend        Method = 0x03 // every CM message is a Send
	MethodTrap        Method = 0x05
	MethodReport      Method = 0x06
	MethodTrapRepress Method = 0x07
	MethodGetResp     Method = 0x81
	MethodReportResp  Method = 0x86
	MethodResponse    Method = 0x80 // the R bit
)

// IsResponse reports whether the R bit is set.
func (m Method) IsResponse() bool { return m&MethodResponse != 0 }

// Errors of Parse and ParseCM; each is wrapped with the offending value.
var (
	ErrLength       = errors.New("mad: wrong length")
	ErrBaseVersion  = errors.New("mad: unsupported base version")
	ErrClass        = errors.New("mad: unknown management class")
	ErrClassVersion = errors.New("mad: unsupported class version")
	ErrAttribute    = errors.New("mad: unknown attribute")
)

// MAD is a view of a 256-byte management datagram.
type MAD []byte

// Parse checks that b is a MAD (length, base version, a known class) and
// returns it as a view. It never panics: a bad MAD is an error.
func Parse(b []byte) (MAD, error) {
	if len(b) != Len {
		return nil, fmt.Errorf("%w: %d bytes, want %d", ErrLength, len(b), Len)
	}
	m := MAD(b)
	if v := m.BaseVersion(); v != BaseVersion {
		return nil, fmt.Errorf("%w: %d, want %d", ErrBaseVersion, v, BaseVersion)
	}
	if c := m.Class(); !c.Known() {
		return nil, fmt.Errorf("%w: %#02x", ErrClass, uint8(c))
	}
	return m, nil
}

// New returns a zeroed MAD with the base version set, for a builder.
func New() MAD {
	m := make(MAD, Len)
	m.SetBaseVersion(BaseVersion)
	return m
}

// BaseVersion returns the MAD base version (byte 0).
func (m MAD) BaseVersion() uint8 { return m[offBaseVersion] }

// Class returns the management class (byte 1).
func (m MAD) Class() Class { return Class(m[offMgmtClass]) }

// ClassVersion returns the class version (byte 2).
func (m MAD) ClassVersion() uint8 { return m[offClassVersion] }

// Method returns the method, R bit included (byte 3).
func (m MAD) Method() Method { return Method(m[offMethod]) }

// Status returns the 16-bit status (bytes 4-5).
func (m MAD) Status() uint16 { return binary.BigEndian.Uint16(m[offStatus:]) }

// ClassSpecific returns the class-specific field (bytes 6-7).
func (m MAD) ClassSpecific() uint16 { return binary.BigEndian.Uint16(m[offClassSpec:]) }

// TID returns the transaction ID (bytes 8-15).
func (m MAD) TID() uint64 { return binary.BigEndian.Uint64(m[offTID:]) }

// AttrID returns the attribute ID (bytes 16-17).
func (m MAD) AttrID() AttrID { return AttrID(binary.BigEndian.Uint16(m[offAttrID:])) }

// AttrMod returns the attribute modifier (bytes 20-23).
func (m MAD) AttrMod() uint32 { return binary.BigEndian.Uint32(m[offAttrMod:]) }

// Data returns the 232 bytes of class data after the header.
func (m MAD) Data() []byte { return m[HeaderLen:Len] }

// SetBaseVersion sets the base version.
func (m MAD) SetBaseVersion(v uint8) { m[offBaseVersion] = v }

// SetClass sets the management class.
func (m MAD) SetClass(c Class) { m[offMgmtClass] = uint8(c) }

// SetClassVersion sets the class version.
func (m MAD) SetClassVersion(v uint8) { m[offClassVersion] = v }

// SetMethod sets the method, R bit included.
func (m MAD) SetMethod(v Method) { m[offMethod] = uint8(v) }

// SetStatus sets the status.
func (m MAD) SetStatus(v uint16) { binary.BigEndian.PutUint16(m[offStatus:], v) }

// SetClassSpecific sets the class-specific field.
func (m MAD) SetClassSpecific(v uint16) { binary.BigEndian.PutUint16(m[offClassSpec:], v) }

// SetTID sets the transaction ID.
func (m MAD) SetTID(v uint64) { binary.BigEndian.PutUint64(m[offTID:], v) }

// SetAttrID sets the attribute ID.
func (m MAD) SetAttrID(v AttrID) { binary.BigEndian.PutUint16(m[offAttrID:], uint16(v)) }

// SetAttrMod sets the attribute modifier.
func (m MAD) SetAttrMod(v uint32) { binary.BigEndian.PutUint32(m[offAttrMod:], v) }
