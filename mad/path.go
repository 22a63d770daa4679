package mad

import (
	"encoding/binary"

	"github.com/goroce/goroce/bth"
)

// Path is a view of the 44-byte path description a REQ carries twice,
// primary and alternate (IBA Table 106, REQ bytes 52-95 and 96-139).
type Path []byte

// PathLen is the size of a REQ path.
const PathLen = 44

// Offsets inside a Path.
const (
	offPathLocalLID  = 0
	offPathRemoteLID = 2
	offPathLocalGID  = 4
	offPathRemoteGID = 20
	offPathFlowLabel = 36 // 20 bits, then 6 reserved, then the rate
	offPathRate      = 39 // low 6 bits
	offPathTClass    = 40
	offPathHopLimit  = 41
	offPathSL        = 42 // SL in the top 4 bits, subnet local next
	offPathACK       = 43 // local ACK timeout in the top 5 bits
)

// PathFields holds a path's fields. On RoCE the LIDs are 0xffff (the
// permissive LID: no subnet manager) and the GIDs are the IP addresses.
type PathFields struct {
	LocalLID, RemoteLID uint16  // port LIDs (0xffff on RoCE)
	LocalGID, RemoteGID bth.GID // port GIDs
	FlowLabel           uint32  // 20 bits
	PacketRate          uint8   // 6 bits, IBA rate encoding (0: the port's current rate)
	TrafficClass        uint8   // GRH traffic class
	HopLimit            uint8   // GRH hop limit
	SL                  uint8   // service level, 4 bits
	SubnetLocal         bool    // the path stays in the subnet
	LocalACKTimeout     uint8   // 5 bits: 4.096 µs * 2^n
}

// LocalLID returns the local port LID.
func (p Path) LocalLID() uint16 { return binary.BigEndian.Uint16(p[offPathLocalLID:]) }

// RemoteLID returns the remote port LID.
func (p Path) RemoteLID() uint16 { return binary.BigEndian.Uint16(p[offPathRemoteLID:]) }

// LocalGID returns the local port GID.
func (p Path) LocalGID() bth.GID { return bth.GID(p[offPathLocalGID:]) }

// RemoteGID returns the remote port GID.
func (p Path) RemoteGID() bth.GID { return bth.GID(p[offPathRemoteGID:]) }

// FlowLabel returns the 20-bit flow label.
func (p Path) FlowLabel() uint32 { return flowLabel(p[offPathFlowLabel:]) }

// PacketRate returns the 6-bit packet rate.
func (p Path) PacketRate() uint8 { return bits(p[offPathRate], 0, 6) }

// TrafficClass returns the traffic class.
func (p Path) TrafficClass() uint8 { return p[offPathTClass] }

// HopLimit returns the hop limit.
func (p Path) HopLimit() uint8 { return p[offPathHopLimit] }

// SL returns the 4-bit service level.
func (p Path) SL() uint8 { return bits(p[offPathSL], 4, 4) }

// SubnetLocal returns the subnet-local bit.
func (p Path) SubnetLocal() bool { return flag(p[offPathSL], 3) }

// LocalACKTimeout returns the 5-bit local ACK timeout.
func (p Path) LocalACKTimeout() uint8 { return bits(p[offPathACK], 3, 5) }

// SetLocalLID sets the local port LID.
func (p Path) SetLocalLID(v uint16) { binary.BigEndian.PutUint16(p[offPathLocalLID:], v) }

// SetRemoteLID sets the remote port LID.
func (p Path) SetRemoteLID(v uint16) { binary.BigEndian.PutUint16(p[offPathRemoteLID:], v) }

// SetLocalGID sets the local port GID.
func (p Path) SetLocalGID(g bth.GID) { copy(p[offPathLocalGID:], g[:]) }

// SetRemoteGID sets the remote port GID.
func (p Path) SetRemoteGID(g bth.GID) { copy(p[offPathRemoteGID:], g[:]) }

// SetFlowLabel sets the 20-bit flow label.
func (p Path) SetFlowLabel(v uint32) { setFlowLabel(p[offPathFlowLabel:], v) }

// SetPacketRate sets the 6-bit packet rate.
func (p Path) SetPacketRate(v uint8) { setBits(p, offPathRate, 0, 6, v) }

// SetTrafficClass sets the traffic class.
func (p Path) SetTrafficClass(v uint8) { p[offPathTClass] = v }

// SetHopLimit sets the hop limit.
func (p Path) SetHopLimit(v uint8) { p[offPathHopLimit] = v }

// SetSL sets the 4-bit service level.
func (p Path) SetSL(v uint8) { setBits(p, offPathSL, 4, 4, v) }

// SetSubnetLocal sets the subnet-local bit.
func (p Path) SetSubnetLocal(v bool) { setFlag(p, offPathSL, 3, v) }

// SetLocalACKTimeout sets the 5-bit local ACK timeout.
func (p Path) SetLocalACKTimeout(v uint8) { setBits(p, offPathACK, 3, 5, v) }

// Fields returns every field of the path.
func (p Path) Fields() PathFields {
	return PathFields{
		LocalLID: p.LocalLID(), RemoteLID: p.RemoteLID(),
		LocalGID: p.LocalGID(), RemoteGID: p.RemoteGID(),
		FlowLabel: p.FlowLabel(), PacketRate: p.PacketRate(),
		TrafficClass: p.TrafficClass(), HopLimit: p.HopLimit(),
		SL: p.SL(), SubnetLocal: p.SubnetLocal(), LocalACKTimeout: p.LocalACKTimeout(),
	}
}

// Put writes every field of f.
func (p Path) Put(f PathFields) {
	p.SetLocalLID(f.LocalLID)
	p.SetRemoteLID(f.RemoteLID)
	p.SetLocalGID(f.LocalGID)
	p.SetRemoteGID(f.RemoteGID)
	p.SetFlowLabel(f.FlowLabel)
	p.SetPacketRate(f.PacketRate)
	p.SetTrafficClass(f.TrafficClass)
	p.SetHopLimit(f.HopLimit)
	p.SetSL(f.SL)
	p.SetSubnetLocal(f.SubnetLocal)
	p.SetLocalACKTimeout(f.LocalACKTimeout)
}
