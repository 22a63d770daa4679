package qp

import (
	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cq"
	"github.com/goroce/goroce/mr"
)

// WROpcode is a send work request's operation, with the values of enum ibv_wr_opcode.
type WROpcode uint8

// Send work request opcodes.
const (
	WRRDMAWrite         WROpcode = 0
	WRRDMAWriteWithImm  WROpcode = 1
	WRSend              WROpcode = 2
	WRSendWithImm       WROpcode = 3
	WRRDMARead          WROpcode = 4
	WRAtomicCmpAndSwp   WROpcode = 5
	WRAtomicFetchAndAdd WROpcode = 6
	WRLocalInv          WROpcode = 7
	WRBindMW            WROpcode = 8
	WRSendWithInv       WROpcode = 9
)

var wrNames = [...]string{"RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "SEND", "SEND_WITH_IMM",
	"RDMA_READ", "ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD", "LOCAL_INV", "BIND_MW", "SEND_WITH_INV"}

func (o WROpcode) String() string {
	if int(o) < len(wrNames) {
		return wrNames[o]
	}
	return "WROpcode(?)"
}

// SendFlags qualify a send work request, with the bit values of enum ibv_send_flags.
type SendFlags uint8

// Send flags.
const (
	Fence     SendFlags = 1 << 0 // wait for earlier RDMA READs and atomics to complete
	Signaled  SendFlags = 1 << 1 // generate a completion even without SigAll
	Solicited SendFlags = 1 << 2 // set the solicited event bit on the message
	Inline    SendFlags = 1 << 3 // copy the data at post time
)

// SendWR is a send work request (struct ibv_send_wr).
type SendWR struct {
	WRID   uint64
	SGL    []mr.SGE
	Opcode WROpcode
	Flags  SendFlags
	// Imm is the immediate data of SEND/WRITE with immediate, carried as
	// is (it arrives in the peer's completion as ImmData).
	Imm uint32
	// InvRKey is the rkey a SEND with Invalidate invalidates at the peer.
	InvRKey uint32
	// RDMA and atomic operations: the remote address and rkey.
	RemoteAddr uint64
	RKey       uint32
	// Atomics: the compare value and swap value of compare-and-swap; the
	// value to add of fetch-and-add (in CompareAdd).
	CompareAdd uint64
	Swap       uint64
	// UD: the destination.
	AH         *AH
	RemoteQPN  uint32
	RemoteQKey uint32
}

// RecvWR is a receive work request (struct ibv_recv_wr).
type RecvWR struct {
	WRID uint64
	SGL  []mr.SGE
}

// PostError reports which work request of a list failed to post and why,
// as the bad_wr of ibv_post_send.
type PostError struct {
	Index int
	Err   error
}

func (e *PostError) Error() string { return e.Err.Error() }
func (e *PostError) Unwrap() error { return e.Err }

// wqeState is where a send WQE is in its life.
type wqeState uint8

const (
	wqePosted  wqeState = iota // waiting for the requester
	wqeStarted                 // packets sent, completion pending
	wqeDone                    // finished; waiting to complete in order
)

// sendWQE is a send queue entry: the work request copied at post time plus
// the protocol state the requester and completer keep for it.
type sendWQE struct {
	wr       SendWR // SGL points into the QP's own SGE store
	inline   []byte // copied data when Inline (points into the QP's inline store)
	length   uint32 // message length in bytes
	state    wqeState
	signaled bool
	status   cq.Status

	// Assigned when the requester first sends it.
	firstPSN bth.PSN
	lastPSN  bth.PSN
	npkts    uint32

	// UD destination snapshot, taken at post time.
	outer bth.Outer
	qkey  uint32
	dqpn  uint32
}

// isReadOrAtomic reports whether the WQE waits for a response carrying data.
func (w *sendWQE) isReadOrAtomic() bool {
	switch w.wr.Opcode {
	case WRRDMARead, WRAtomicCmpAndSwp, WRAtomicFetchAndAdd:
		return true
	}
	return false
}

func (w *sendWQE) isAtomic() bool {
	return w.wr.Opcode == WRAtomicCmpAndSwp || w.wr.Opcode == WRAtomicFetchAndAdd
}

// wcOpcode returns the completion opcode of the WQE.
func (w *sendWQE) wcOpcode() cq.Opcode {
	switch w.wr.Opcode {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return cq.OpRDMAWrite
	case WRRDMARead:
		return cq.OpRDMARead
	case WRAtomicCmpAndSwp:
		return cq.OpCompSwap
	case WRAtomicFetchAndAdd:
		return cq.OpFetchAdd
	case WRLocalInv:
		return cq.OpLocalInv
	case WRBindMW:
		return cq.OpBindMW
	}
	return cq.OpSend
}

// recvWQE is a receive queue entry.
type recvWQE struct {
	wrID   uint64
	sgl    []mr.SGE
	length uint32
}

// sgeTotal sums the lengths of an SGL, reporting overflow past 2^31.
func sgeTotal(sgl []mr.SGE) (uint32, bool) {
	var n uint64
	for _, s := range sgl {
		n += uint64(s.Length)
	}
	return uint32(n), n <= MaxMsgSize
}
