package mad

import "encoding/binary"

// RTU (ready to use, IBA Table 111) and DREP (disconnect reply,
// IBA Table 113) have the same layout: the two communication IDs
// and 224 bytes of private data. pairMsg is that layout; each message is
// its own type over it.
type pairMsg []byte

// Offsets in an RTU or DREP.
const (
	offPairLocalCommID  = 0
	offPairRemoteCommID = 4
	offPairPrivateData  = 8
	// RTUPrivateDataLen and DREPPrivateDataLen are the private data sizes.
	RTUPrivateDataLen  = DataLen - offPairPrivateData // 224
	DREPPrivateDataLen = RTUPrivateDataLen
)

// RTU is a view of a ready-to-use message.
type RTU struct{ pairMsg }

// DREP is a view of a disconnect reply.
type DREP struct{ pairMsg }

// PairFields holds every field of an RTU or DREP.
type PairFields struct {
	LocalCommID, RemoteCommID uint32 // the sender's and the receiver's communication IDs
	PrivateData               []byte // the consumer's bytes, zero-padded; the full field when read
}

// LocalCommID returns the sender's communication ID.
func (p pairMsg) LocalCommID() uint32 { return binary.BigEndian.Uint32(p[offPairLocalCommID:]) }

// RemoteCommID returns the receiver's communication ID.
func (p pairMsg) RemoteCommID() uint32 { return binary.BigEndian.Uint32(p[offPairRemoteCommID:]) }

// PrivateData returns the 224 bytes of private data.
func (p pairMsg) PrivateData() []byte { return p[offPairPrivateData:DataLen] }

// SetLocalCommID sets the sender's communication ID.
func (p pairMsg) SetLocalCommID(v uint32) { binary.BigEndian.PutUint32(p[offPairLocalCommID:], v) }

// SetRemoteCommID sets the receiver's communication ID.
func (p pairMsg) SetRemoteCommID(v uint32) { binary.BigEndian.PutUint32(p[offPairRemoteCommID:], v) }

// SetPrivateData copies b into the private data and zeroes the rest.
func (p pairMsg) SetPrivateData(b []byte) error { return setPrivate(p.PrivateData(), b, "RTU/DREP") }

// Fields returns every field; PrivateData aliases the view.
func (p pairMsg) Fields() PairFields {
	return PairFields{p.LocalCommID(), p.RemoteCommID(), p.PrivateData()}
}

// Put writes every field of f.
func (p pairMsg) Put(f PairFields) error {
	p.SetLocalCommID(f.LocalCommID)
	p.SetRemoteCommID(f.RemoteCommID)
	return p.SetPrivateData(f.PrivateData)
}

// Bytes returns the view's bytes.
func (p pairMsg) Bytes() []byte { return p }
