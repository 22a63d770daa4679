package mad

import (
	"encoding/binary"
	"fmt"
)

// SIDRREQ is a view of a service ID resolution request (IBA
// Table 119): how a UD client learns a service's QPN and Q_Key.
type SIDRREQ []byte

// SIDRREP is a view of a service ID resolution reply (IBA
// Table 120).
type SIDRREP []byte

// Offsets in a SIDR_REQ and a SIDR_REP.
const (
	offSIDRReqRequestID   = 0
	offSIDRReqPKey        = 4
	offSIDRReqServiceID   = 8
	offSIDRReqPrivateData = 16
	SIDRREQPrivateDataLen = DataLen - offSIDRReqPrivateData // 216

	offSIDRRepRequestID   = 0
	offSIDRRepStatus      = 4
	offSIDRRepInfoLen     = 5
	offSIDRRepQPN         = 8 // 24 bits
	offSIDRRepServiceID   = 12
	offSIDRRepQKey        = 20
	offSIDRRepInfo        = 24
	SIDRREPInfoLen        = 72
	offSIDRRepPrivateData = 96
	SIDRREPPrivateDataLen = DataLen - offSIDRRepPrivateData // 136
)

// SIDRStatus is a SIDR_REP's status (the kernel's enum
// ib_cm_sidr_status).
type SIDRStatus uint8

// SIDR status codes.
const (
	SIDRSuccess            SIDRStatus = 0
	SIDRUnsupported        SIDRStatus = 1 // no such service ID
	SIDRReject             SIDRStatus = 2
	SIDRNoQP               SIDRStatus = 3
	SIDRRedirect           SIDRStatus = 4
	SIDRUnsupportedVersion SIDRStatus = 5
)

var sidrNames = [...]string{"success", "unsupported", "reject", "no QP", "redirect", "unsupported version"}

// String names the status, with its number.
func (s SIDRStatus) String() string {
	if int(s) < len(sidrNames) {
		return fmt.Sprintf("%s (%d)", sidrNames[s], uint8(s))
	}
	return fmt.Sprintf("unrecognized SIDR status (%d)", uint8(s))
}

// SIDRREQFields holds every field of a SIDR_REQ.
type SIDRREQFields struct {
	RequestID   uint32 // matches a reply to its request
	PKey        uint16 // partition key
	ServiceID   uint64 // the service resolved
	PrivateData []byte // the consumer's bytes, zero-padded; the full field when read
}

// RequestID returns the request ID the reply echoes.
func (s SIDRREQ) RequestID() uint32 { return binary.BigEndian.Uint32(s[offSIDRReqRequestID:]) }

// PKey returns the partition key.
func (s SIDRREQ) PKey() uint16 { return binary.BigEndian.Uint16(s[offSIDRReqPKey:]) }

// ServiceID returns the service ID.
func (s SIDRREQ) ServiceID() uint64 { return binary.BigEndian.Uint64(s[offSIDRReqServiceID:]) }

// PrivateData returns the 216 bytes of private data.
func (s SIDRREQ) PrivateData() []byte { return s[offSIDRReqPrivateData:DataLen] }

// SetRequestID sets the request ID.
func (s SIDRREQ) SetRequestID(v uint32) { binary.BigEndian.PutUint32(s[offSIDRReqRequestID:], v) }

// SetPKey sets the partition key.
func (s SIDRREQ) SetPKey(v uint16) { binary.BigEndian.PutUint16(s[offSIDRReqPKey:], v) }

// SetServiceID sets the service ID.
func (s SIDRREQ) SetServiceID(v uint64) { binary.BigEndian.PutUint64(s[offSIDRReqServiceID:], v) }

// SetPrivateData copies p into the private data and zeroes the rest.
func (s SIDRREQ) SetPrivateData(p []byte) error { return setPrivate(s.PrivateData(), p, "SIDR_REQ") }

// Fields returns every field; PrivateData aliases the view.
func (s SIDRREQ) Fields() SIDRREQFields {
	return SIDRREQFields{s.RequestID(), s.PKey(), s.ServiceID(), s.PrivateData()}
}

// Put writes every field of f.
func (s SIDRREQ) Put(f SIDRREQFields) error {
	s.SetRequestID(f.RequestID)
	s.SetPKey(f.PKey)
	s.SetServiceID(f.ServiceID)
	return s.SetPrivateData(f.PrivateData)
}

// SIDRREPFields holds every field of a SIDR_REP.
type SIDRREPFields struct {
	RequestID   uint32     // matches a reply to its request
	Status      SIDRStatus // the outcome
	InfoLength  uint8      // bytes of the additional information that count
	QPN         uint32     // 24 bits
	ServiceID   uint64     // the service resolved
	QKey        uint32     // the service's Q_Key
	Info        []byte     // additional information, SIDRREPInfoLen bytes when read
	PrivateData []byte     // the consumer's bytes, zero-padded; the full field when read
}

// RequestID returns the request ID of the SIDR_REQ answered.
func (s SIDRREP) RequestID() uint32 { return binary.BigEndian.Uint32(s[offSIDRRepRequestID:]) }

// Status returns the status.
func (s SIDRREP) Status() SIDRStatus { return SIDRStatus(s[offSIDRRepStatus]) }

// InfoLength returns the length of the additional information.
func (s SIDRREP) InfoLength() uint8 { return s[offSIDRRepInfoLen] }

// QPN returns the service's QP number.
func (s SIDRREP) QPN() uint32 { return get24(s[offSIDRRepQPN:]) }

// ServiceID returns the service ID.
func (s SIDRREP) ServiceID() uint64 { return binary.BigEndian.Uint64(s[offSIDRRepServiceID:]) }

// QKey returns the service's Q_Key.
func (s SIDRREP) QKey() uint32 { return binary.BigEndian.Uint32(s[offSIDRRepQKey:]) }

// Info returns the 72 bytes of additional information.
func (s SIDRREP) Info() []byte { return s[offSIDRRepInfo : offSIDRRepInfo+SIDRREPInfoLen] }

// PrivateData returns the 136 bytes of private data.
func (s SIDRREP) PrivateData() []byte { return s[offSIDRRepPrivateData:DataLen] }

// SetRequestID sets the request ID.
func (s SIDRREP) SetRequestID(v uint32) { binary.BigEndian.PutUint32(s[offSIDRRepRequestID:], v) }

// SetStatus sets the status.
func (s SIDRREP) SetStatus(v SIDRStatus) { s[offSIDRRepStatus] = uint8(v) }

// SetInfoLength sets the length of the additional information.
func (s SIDRREP) SetInfoLength(v uint8) { s[offSIDRRepInfoLen] = v }

// SetQPN sets the service's QP number.
func (s SIDRREP) SetQPN(v uint32) { put24(s[offSIDRRepQPN:], v) }

// SetServiceID sets the service ID.
func (s SIDRREP) SetServiceID(v uint64) { binary.BigEndian.PutUint64(s[offSIDRRepServiceID:], v) }

// SetQKey sets the service's Q_Key.
func (s SIDRREP) SetQKey(v uint32) { binary.BigEndian.PutUint32(s[offSIDRRepQKey:], v) }

// SetInfo copies p into the additional information and zeroes the rest;
// it does not set the length field.
func (s SIDRREP) SetInfo(p []byte) error { return setPrivate(s.Info(), p, "SIDR_REP info") }

// SetPrivateData copies p into the private data and zeroes the rest.
func (s SIDRREP) SetPrivateData(p []byte) error { return setPrivate(s.PrivateData(), p, "SIDR_REP") }

// Fields returns every field; Info and PrivateData alias the view.
func (s SIDRREP) Fields() SIDRREPFields {
	return SIDRREPFields{s.RequestID(), s.Status(), s.InfoLength(), s.QPN(), s.ServiceID(), s.QKey(),
		s.Info(), s.PrivateData()}
}

// Put writes every field of f.
func (s SIDRREP) Put(f SIDRREPFields) error {
	s.SetRequestID(f.RequestID)
	s.SetStatus(f.Status)
	s.SetInfoLength(f.InfoLength)
	s.SetQPN(f.QPN)
	s.SetServiceID(f.ServiceID)
	s.SetQKey(f.QKey)
	if err := s.SetInfo(f.Info); err != nil {
		return err
	}
	return s.SetPrivateData(f.PrivateData)
}
