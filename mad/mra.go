package mad

import "encoding/binary"

// MRA is a view of a message receipt acknowledgement (IBA Table
// 107): "I got your message; the answer will take ServiceTimeout".
type MRA []byte

// Offsets in an MRA.
const (
	offMRALocalCommID  = 0
	offMRARemoteCommID = 4
	offMRAMessage      = 8 // message MRAed in the top 2 bits
	offMRATimeout      = 9 // service timeout in the top 5 bits
	offMRAPrivateData  = 10
	MRAPrivateDataLen  = DataLen - offMRAPrivateData // 222
)

// MRAFields holds every field of an MRA.
type MRAFields struct {
	LocalCommID, RemoteCommID uint32  // the sender's and the receiver's communication IDs
	MessageMRAed              MsgKind // 2 bits
	ServiceTimeout            uint8   // 5 bits: 4.096 µs * 2^n
	PrivateData               []byte  // the consumer's bytes, zero-padded; the full field when read
}

// LocalCommID returns the sender's communication ID.
func (m MRA) LocalCommID() uint32 { return binary.BigEndian.Uint32(m[offMRALocalCommID:]) }

// RemoteCommID returns the receiver's communication ID.
func (m MRA) RemoteCommID() uint32 { return binary.BigEndian.Uint32(m[offMRARemoteCommID:]) }

// MessageMRAed returns which message is acknowledged.
func (m MRA) MessageMRAed() MsgKind { return MsgKind(bits(m[offMRAMessage], 6, 2)) }

// ServiceTimeout returns the 5-bit time the sender needs.
func (m MRA) ServiceTimeout() uint8 { return bits(m[offMRATimeout], 3, 5) }

// PrivateData returns the 222 bytes of private data.
func (m MRA) PrivateData() []byte { return m[offMRAPrivateData:DataLen] }

// SetLocalCommID sets the sender's communication ID.
func (m MRA) SetLocalCommID(v uint32) { binary.BigEndian.PutUint32(m[offMRALocalCommID:], v) }

// SetRemoteCommID sets the receiver's communication ID.
func (m MRA) SetRemoteCommID(v uint32) { binary.BigEndian.PutUint32(m[offMRARemoteCommID:], v) }

// SetMessageMRAed sets which message is acknowledged.
func (m MRA) SetMessageMRAed(v MsgKind) { setBits(m, offMRAMessage, 6, 2, uint8(v)) }

// SetServiceTimeout sets the service timeout.
func (m MRA) SetServiceTimeout(v uint8) { setBits(m, offMRATimeout, 3, 5, v) }

// SetPrivateData copies p into the private data and zeroes the rest.
func (m MRA) SetPrivateData(p []byte) error { return setPrivate(m.PrivateData(), p, "MRA") }

// Fields returns every field; PrivateData aliases the view.
func (m MRA) Fields() MRAFields {
	return MRAFields{m.LocalCommID(), m.RemoteCommID(), m.MessageMRAed(), m.ServiceTimeout(), m.PrivateData()}
}

// Put writes every field of f.
func (m MRA) Put(f MRAFields) error {
	m.SetLocalCommID(f.LocalCommID)
	m.SetRemoteCommID(f.RemoteCommID)
	m.SetMessageMRAed(f.MessageMRAed)
	m.SetServiceTimeout(f.ServiceTimeout)
	return m.SetPrivateData(f.PrivateData)
}
