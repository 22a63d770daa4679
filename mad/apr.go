package mad

import (
	"encoding/binary"
	"fmt"
)

// APR is a view of an alternate path response (IBA Table 116, as the
// kernel's ibta_vol1_c12.h numbers it), the answer to a LAP.
type APR []byte

// Offsets in an APR.
const (
	offAPRLocalCommID  = 0
	offAPRRemoteCommID = 4
	offAPRInfoLen      = 8
	offAPRStatus       = 9
	offAPRInfo         = 12
	APRInfoLen         = 72
	offAPRPrivateData  = 84
	APRPrivateDataLen  = DataLen - offAPRPrivateData // 148
)

// APRStatus is an APR's AP status (the kernel's enum
// ib_cm_apr_status).
type APRStatus uint8

// AP status codes.
const (
	APRSuccess           APRStatus = 0
	APRInvalidCommID     APRStatus = 1
	APRUnsupported       APRStatus = 2
	APRReject            APRStatus = 3
	APRRedirect          APRStatus = 4
	APRIsCurrent         APRStatus = 5
	APRInvalidQPNEECN    APRStatus = 6
	APRInvalidLID        APRStatus = 7
	APRInvalidGID        APRStatus = 8
	APRInvalidFlowLabel  APRStatus = 9
	APRInvalidTClass     APRStatus = 10
	APRInvalidHopLimit   APRStatus = 11
	APRInvalidPacketRate APRStatus = 12
	APRInvalidSL         APRStatus = 13
)

var aprNames = [...]string{"success", "invalid comm ID", "unsupported", "reject", "redirect",
	"is current", "invalid QPN/EECN", "invalid LID", "invalid GID", "invalid flow label",
	"invalid traffic class", "invalid hop limit", "invalid packet rate", "invalid SL"}

// String names the status, with its number.
func (s APRStatus) String() string {
	if int(s) < len(aprNames) {
		return fmt.Sprintf("%s (%d)", aprNames[s], uint8(s))
	}
	return fmt.Sprintf("unrecognized AP status (%d)", uint8(s))
}

// APRFields holds every field of an APR.
type APRFields struct {
	LocalCommID, RemoteCommID uint32    // the sender's and the receiver's communication IDs
	InfoLength                uint8     // bytes of the additional information that count
	Status                    APRStatus // the outcome
	Info                      []byte    // additional information, APRInfoLen bytes when read
	PrivateData               []byte    // the consumer's bytes, zero-padded; the full field when read
}

// LocalCommID returns the sender's communication ID.
func (a APR) LocalCommID() uint32 { return binary.BigEndian.Uint32(a[offAPRLocalCommID:]) }

// RemoteCommID returns the receiver's communication ID.
func (a APR) RemoteCommID() uint32 { return binary.BigEndian.Uint32(a[offAPRRemoteCommID:]) }

// InfoLength returns the length of the additional information.
func (a APR) InfoLength() uint8 { return a[offAPRInfoLen] }

// Status returns the AP status.
func (a APR) Status() APRStatus { return APRStatus(a[offAPRStatus]) }

// Info returns the 72 bytes of additional information.
func (a APR) Info() []byte { return a[offAPRInfo : offAPRInfo+APRInfoLen] }

// PrivateData returns the 148 bytes of private data.
func (a APR) PrivateData() []byte { return a[offAPRPrivateData:DataLen] }

// SetLocalCommID sets the sender's communication ID.
func (a APR) SetLocalCommID(v uint32) { binary.BigEndian.PutUint32(a[offAPRLocalCommID:], v) }

// SetRemoteCommID sets the receiver's communication ID.
func (a APR) SetRemoteCommID(v uint32) { binary.BigEndian.PutUint32(a[offAPRRemoteCommID:], v) }

// SetInfoLength sets the length of the additional information.
func (a APR) SetInfoLength(v uint8) { a[offAPRInfoLen] = v }

// SetStatus sets the AP status.
func (a APR) SetStatus(v APRStatus) { a[offAPRStatus] = uint8(v) }

// SetInfo copies p into the additional information and zeroes the rest;
// it does not set the length field.
func (a APR) SetInfo(p []byte) error { return setPrivate(a.Info(), p, "APR info") }

// SetPrivateData copies p into the private data and zeroes the rest.
func (a APR) SetPrivateData(p []byte) error { return setPrivate(a.PrivateData(), p, "APR") }

// Fields returns every field; Info and PrivateData alias the view.
func (a APR) Fields() APRFields {
	return APRFields{a.LocalCommID(), a.RemoteCommID(), a.InfoLength(), a.Status(), a.Info(), a.PrivateData()}
}

// Put writes every field of f.
func (a APR) Put(f APRFields) error {
	a.SetLocalCommID(f.LocalCommID)
	a.SetRemoteCommID(f.RemoteCommID)
	a.SetInfoLength(f.InfoLength)
	a.SetStatus(f.Status)
	if err := a.SetInfo(f.Info); err != nil {
		return err
	}
	return a.SetPrivateData(f.PrivateData)
}
