package mad

import (
	"encoding/binary"

	"github.com/goroce/goroce/bth"
)

// LAP is a view of a load alternate path request (IBA Table 115).
// Its alternate path holds a REQ path's fields in another order.
type LAP []byte

// Offsets in a LAP.
const (
	offLAPLocalCommID  = 0
	offLAPRemoteCommID = 4
	offLAPRemoteQPN    = 12 // 24 bits
	offLAPTimeout      = 15 // remote CM response timeout in the top 5 bits
	offLAPLocalLID     = 20
	offLAPRemoteLID    = 22
	offLAPLocalGID     = 24
	offLAPRemoteGID    = 40
	offLAPFlowLabel    = 56 // 20 bits
	offLAPTClass       = 59
	offLAPHopLimit     = 60
	offLAPRate         = 61 // low 6 bits
	offLAPSL           = 62 // SL:4, subnet local:1
	offLAPACK          = 63 // local ACK timeout in the top 5 bits
	offLAPPrivateData  = 64
	LAPPrivateDataLen  = DataLen - offLAPPrivateData // 168
)

// LAPFields holds every field of a LAP.
type LAPFields struct {
	LocalCommID, RemoteCommID uint32     // the sender's and the receiver's communication IDs
	RemoteQPN                 uint32     // 24 bits
	RemoteCMResponseTimeout   uint8      // 5 bits
	Alternate                 PathFields // the path to load
	PrivateData               []byte     // the consumer's bytes, zero-padded; the full field when read
}

// LocalCommID returns the sender's communication ID.
func (l LAP) LocalCommID() uint32 { return binary.BigEndian.Uint32(l[offLAPLocalCommID:]) }

// RemoteCommID returns the receiver's communication ID.
func (l LAP) RemoteCommID() uint32 { return binary.BigEndian.Uint32(l[offLAPRemoteCommID:]) }

// RemoteQPN returns the receiver's QPN/EECN.
func (l LAP) RemoteQPN() uint32 { return get24(l[offLAPRemoteQPN:]) }

// RemoteCMResponseTimeout returns the 5-bit remote CM response timeout.
func (l LAP) RemoteCMResponseTimeout() uint8 { return bits(l[offLAPTimeout], 3, 5) }

// Alternate returns the alternate path's fields.
func (l LAP) Alternate() PathFields {
	return PathFields{
		LocalLID:        binary.BigEndian.Uint16(l[offLAPLocalLID:]),
		RemoteLID:       binary.BigEndian.Uint16(l[offLAPRemoteLID:]),
		LocalGID:        bth.GID(l[offLAPLocalGID:]),
		RemoteGID:       bth.GID(l[offLAPRemoteGID:]),
		FlowLabel:       flowLabel(l[offLAPFlowLabel:]),
		TrafficClass:    l[offLAPTClass],
		HopLimit:        l[offLAPHopLimit],
		PacketRate:      bits(l[offLAPRate], 0, 6),
		SL:              bits(l[offLAPSL], 4, 4),
		SubnetLocal:     flag(l[offLAPSL], 3),
		LocalACKTimeout: bits(l[offLAPACK], 3, 5),
	}
}

// PrivateData returns the 168 bytes of private data.
func (l LAP) PrivateData() []byte { return l[offLAPPrivateData:DataLen] }

// SetLocalCommID sets the sender's communication ID.
func (l LAP) SetLocalCommID(v uint32) { binary.BigEndian.PutUint32(l[offLAPLocalCommID:], v) }

// SetRemoteCommID sets the receiver's communication ID.
func (l LAP) SetRemoteCommID(v uint32) { binary.BigEndian.PutUint32(l[offLAPRemoteCommID:], v) }

// SetRemoteQPN sets the receiver's QPN/EECN.
func (l LAP) SetRemoteQPN(v uint32) { put24(l[offLAPRemoteQPN:], v) }

// SetRemoteCMResponseTimeout sets the remote CM response timeout.
func (l LAP) SetRemoteCMResponseTimeout(v uint8) { setBits(l, offLAPTimeout, 3, 5, v) }

// SetAlternate writes the alternate path.
func (l LAP) SetAlternate(p PathFields) {
	binary.BigEndian.PutUint16(l[offLAPLocalLID:], p.LocalLID)
	binary.BigEndian.PutUint16(l[offLAPRemoteLID:], p.RemoteLID)
	copy(l[offLAPLocalGID:], p.LocalGID[:])
	copy(l[offLAPRemoteGID:], p.RemoteGID[:])
	setFlowLabel(l[offLAPFlowLabel:], p.FlowLabel)
	l[offLAPTClass] = p.TrafficClass
	l[offLAPHopLimit] = p.HopLimit
	setBits(l, offLAPRate, 0, 6, p.PacketRate)
	setBits(l, offLAPSL, 4, 4, p.SL)
	setFlag(l, offLAPSL, 3, p.SubnetLocal)
	setBits(l, offLAPACK, 3, 5, p.LocalACKTimeout)
}

// SetPrivateData copies p into the private data and zeroes the rest.
func (l LAP) SetPrivateData(p []byte) error { return setPrivate(l.PrivateData(), p, "LAP") }

// Fields returns every field; PrivateData aliases the view.
func (l LAP) Fields() LAPFields {
	return LAPFields{l.LocalCommID(), l.RemoteCommID(), l.RemoteQPN(), l.RemoteCMResponseTimeout(),
		l.Alternate(), l.PrivateData()}
}

// Put writes every field of f.
func (l LAP) Put(f LAPFields) error {
	l.SetLocalCommID(f.LocalCommID)
	l.SetRemoteCommID(f.RemoteCommID)
	l.SetRemoteQPN(f.RemoteQPN)
	l.SetRemoteCMResponseTimeout(f.RemoteCMResponseTimeout)
	l.SetAlternate(f.Alternate)
	return l.SetPrivateData(f.PrivateData)
}
