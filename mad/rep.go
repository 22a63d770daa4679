package mad

import "encoding/binary"

// REP is a view of a connection reply (IBA Table 110).
type REP []byte

// Offsets in a REP.
const (
	offREPLocalCommID  = 0
	offREPRemoteCommID = 4
	offREPLocalQKey    = 8
	offREPLocalQPN     = 12 // 24 bits
	offREPLocalEECN    = 16 // 24 bits
	offREPStartingPSN  = 20 // 24 bits
	offREPRespRes      = 24
	offREPInitDepth    = 25
	offREPByte26       = 26 // target ACK delay:5, failover accepted:2, E2E flow control:1
	offREPByte27       = 27 // RNR retry count:3, SRQ:1
	offREPLocalCAGUID  = 28
	offREPPrivateData  = 36
	REPPrivateDataLen  = DataLen - offREPPrivateData // 196
)

// REPFields holds every field of a REP.
type REPFields struct {
	LocalCommID, RemoteCommID uint32 // the sender's and the receiver's communication IDs
	LocalQKey                 uint32 // the sender's Q_Key (RD only)
	LocalQPN                  uint32 // 24 bits
	LocalEECN                 uint32 // 24 bits
	StartingPSN               uint32 // 24 bits
	ResponderResources        uint8  // READ/atomic requests the sender takes
	InitiatorDepth            uint8  // READ/atomic requests the sender issues
	TargetACKDelay            uint8  // 5 bits
	FailoverAccepted          uint8  // 2 bits
	EndToEndFlowControl       bool   // end-to-end credits
	RNRRetryCount             uint8  // 3 bits
	SRQ                       bool   // the sender receives on an SRQ
	LocalCAGUID               uint64 // the sender's CA GUID
	PrivateData               []byte // the consumer's bytes, zero-padded; the full field when read
}

// LocalCommID returns the sender's communication ID.
func (r REP) LocalCommID() uint32 { return binary.BigEndian.Uint32(r[offREPLocalCommID:]) }

// RemoteCommID returns the receiver's communication ID.
func (r REP) RemoteCommID() uint32 { return binary.BigEndian.Uint32(r[offREPRemoteCommID:]) }

// LocalQKey returns the sender's Q_Key.
func (r REP) LocalQKey() uint32 { return binary.BigEndian.Uint32(r[offREPLocalQKey:]) }

// LocalQPN returns the sender's QP number.
func (r REP) LocalQPN() uint32 { return get24(r[offREPLocalQPN:]) }

// LocalEECN returns the sender's EE context number.
func (r REP) LocalEECN() uint32 { return get24(r[offREPLocalEECN:]) }

// StartingPSN returns the sender's first PSN.
func (r REP) StartingPSN() uint32 { return get24(r[offREPStartingPSN:]) }

// ResponderResources returns the sender's responder resources.
func (r REP) ResponderResources() uint8 { return r[offREPRespRes] }

// InitiatorDepth returns the sender's initiator depth.
func (r REP) InitiatorDepth() uint8 { return r[offREPInitDepth] }

// TargetACKDelay returns the 5-bit target ACK delay.
func (r REP) TargetACKDelay() uint8 { return bits(r[offREPByte26], 3, 5) }

// FailoverAccepted returns the 2-bit failover-accepted code.
func (r REP) FailoverAccepted() uint8 { return bits(r[offREPByte26], 1, 2) }

// EndToEndFlowControl returns the end-to-end flow control bit.
func (r REP) EndToEndFlowControl() bool { return flag(r[offREPByte26], 0) }

// RNRRetryCount returns the 3-bit RNR retry count.
func (r REP) RNRRetryCount() uint8 { return bits(r[offREPByte27], 5, 3) }

// SRQ returns the SRQ bit.
func (r REP) SRQ() bool { return flag(r[offREPByte27], 4) }

// LocalCAGUID returns the sender's CA GUID.
func (r REP) LocalCAGUID() uint64 { return binary.BigEndian.Uint64(r[offREPLocalCAGUID:]) }

// PrivateData returns the 196 bytes of private data.
func (r REP) PrivateData() []byte { return r[offREPPrivateData:DataLen] }

// SetLocalCommID sets the sender's communication ID.
func (r REP) SetLocalCommID(v uint32) { binary.BigEndian.PutUint32(r[offREPLocalCommID:], v) }

// SetRemoteCommID sets the receiver's communication ID.
func (r REP) SetRemoteCommID(v uint32) { binary.BigEndian.PutUint32(r[offREPRemoteCommID:], v) }

// SetLocalQKey sets the sender's Q_Key.
func (r REP) SetLocalQKey(v uint32) { binary.BigEndian.PutUint32(r[offREPLocalQKey:], v) }

// SetLocalQPN sets the sender's QP number.
func (r REP) SetLocalQPN(v uint32) { put24(r[offREPLocalQPN:], v) }

// SetLocalEECN sets the sender's EE context number.
func (r REP) SetLocalEECN(v uint32) { put24(r[offREPLocalEECN:], v) }

// SetStartingPSN sets the starting PSN.
func (r REP) SetStartingPSN(v uint32) { put24(r[offREPStartingPSN:], v) }

// SetResponderResources sets the responder resources.
func (r REP) SetResponderResources(v uint8) { r[offREPRespRes] = v }

// SetInitiatorDepth sets the initiator depth.
func (r REP) SetInitiatorDepth(v uint8) { r[offREPInitDepth] = v }

// SetTargetACKDelay sets the target ACK delay.
func (r REP) SetTargetACKDelay(v uint8) { setBits(r, offREPByte26, 3, 5, v) }

// SetFailoverAccepted sets the failover-accepted code.
func (r REP) SetFailoverAccepted(v uint8) { setBits(r, offREPByte26, 1, 2, v) }

// SetEndToEndFlowControl sets the end-to-end flow control bit.
func (r REP) SetEndToEndFlowControl(v bool) { setFlag(r, offREPByte26, 0, v) }

// SetRNRRetryCount sets the RNR retry count.
func (r REP) SetRNRRetryCount(v uint8) { setBits(r, offREPByte27, 5, 3, v) }

// SetSRQ sets the SRQ bit.
func (r REP) SetSRQ(v bool) { setFlag(r, offREPByte27, 4, v) }

// SetLocalCAGUID sets the sender's CA GUID.
func (r REP) SetLocalCAGUID(v uint64) { binary.BigEndian.PutUint64(r[offREPLocalCAGUID:], v) }

// SetPrivateData copies p into the private data and zeroes the rest.
func (r REP) SetPrivateData(p []byte) error { return setPrivate(r.PrivateData(), p, "REP") }

// Fields returns every field; PrivateData aliases the view.
func (r REP) Fields() REPFields {
	return REPFields{
		LocalCommID: r.LocalCommID(), RemoteCommID: r.RemoteCommID(), LocalQKey: r.LocalQKey(),
		LocalQPN: r.LocalQPN(), LocalEECN: r.LocalEECN(), StartingPSN: r.StartingPSN(),
		ResponderResources: r.ResponderResources(), InitiatorDepth: r.InitiatorDepth(),
		TargetACKDelay: r.TargetACKDelay(), FailoverAccepted: r.FailoverAccepted(),
		EndToEndFlowControl: r.EndToEndFlowControl(), RNRRetryCount: r.RNRRetryCount(), SRQ: r.SRQ(),
		LocalCAGUID: r.LocalCAGUID(), PrivateData: r.PrivateData(),
	}
}

// Put writes every field of f.
func (r REP) Put(f REPFields) error {
	r.SetLocalCommID(f.LocalCommID)
	r.SetRemoteCommID(f.RemoteCommID)
	r.SetLocalQKey(f.LocalQKey)
	r.SetLocalQPN(f.LocalQPN)
	r.SetLocalEECN(f.LocalEECN)
	r.SetStartingPSN(f.StartingPSN)
	r.SetResponderResources(f.ResponderResources)
	r.SetInitiatorDepth(f.InitiatorDepth)
	r.SetTargetACKDelay(f.TargetACKDelay)
	r.SetFailoverAccepted(f.FailoverAccepted)
	r.SetEndToEndFlowControl(f.EndToEndFlowControl)
	r.SetRNRRetryCount(f.RNRRetryCount)
	r.SetSRQ(f.SRQ)
	r.SetLocalCAGUID(f.LocalCAGUID)
	return r.SetPrivateData(f.PrivateData)
}
