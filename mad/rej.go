package mad

import (
	"encoding/binary"
	"fmt"
)

// REJ is a view of a connection reject (IBA Table 108).
type REJ []byte

// Offsets in a REJ.
const (
	offREJLocalCommID  = 0
	offREJRemoteCommID = 4
	offREJMessage      = 8 // message rejected in the top 2 bits
	offREJARILen       = 9 // reject info length in the top 7 bits
	offREJReason       = 10
	offREJARI          = 12
	REJARILen          = 72
	offREJPrivateData  = 84
	REJPrivateDataLen  = DataLen - offREJPrivateData // 148
)

// RejReason is a REJ's reason code (the kernel's enum
// ib_cm_rej_reason).
type RejReason uint16

// Reject reasons.
const (
	RejNoQP                      RejReason = 1
	RejNoEEC                     RejReason = 2
	RejNoResources               RejReason = 3
	RejTimeout                   RejReason = 4
	RejUnsupported               RejReason = 5
	RejInvalidCommID             RejReason = 6
	RejInvalidCommInstance       RejReason = 7
	RejInvalidServiceID          RejReason = 8
	RejInvalidTransportType      RejReason = 9
	RejStaleConn                 RejReason = 10
	RejRDCNotExist               RejReason = 11
	RejInvalidGID                RejReason = 12
	RejInvalidLID                RejReason = 13
	RejInvalidSL                 RejReason = 14
	RejInvalidTrafficClass       RejReason = 15
	RejInvalidHopLimit           RejReason = 16
	RejInvalidPacketRate         RejReason = 17
	RejInvalidAltGID             RejReason = 18
	RejInvalidAltLID             RejReason = 19
	RejInvalidAltSL              RejReason = 20
	RejInvalidAltTrafficClass    RejReason = 21
	RejInvalidAltHopLimit        RejReason = 22
	RejInvalidAltPacketRate      RejReason = 23
	RejPortCMRedirect            RejReason = 24
	RejPortRedirect              RejReason = 25
	RejInvalidMTU                RejReason = 26
	RejInsufficientRespResources RejReason = 27
	RejConsumerDefined           RejReason = 28 // rdma_reject()'s; also cm.c's when a REQ's receiver drops its ID (rping_rej28)
	RejInvalidRNRRetry           RejReason = 29
	RejDuplicateLocalCommID      RejReason = 30
	RejInvalidClassVersion       RejReason = 31
	RejInvalidFlowLabel          RejReason = 32
	RejInvalidAltFlowLabel       RejReason = 33
	RejVendorOptionNotSupported  RejReason = 35
)

// rejNames are the kernel's ibcm_reject_msg strings.
var rejNames = map[RejReason]string{
	RejNoQP: "no QP", RejNoEEC: "no EEC", RejNoResources: "no resources",
	RejTimeout: "timeout", RejUnsupported: "unsupported", RejInvalidCommID: "invalid comm ID",
	RejInvalidCommInstance: "invalid comm instance", RejInvalidServiceID: "invalid service ID",
	RejInvalidTransportType: "invalid transport type", RejStaleConn: "stale conn",
	RejRDCNotExist: "RDC not exist", RejInvalidGID: "invalid GID", RejInvalidLID: "invalid LID",
	RejInvalidSL: "invalid SL", RejInvalidTrafficClass: "invalid traffic class",
	RejInvalidHopLimit: "invalid hop limit", RejInvalidPacketRate: "invalid packet rate",
	RejInvalidAltGID: "invalid alt GID", RejInvalidAltLID: "invalid alt LID",
	RejInvalidAltSL: "invalid alt SL", RejInvalidAltTrafficClass: "invalid alt traffic class",
	RejInvalidAltHopLimit: "invalid alt hop limit", RejInvalidAltPacketRate: "invalid alt packet rate",
	RejPortCMRedirect: "port CM redirect", RejPortRedirect: "port redirect",
	RejInvalidMTU: "invalid MTU", RejInsufficientRespResources: "insufficient resp resources",
	RejConsumerDefined: "consumer defined", RejInvalidRNRRetry: "invalid RNR retry",
	RejDuplicateLocalCommID: "duplicate local comm ID", RejInvalidClassVersion: "invalid class version",
	RejInvalidFlowLabel: "invalid flow label", RejInvalidAltFlowLabel: "invalid alt flow label",
	RejVendorOptionNotSupported: "vendor option is not supported",
}

// String returns the kernel's words for the reason, with its number.
func (r RejReason) String() string {
	if s, ok := rejNames[r]; ok {
		return fmt.Sprintf("%s (%d)", s, uint16(r))
	}
	return fmt.Sprintf("unrecognized reason (%d)", uint16(r))
}

// REJFields holds every field of a REJ.
type REJFields struct {
	LocalCommID, RemoteCommID uint32    // the sender's and the receiver's communication IDs
	MessageRejected           MsgKind   // 2 bits
	RejectInfoLength          uint8     // 7 bits: bytes of ARI that count
	Reason                    RejReason // why
	ARI                       []byte    // additional reject information, REJARILen bytes when read
	PrivateData               []byte    // the consumer's bytes, zero-padded; the full field when read
}

// LocalCommID returns the sender's communication ID (0 when it rejects a
// REQ it has no ID for, as in rping_rej28).
func (r REJ) LocalCommID() uint32 { return binary.BigEndian.Uint32(r[offREJLocalCommID:]) }

// RemoteCommID returns the receiver's communication ID.
func (r REJ) RemoteCommID() uint32 { return binary.BigEndian.Uint32(r[offREJRemoteCommID:]) }

// MessageRejected returns which message is rejected.
func (r REJ) MessageRejected() MsgKind { return MsgKind(bits(r[offREJMessage], 6, 2)) }

// RejectInfoLength returns the 7-bit length of the ARI.
func (r REJ) RejectInfoLength() uint8 { return bits(r[offREJARILen], 1, 7) }

// Reason returns the reason code.
func (r REJ) Reason() RejReason { return RejReason(binary.BigEndian.Uint16(r[offREJReason:])) }

// ARI returns the 72 bytes of additional reject information.
func (r REJ) ARI() []byte { return r[offREJARI : offREJARI+REJARILen] }

// PrivateData returns the 148 bytes of private data.
func (r REJ) PrivateData() []byte { return r[offREJPrivateData:DataLen] }

// SetLocalCommID sets the sender's communication ID.
func (r REJ) SetLocalCommID(v uint32) { binary.BigEndian.PutUint32(r[offREJLocalCommID:], v) }

// SetRemoteCommID sets the receiver's communication ID.
func (r REJ) SetRemoteCommID(v uint32) { binary.BigEndian.PutUint32(r[offREJRemoteCommID:], v) }

// SetMessageRejected sets which message is rejected.
func (r REJ) SetMessageRejected(v MsgKind) { setBits(r, offREJMessage, 6, 2, uint8(v)) }

// SetRejectInfoLength sets the ARI length.
func (r REJ) SetRejectInfoLength(v uint8) { setBits(r, offREJARILen, 1, 7, v) }

// SetReason sets the reason code.
func (r REJ) SetReason(v RejReason) { binary.BigEndian.PutUint16(r[offREJReason:], uint16(v)) }

// SetARI copies p into the ARI and zeroes the rest; it does not set the
// length field.
func (r REJ) SetARI(p []byte) error { return setPrivate(r.ARI(), p, "REJ ARI") }

// SetPrivateData copies p into the private data and zeroes the rest.
func (r REJ) SetPrivateData(p []byte) error { return setPrivate(r.PrivateData(), p, "REJ") }

// Fields returns every field; ARI and PrivateData alias the view.
func (r REJ) Fields() REJFields {
	return REJFields{r.LocalCommID(), r.RemoteCommID(), r.MessageRejected(), r.RejectInfoLength(),
		r.Reason(), r.ARI(), r.PrivateData()}
}

// Put writes every field of f.
func (r REJ) Put(f REJFields) error {
	r.SetLocalCommID(f.LocalCommID)
	r.SetRemoteCommID(f.RemoteCommID)
	r.SetMessageRejected(f.MessageRejected)
	r.SetRejectInfoLength(f.RejectInfoLength)
	r.SetReason(f.Reason)
	if err := r.SetARI(f.ARI); err != nil {
		return err
	}
	return r.SetPrivateData(f.PrivateData)
}
