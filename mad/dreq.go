package mad

import "encoding/binary"

// DREQ is a view of a disconnect request (IBA Table 112).
type DREQ []byte

// Offsets in a DREQ.
const (
	offDREQLocalCommID  = 0
	offDREQRemoteCommID = 4
	offDREQRemoteQPN    = 8 // 24 bits: the receiver's QPN (or EECN)
	offDREQPrivateData  = 12
	DREQPrivateDataLen  = DataLen - offDREQPrivateData // 220
)

// DREQFields holds every field of a DREQ.
type DREQFields struct {
	LocalCommID, RemoteCommID uint32 // the sender's and the receiver's communication IDs
	RemoteQPN                 uint32 // 24 bits
	PrivateData               []byte // the consumer's bytes, zero-padded; the full field when read
}

// LocalCommID returns the sender's communication ID.
func (d DREQ) LocalCommID() uint32 { return binary.BigEndian.Uint32(d[offDREQLocalCommID:]) }

// RemoteCommID returns the receiver's communication ID.
func (d DREQ) RemoteCommID() uint32 { return binary.BigEndian.Uint32(d[offDREQRemoteCommID:]) }

// RemoteQPN returns the receiver's QPN/EECN, which the receiver checks.
func (d DREQ) RemoteQPN() uint32 { return get24(d[offDREQRemoteQPN:]) }

// PrivateData returns the 220 bytes of private data.
func (d DREQ) PrivateData() []byte { return d[offDREQPrivateData:DataLen] }

// SetLocalCommID sets the sender's communication ID.
func (d DREQ) SetLocalCommID(v uint32) { binary.BigEndian.PutUint32(d[offDREQLocalCommID:], v) }

// SetRemoteCommID sets the receiver's communication ID.
func (d DREQ) SetRemoteCommID(v uint32) { binary.BigEndian.PutUint32(d[offDREQRemoteCommID:], v) }

// SetRemoteQPN sets the receiver's QPN/EECN.
func (d DREQ) SetRemoteQPN(v uint32) { put24(d[offDREQRemoteQPN:], v) }

// SetPrivateData copies p into the private data and zeroes the rest.
func (d DREQ) SetPrivateData(p []byte) error { return setPrivate(d.PrivateData(), p, "DREQ") }

// Fields returns every field; PrivateData aliases the view.
func (d DREQ) Fields() DREQFields {
	return DREQFields{d.LocalCommID(), d.RemoteCommID(), d.RemoteQPN(), d.PrivateData()}
}

// Put writes every field of f.
func (d DREQ) Put(f DREQFields) error {
	d.SetLocalCommID(f.LocalCommID)
	d.SetRemoteCommID(f.RemoteCommID)
	d.SetRemoteQPN(f.RemoteQPN)
	return d.SetPrivateData(f.PrivateData)
}
