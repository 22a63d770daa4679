package transport

import (
	"errors"
	"fmt"

	"github.com/goroce/goroce/bth"
)

// Type is a QP transport service, with the values of enum ibv_qp_type.
type QPType uint8

// QP types.
const (
	RC QPType = 2
	UC QPType = 3
	UD QPType = 4
	// XRCIni is an XRC initiator QP (IBV_QPT_XRC_SEND): a send queue and
	// no receive queue; each send names the target's XRC SRQ
	// (SendWR.RemoteSRQN), which its packets carry in an XRCETH.
	XRCIni QPType = 9
	// XRCTgt is an XRC target QP (IBV_QPT_XRC_RECV): it belongs to an
	// XRC domain (InitAttr.XRCD) and has neither queue of its own; each
	// request it takes is received into, and completes on the CQ of, the
	// XRC SRQ of that domain its XRCETH names.
	XRCTgt   QPType = 10
	numTypes        = XRCTgt + 1
)

var typeNames = [numTypes]string{RC: "RC", UC: "UC", UD: "UD", XRCIni: "XRC_INI", XRCTgt: "XRC_TGT"}

// String returns "RC", "UC", "UD", "XRC_INI" or "XRC_TGT".
func (t QPType) String() string {
	if t < numTypes && typeNames[t] != "" {
		return typeNames[t]
	}
	return fmt.Sprintf("QPType(%d)", uint8(t))
}

// typeTransport is the one transport whose opcodes each QP type takes: the
// opcode table (bth.OpCode.Info) names every opcode's transport, and header
// validation compares the two.
var typeTransport = [numTypes]bth.Transport{RC: bth.TransportRC, UC: bth.TransportUC, UD: bth.TransportUD,
	XRCIni: bth.TransportXRC, XRCTgt: bth.TransportXRC}

// reliable reports whether t is acknowledged, retried and completed on
// acknowledgement as RC is: RC and both XRC halves (XRC is RC's protocol
// with an XRCETH, IBA 9.2.5).
func (t QPType) reliable() bool { return t == RC || t == XRCIni || t == XRCTgt }

// opcode returns operation op (a transport-0 opcode: bth.SendOnly,
// bth.RCAcknowledge, ...) in t's transport.
func (t QPType) opcode(op bth.OpCode) bth.OpCode { return bth.OpCode(t.transport())<<5 | op }

// transport returns the transport of the opcodes a QP of type t sends and
// receives.
func (t QPType) transport() bth.Transport { return typeTransport[t] }

// State is a QP state, with the values of enum ibv_qp_state.
type QPState uint8

// QP states (IBA 10.3.1).
const (
	Reset QPState = iota
	Init
	RTR
	RTS
	SQD
	SQE
	Err
)

var stateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

// String returns the state's name as rdma-core prints it ("RTS").
func (s QPState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// MTU is a path MTU, with the values of enum ibv_mtu.
type MTU uint8

// Path MTUs.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the MTU in bytes (0 for an invalid value).
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// Valid reports whether m is one of the five IB MTUs.
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

// String returns the MTU in bytes ("1024").
func (m MTU) String() string { return fmt.Sprint(m.Bytes()) }

// MTUFor returns the active MTU of a port on a link whose IP MTU is ipMTU:
// the largest IB MTU that fits once 80 bytes of headers are taken off (100
// over IPv6), the rule Linux rxe applies (1500 gives 1024, 4200 gives 4096).
func MTUFor(ipMTU int, v6 bool) MTU {
	room := ipMTU - 80
	if v6 {
		room -= 20
	}
	for m := MTU4096; m > MTU256; m-- {
		if m.Bytes() <= room {
			return m
		}
	}
	return MTU256
}

// AttrMask selects the attributes Modify sets, with the bit values of enum
// ibv_qp_attr_mask.
type QPAttrMask uint32

// Attribute mask bits.
const (
	AttrState            QPAttrMask = 1 << 0
	AttrCurState         QPAttrMask = 1 << 1
	AttrEnSQDAsyncNotify QPAttrMask = 1 << 2
	AttrAccessFlags      QPAttrMask = 1 << 3
	AttrPKeyIndex        QPAttrMask = 1 << 4
	AttrPort             QPAttrMask = 1 << 5
	AttrQKey             QPAttrMask = 1 << 6
	AttrAV               QPAttrMask = 1 << 7
	AttrPathMTU          QPAttrMask = 1 << 8
	AttrTimeout          QPAttrMask = 1 << 9
	AttrRetryCnt         QPAttrMask = 1 << 10
	AttrRNRRetry         QPAttrMask = 1 << 11
	AttrRQPSN            QPAttrMask = 1 << 12
	AttrMaxQPRdAtomic    QPAttrMask = 1 << 13
	AttrAltPath          QPAttrMask = 1 << 14
	AttrMinRNRTimer      QPAttrMask = 1 << 15
	AttrSQPSN            QPAttrMask = 1 << 16
	AttrMaxDestRdAtomic  QPAttrMask = 1 << 17
	AttrPathMigState     QPAttrMask = 1 << 18
	AttrCap              QPAttrMask = 1 << 19
	AttrDestQPN          QPAttrMask = 1 << 20
)

var maskNames = [...]string{"STATE", "CUR_STATE", "EN_SQD_ASYNC_NOTIFY", "ACCESS_FLAGS",
	"PKEY_INDEX", "PORT", "QKEY", "AV", "PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY",
	"RQ_PSN", "MAX_QP_RD_ATOMIC", "ALT_PATH", "MIN_RNR_TIMER", "SQ_PSN", "MAX_DEST_RD_ATOMIC",
	"PATH_MIG_STATE", "CAP", "DEST_QPN"}

// String lists the mask's bits by their IBV_QP_ names without the prefix,
// joined by "|" ("STATE|PKEY_INDEX|PORT"), or "0".
func (m QPAttrMask) String() string {
	s := ""
	for i, n := range maskNames {
		if m&(1<<i) != 0 {
			if s != "" {
				s += "|"
			}
			s += n
		}
	}
	if s == "" {
		return "0"
	}
	return s
}

// AHAttr is an address vector: where a QP's packets go and how they are
// marked (struct ibv_ah_attr with its GRH, which RoCE always uses).
type AHAttr struct {
	DGID         bth.GID // the destination GID: the peer's IP address
	FlowLabel    uint32  // the IPv6 flow label (20 bits)
	SGIDIndex    uint8   // the source GID's index in the device's GID table
	HopLimit     uint8   // 0 means 64
	TrafficClass uint8   // DSCP<<2 | ECN
	SL           uint8   // service level; RoCE carries none, kept for ibv_ah_attr's sake
	PortNum      uint8   // always 1: the device has one port
	// SrcPort is the UDP source port (goroce extension); 0 lets the link
	// choose one from the QP number, as HCAs do.
	SrcPort uint16
}

// Cap are a QP's queue capacities (struct ibv_qp_cap).
type QPCap struct {
	MaxSendWR     uint32 // outstanding send work requests (up to MaxWR)
	MaxRecvWR     uint32 // outstanding receive work requests; 0 with an SRQ
	MaxSendSGE    uint32 // SGEs per send work request (up to MaxSGE)
	MaxRecvSGE    uint32 // SGEs per receive work request (up to MaxSGE)
	MaxInlineData uint32 // bytes a send may carry with Inline (up to MaxInline)
}

// Limits of the device; a QP asking for more fails to create.
const (
	MaxWR         = 1 << 15
	MaxSGE        = 32
	MaxInline     = 512
	MaxRdAtomic   = 128
	MaxMsgSize    = 1 << 31
	DefaultWindow = 256 // unacknowledged packets a requester keeps in flight
)

// InitAttr are the attributes a QP is created with (struct ibv_qp_init_attr,
// and ibv_qp_init_attr_ex's xrcd).
type QPInitAttr struct {
	Type   QPType // RC, UC, UD, XRCIni or XRCTgt
	SendCQ *CQ    // where send work requests complete (none for XRCTgt)
	RecvCQ *CQ    // where receive work requests complete, may be SendCQ (none for XRCIni and XRCTgt)
	SRQ    *SRQ   // if set, receives come from this shared queue, not the QP's own
	Cap    QPCap  // queue sizes (XRCIni: no receive queue; XRCTgt: no queue at all)
	// SigAll makes every send work request signaled.
	SigAll bool
	// XRCD is an XRCTgt QP's XRC domain: the XRC SRQs its requests may
	// name. Required for XRCTgt, refused for every other type.
	XRCD *XRCD
}

// Attr are a QP's attributes (struct ibv_qp_attr).
type QPAttr struct {
	State            QPState // the state to move to
	CurState         QPState // the state the caller believes the QP is in
	PathMTU          MTU     // RC, UC: the path MTU, at most the port's active MTU
	QKey             uint32  // UD: the Q_Key a datagram must carry to be received
	RQPSN            uint32  // RC, UC: the first PSN expected from the peer (its SQ PSN)
	SQPSN            uint32  // the first PSN this QP sends
	DestQPN          uint32  // RC, UC: the peer's QP number
	AccessFlags      Access  // RC, UC: what the peer may do (RemoteWrite, RemoteRead, RemoteAtomic)
	Cap              QPCap   // Query only: the queue sizes
	AH               AHAttr  // RC, UC: the path to the peer (AttrAV)
	PKeyIndex        uint16  // always 0: the P_Key table has one entry
	EnSQDAsyncNotify bool    // on the move to SQD, report EventSQDrained once drained
	SQDraining       bool    // Query only
	MaxRdAtomic      uint8   // RC: READs and atomics this QP keeps outstanding
	MaxDestRdAtomic  uint8   // RC: READs and atomics from the peer it holds resources for
	MinRNRTimer      uint8   // RC: the RNR NAK timer code this responder asks for (IBA table 45)
	PortNum          uint8   // always 1
	Timeout          uint8   // RC: local ACK timeout, 4.096 µs × 2^Timeout (0: none)
	RetryCnt         uint8   // RC: retransmissions after a timeout or sequence error (0..7)
	RNRRetry         uint8   // RC: retries after an RNR NAK (7: without end)
}

// Errors of the verbs calls. Each wraps ErrInvalid, ErrNoMem or ErrState
// so callers can test the class with errors.Is, as they would test errno.
var (
	ErrInvalid = errors.New("qp: invalid argument") // EINVAL
	ErrNoMem   = errors.New("qp: queue full")       // ENOMEM
	ErrState   = errors.New("qp: not allowed in the QP's state")
	ErrBusy    = errors.New("qp: resource busy") // EBUSY
)

// Why a responder ended the connection: the rule a request broke, carried
// by the affiliated event (Event.Err) on the side that detected it. A
// memory-key rule is one of mr's errors (ErrInvalidKey, ErrBounds,
// ErrAccess, ErrPD) wrapped with the request's rkey and range.
var (
	// ErrQPAccess: the QP's access flags lack REMOTE_READ, REMOTE_WRITE or
	// REMOTE_ATOMIC for the request (an invalid request, as rxe's
	// check_op_valid answers).
	ErrQPAccess = errors.New("qp: the QP's access flags do not enable the operation")
	// ErrInvalidRequest: a request the responder cannot execute (opcode out
	// of sequence or unsupported, wrong length, misaligned atomic, ...).
	ErrInvalidRequest = errors.New("qp: invalid request")
	// ErrXRCETH: an XRC request's XRCETH names no XRC SRQ of the device
	// (the "invalid XRCETH" affiliated error); wraps ErrInvalidRequest.
	ErrXRCETH = fmt.Errorf("%w: the XRCETH names no XRC SRQ", ErrInvalidRequest)
	// ErrXRCDomain: the XRC SRQ an XRCETH names belongs to another XRC
	// domain than the target QP's (the "XRC domain violation" affiliated
	// error); wraps ErrInvalidRequest.
	ErrXRCDomain = fmt.Errorf("%w: the XRC SRQ belongs to another XRC domain", ErrInvalidRequest)
)

func badRequest(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidRequest}, a...)...)
}

// rkeyError names the request whose rkey check failed and why (the mr error).
func rkeyError(op string, rkey uint32, va uint64, n uint32, err error) error {
	return fmt.Errorf("qp: %s rkey 0x%x va 0x%x length %d: %w", op, rkey, va, n, err)
}

// AttrError reports a Modify call whose attributes do not fit the transition.
type AttrError struct {
	From, To QPState    // the transition asked for
	Type     QPType     // the QP's type, which decides the masks
	Missing  QPAttrMask // required but not given
	Extra    QPAttrMask // given but not allowed
	Reason   string     // a value that does not fit, if that was the fault
}

// Error says which transition, which bits were missing or not allowed,
// and why.
func (e *AttrError) Error() string {
	s := fmt.Sprintf("qp: modify %s %s->%s", e.Type, e.From, e.To)
	if e.Missing != 0 {
		s += " missing " + e.Missing.String()
	}
	if e.Extra != 0 {
		s += " not allowed " + e.Extra.String()
	}
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Unwrap returns ErrInvalid: a bad Modify is EINVAL.
func (e *AttrError) Unwrap() error { return ErrInvalid }

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, a...)...)
}
