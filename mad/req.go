package mad

import "encoding/binary"

// REQ is a view of a connection request (IBA Table 106, as the
// kernel's ibta_vol1_c12.h numbers it) in a MAD's data.
type REQ []byte

// Offsets in a REQ; bit fields name their byte.
const (
	offREQLocalCommID = 0
	offREQServiceID   = 8
	offREQLocalCAGUID = 16
	offREQLocalQKey   = 28
	offREQLocalQPN    = 32 // 24 bits, then responder resources
	offREQRespRes     = 35
	offREQLocalEECN   = 36 // 24 bits, then initiator depth
	offREQInitDepth   = 39
	offREQRemoteEECN  = 40 // 24 bits, then byte 43
	offREQByte43      = 43 // remote CM response timeout:5, transport type:2, E2E flow control:1
	offREQStartingPSN = 44 // 24 bits, then byte 47
	offREQByte47      = 47 // local CM response timeout:5, retry count:3
	offREQPKey        = 48
	offREQByte50      = 50 // path MTU:4, RDC exists:1, RNR retry count:3
	offREQByte51      = 51 // max CM retries:4, SRQ:1, extended transport type:3
	offREQPrimaryPath = 52
	offREQAltPath     = 96
	offREQPrivateData = 140
	REQPrivateDataLen = DataLen - offREQPrivateData // 92
)

// REQFields holds every field of a REQ. The alternate path's last byte
// also holds SAP supported (bit 2 of byte 139).
type REQFields struct {
	LocalCommID             uint32     // the sender's communication ID
	ServiceID               uint64     // the service connected to
	LocalCAGUID             uint64     // the sender's CA GUID
	LocalQKey               uint32     // the sender's Q_Key (RD only)
	LocalQPN                uint32     // 24 bits
	ResponderResources      uint8      // READ/atomic requests the sender takes
	LocalEECN               uint32     // 24 bits
	InitiatorDepth          uint8      // READ/atomic requests the sender issues
	RemoteEECN              uint32     // 24 bits
	RemoteCMResponseTimeout uint8      // 5 bits: 4.096 µs * 2^n
	TransportServiceType    uint8      // 2 bits: 0 RC, 1 UC, 3 XRC (the kernel's encoding)
	EndToEndFlowControl     bool       // end-to-end credits
	StartingPSN             uint32     // 24 bits
	LocalCMResponseTimeout  uint8      // 5 bits
	RetryCount              uint8      // 3 bits
	PKey                    uint16     // partition key
	PathMTU                 uint8      // 4 bits, IBA MTU encoding (3 = 1024)
	RDCExists               bool       // RD only
	RNRRetryCount           uint8      // 3 bits
	MaxCMRetries            uint8      // 4 bits
	SRQ                     bool       // the sender receives on an SRQ
	ExtendedTransportType   uint8      // 3 bits
	Primary, Alternate      PathFields // the paths (alternate all zero without APM)
	SAPSupported            bool       // SAP supported, byte 139 bit 2
	PrivateData             []byte     // REQPrivateDataLen bytes when read
}

// LocalCommID returns the sender's communication ID.
func (r REQ) LocalCommID() uint32 { return binary.BigEndian.Uint32(r[offREQLocalCommID:]) }

// ServiceID returns the service ID.
func (r REQ) ServiceID() uint64 { return binary.BigEndian.Uint64(r[offREQServiceID:]) }

// LocalCAGUID returns the sender's CA GUID.
func (r REQ) LocalCAGUID() uint64 { return binary.BigEndian.Uint64(r[offREQLocalCAGUID:]) }

// LocalQKey returns the sender's Q_Key.
func (r REQ) LocalQKey() uint32 { return binary.BigEndian.Uint32(r[offREQLocalQKey:]) }

// LocalQPN returns the sender's QP number.
func (r REQ) LocalQPN() uint32 { return get24(r[offREQLocalQPN:]) }

// ResponderResources returns how many RDMA READ/atomic requests the sender
// takes as responder.
func (r REQ) ResponderResources() uint8 { return r[offREQRespRes] }

// LocalEECN returns the sender's EE context number (RD only).
func (r REQ) LocalEECN() uint32 { return get24(r[offREQLocalEECN:]) }

// InitiatorDepth returns how many RDMA READ/atomic requests the sender
// keeps outstanding as requester.
func (r REQ) InitiatorDepth() uint8 { return r[offREQInitDepth] }

// RemoteEECN returns the remote EE context number (RD only).
func (r REQ) RemoteEECN() uint32 { return get24(r[offREQRemoteEECN:]) }

// RemoteCMResponseTimeout returns the 5-bit timeout the sender allows the
// remote CM to answer in.
func (r REQ) RemoteCMResponseTimeout() uint8 { return bits(r[offREQByte43], 3, 5) }

// TransportServiceType returns the 2-bit transport service type.
func (r REQ) TransportServiceType() uint8 { return bits(r[offREQByte43], 1, 2) }

// EndToEndFlowControl returns the end-to-end flow control bit.
func (r REQ) EndToEndFlowControl() bool { return flag(r[offREQByte43], 0) }

// StartingPSN returns the sender's first PSN.
func (r REQ) StartingPSN() uint32 { return get24(r[offREQStartingPSN:]) }

// LocalCMResponseTimeout returns the sender's own 5-bit CM response timeout.
func (r REQ) LocalCMResponseTimeout() uint8 { return bits(r[offREQByte47], 3, 5) }

// RetryCount returns the 3-bit transport retry count.
func (r REQ) RetryCount() uint8 { return bits(r[offREQByte47], 0, 3) }

// PKey returns the partition key.
func (r REQ) PKey() uint16 { return binary.BigEndian.Uint16(r[offREQPKey:]) }

// PathMTU returns the 4-bit path MTU.
func (r REQ) PathMTU() uint8 { return bits(r[offREQByte50], 4, 4) }

// RDCExists returns the RDC-exists bit.
func (r REQ) RDCExists() bool { return flag(r[offREQByte50], 3) }

// RNRRetryCount returns the 3-bit RNR retry count.
func (r REQ) RNRRetryCount() uint8 { return bits(r[offREQByte50], 0, 3) }

// MaxCMRetries returns the 4-bit count of CM retries.
func (r REQ) MaxCMRetries() uint8 { return bits(r[offREQByte51], 4, 4) }

// SRQ returns the SRQ bit.
func (r REQ) SRQ() bool { return flag(r[offREQByte51], 3) }

// ExtendedTransportType returns the 3-bit extended transport type.
func (r REQ) ExtendedTransportType() uint8 { return bits(r[offREQByte51], 0, 3) }

// Primary returns the primary path.
func (r REQ) Primary() Path { return Path(r[offREQPrimaryPath : offREQPrimaryPath+PathLen]) }

// Alternate returns the alternate path.
func (r REQ) Alternate() Path { return Path(r[offREQAltPath : offREQAltPath+PathLen]) }

// SAPSupported returns the SAP-supported bit (byte 139, after the
// alternate local ACK timeout).
func (r REQ) SAPSupported() bool { return flag(r[offREQAltPath+offPathACK], 2) }

// PrivateData returns the 92 bytes of private data.
func (r REQ) PrivateData() []byte { return r[offREQPrivateData:DataLen] }

// SetLocalCommID sets the sender's communication ID.
func (r REQ) SetLocalCommID(v uint32) { binary.BigEndian.PutUint32(r[offREQLocalCommID:], v) }

// SetServiceID sets the service ID.
func (r REQ) SetServiceID(v uint64) { binary.BigEndian.PutUint64(r[offREQServiceID:], v) }

// SetLocalCAGUID sets the sender's CA GUID.
func (r REQ) SetLocalCAGUID(v uint64) { binary.BigEndian.PutUint64(r[offREQLocalCAGUID:], v) }

// SetLocalQKey sets the sender's Q_Key.
func (r REQ) SetLocalQKey(v uint32) { binary.BigEndian.PutUint32(r[offREQLocalQKey:], v) }

// SetLocalQPN sets the sender's QP number.
func (r REQ) SetLocalQPN(v uint32) { put24(r[offREQLocalQPN:], v) }

// SetResponderResources sets the responder resources.
func (r REQ) SetResponderResources(v uint8) { r[offREQRespRes] = v }

// SetLocalEECN sets the local EE context number.
func (r REQ) SetLocalEECN(v uint32) { put24(r[offREQLocalEECN:], v) }

// SetInitiatorDepth sets the initiator depth.
func (r REQ) SetInitiatorDepth(v uint8) { r[offREQInitDepth] = v }

// SetRemoteEECN sets the remote EE context number.
func (r REQ) SetRemoteEECN(v uint32) { put24(r[offREQRemoteEECN:], v) }

// SetRemoteCMResponseTimeout sets the remote CM response timeout.
func (r REQ) SetRemoteCMResponseTimeout(v uint8) { setBits(r, offREQByte43, 3, 5, v) }

// SetTransportServiceType sets the transport service type.
func (r REQ) SetTransportServiceType(v uint8) { setBits(r, offREQByte43, 1, 2, v) }

// SetEndToEndFlowControl sets the end-to-end flow control bit.
func (r REQ) SetEndToEndFlowControl(v bool) { setFlag(r, offREQByte43, 0, v) }

// SetStartingPSN sets the starting PSN.
func (r REQ) SetStartingPSN(v uint32) { put24(r[offREQStartingPSN:], v) }

// SetLocalCMResponseTimeout sets the local CM response timeout.
func (r REQ) SetLocalCMResponseTimeout(v uint8) { setBits(r, offREQByte47, 3, 5, v) }

// SetRetryCount sets the retry count.
func (r REQ) SetRetryCount(v uint8) { setBits(r, offREQByte47, 0, 3, v) }

// SetPKey sets the partition key.
func (r REQ) SetPKey(v uint16) { binary.BigEndian.PutUint16(r[offREQPKey:], v) }

// SetPathMTU sets the path MTU.
func (r REQ) SetPathMTU(v uint8) { setBits(r, offREQByte50, 4, 4, v) }

// SetRDCExists sets the RDC-exists bit.
func (r REQ) SetRDCExists(v bool) { setFlag(r, offREQByte50, 3, v) }

// SetRNRRetryCount sets the RNR retry count.
func (r REQ) SetRNRRetryCount(v uint8) { setBits(r, offREQByte50, 0, 3, v) }

// SetMaxCMRetries sets the max CM retries.
func (r REQ) SetMaxCMRetries(v uint8) { setBits(r, offREQByte51, 4, 4, v) }

// SetSRQ sets the SRQ bit.
func (r REQ) SetSRQ(v bool) { setFlag(r, offREQByte51, 3, v) }

// SetExtendedTransportType sets the extended transport type.
func (r REQ) SetExtendedTransportType(v uint8) { setBits(r, offREQByte51, 0, 3, v) }

// SetSAPSupported sets the SAP-supported bit.
func (r REQ) SetSAPSupported(v bool) { setFlag(r, offREQAltPath+offPathACK, 2, v) }

// SetPrivateData copies p into the private data and zeroes the rest.
func (r REQ) SetPrivateData(p []byte) error { return setPrivate(r.PrivateData(), p, "REQ") }

// Fields returns every field of the REQ; PrivateData aliases the view.
func (r REQ) Fields() REQFields {
	return REQFields{
		LocalCommID: r.LocalCommID(), ServiceID: r.ServiceID(), LocalCAGUID: r.LocalCAGUID(),
		LocalQKey: r.LocalQKey(), LocalQPN: r.LocalQPN(), ResponderResources: r.ResponderResources(),
		LocalEECN: r.LocalEECN(), InitiatorDepth: r.InitiatorDepth(), RemoteEECN: r.RemoteEECN(),
		RemoteCMResponseTimeout: r.RemoteCMResponseTimeout(), TransportServiceType: r.TransportServiceType(),
		EndToEndFlowControl: r.EndToEndFlowControl(), StartingPSN: r.StartingPSN(),
		LocalCMResponseTimeout: r.LocalCMResponseTimeout(), RetryCount: r.RetryCount(), PKey: r.PKey(),
		PathMTU: r.PathMTU(), RDCExists: r.RDCExists(), RNRRetryCount: r.RNRRetryCount(),
		MaxCMRetries: r.MaxCMRetries(), SRQ: r.SRQ(), ExtendedTransportType: r.ExtendedTransportType(),
		Primary: r.Primary().Fields(), Alternate: r.Alternate().Fields(),
		SAPSupported: r.SAPSupported(), PrivateData: r.PrivateData(),
	}
}

// Put writes every field of f.
func (r REQ) Put(f REQFields) error {
	r.SetLocalCommID(f.LocalCommID)
	r.SetServiceID(f.ServiceID)
	r.SetLocalCAGUID(f.LocalCAGUID)
	r.SetLocalQKey(f.LocalQKey)
	r.SetLocalQPN(f.LocalQPN)
	r.SetResponderResources(f.ResponderResources)
	r.SetLocalEECN(f.LocalEECN)
	r.SetInitiatorDepth(f.InitiatorDepth)
	r.SetRemoteEECN(f.RemoteEECN)
	r.SetRemoteCMResponseTimeout(f.RemoteCMResponseTimeout)
	r.SetTransportServiceType(f.TransportServiceType)
	r.SetEndToEndFlowControl(f.EndToEndFlowControl)
	r.SetStartingPSN(f.StartingPSN)
	r.SetLocalCMResponseTimeout(f.LocalCMResponseTimeout)
	r.SetRetryCount(f.RetryCount)
	r.SetPKey(f.PKey)
	r.SetPathMTU(f.PathMTU)
	r.SetRDCExists(f.RDCExists)
	r.SetRNRRetryCount(f.RNRRetryCount)
	r.SetMaxCMRetries(f.MaxCMRetries)
	r.SetSRQ(f.SRQ)
	r.SetExtendedTransportType(f.ExtendedTransportType)
	r.Primary().Put(f.Primary)
	r.Alternate().Put(f.Alternate)
	r.SetSAPSupported(f.SAPSupported)
	return r.SetPrivateData(f.PrivateData)
}
