package transport

import (
	"github.com/goroce/goroce/bth"
)

// WROpcode is a send work request's operation, with the values of enum ibv_wr_opcode.
type WROpcode uint8

// Send work request opcodes, with the access rights each needs. "Local"
// is the memory the work request's SGL names; "remote" is the peer's QP
// (its Attr.AccessFlags) and the peer's region the rkey names: both must
// grant the right, or the peer answers with a remote access error. A
// receive buffer always needs LocalWrite.
const (
	// WRRDMAWrite writes the local SGL into the peer's memory at
	// RemoteAddr/RKey (RC, UC). Local: read only, no flag. Remote:
	// RemoteWrite on the QP and the region.
	WRRDMAWrite WROpcode = 0
	// WRRDMAWriteWithImm is WRRDMAWrite that also consumes a receive at
	// the peer, which completes with Imm (RC, UC; the write may be 0
	// bytes). Rights as WRRDMAWrite.
	WRRDMAWriteWithImm WROpcode = 1
	// WRSend sends the local SGL into the peer's next receive (RC, UC,
	// UD). Local: no flag. Remote: none; the peer's receive buffer needs
	// LocalWrite on its own side.
	WRSend WROpcode = 2
	// WRSendWithImm is WRSend carrying Imm to the peer's completion.
	WRSendWithImm WROpcode = 3
	// WRRDMARead reads the peer's memory at RemoteAddr/RKey into the
	// local SGL (RC only; the QP needs MaxRdAtomic of 1 or more). Local:
	// LocalWrite. Remote: RemoteRead on the QP and the region.
	WRRDMARead WROpcode = 4
	// WRAtomicCmpAndSwp compares the 64-bit word at RemoteAddr with
	// CompareAdd and, if equal, replaces it with Swap; the original value
	// lands in the local SGL (RC only). RemoteAddr must be 8-byte aligned
	// and the SGL exactly 8 bytes. Local: LocalWrite. Remote: RemoteAtomic
	// on the QP and the region. Byte order: see SendWR.CompareAdd.
	WRAtomicCmpAndSwp WROpcode = 5
	// WRAtomicFetchAndAdd adds CompareAdd to the 64-bit word at
	// RemoteAddr (wrapping) and returns its original value in the local
	// SGL; alignment, size, rights and byte order as WRAtomicCmpAndSwp.
	WRAtomicFetchAndAdd WROpcode = 6
	// WRLocalInv invalidates InvRKey, a type 2 memory window bound in the
	// QP's PD (or a region), when the send queue reaches it: the window is
	// free for its next bind and its rkey stops working (RC, UC; no
	// packet). A key that cannot be invalidated completes with
	// LocQPOpErr and moves the QP to its error state, as rxe does.
	WRLocalInv WROpcode = 7
	// WRBindMW binds Bind.MW, a type 2 window of the QP's PD, to
	// Bind.Info's range of a region with the MWBind right, under the
	// rkey Bind.RKey (the window's index with a new variant:
	// IncRKey(mw.RKey())), when the send queue reaches it (RC, UC;
	// no packet). From then on only this QP's peer may use the rkey.
	// Rights: the region needs MWBind, and LocalWrite if the window
	// grants RemoteWrite or RemoteAtomic. A bind that breaks a rule
	// completes with MWBindErr and moves the QP to its error state.
	// Type 1 windows are bound with QP.BindMW.
	WRBindMW WROpcode = 8
	// WRSendWithInv is WRSend that also invalidates InvRKey at the peer,
	// a region in the peer QP's protection domain (RC only); the peer's
	// completion carries WithInv and the rkey.
	WRSendWithInv WROpcode = 9
	// WRRegMR registers Reg.Info's range of Reg.MR, a region of the QP's
	// PD allocated for fast registration (PD.AllocFastMR), under the
	// key Reg.Info.Key (the region's index with a new variant:
	// IncRKey(MR.RKey())), when the send queue reaches it (RC, UC; no
	// packet). The region must be free: allocated, or invalidated since
	// its last registration (WRLocalInv, or a peer's SEND with
	// Invalidate). A registration that breaks a rule completes with
	// LocQPOpErr and moves the QP to its error state, as rxe does.
	// The value is the kernel's IB_WR_REG_MR: libibverbs has none.
	WRRegMR WROpcode = 0x20
)

var wrNames = [...]string{"RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "SEND", "SEND_WITH_IMM",
	"RDMA_READ", "ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD", "LOCAL_INV", "BIND_MW", "SEND_WITH_INV"}

// String returns the opcode's name without the IBV_WR_ prefix.
func (o WROpcode) String() string {
	if o == WRRegMR {
		return "REG_MR"
	}
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
	WRID   uint64    // returned in the completion, to tell work requests apart
	SGL    []SGE     // the local memory: the message, or where a READ or atomic result lands
	Opcode WROpcode  // the operation; its doc names the access rights it needs
	Flags  SendFlags // Signaled, Fence, Solicited, Inline
	// Imm is the immediate data of SEND/WRITE with immediate, carried as
	// is (it arrives in the peer's completion as ImmData).
	Imm uint32
	// InvRKey is the rkey a SEND with Invalidate invalidates at the peer,
	// or a local invalidate here.
	InvRKey uint32
	// RemoteAddr is the peer's address an RDMA or atomic operation works
	// on: inside the peer's region (its Addr plus an offset), 8-byte
	// aligned for an atomic (IBA 9.4.5; PostSend refuses a misaligned one).
	RemoteAddr uint64
	// RKey is the peer's region's remote key (its MR.RKey).
	RKey uint32
	// CompareAdd is compare-and-swap's compare value, or fetch-and-add's
	// value to add. Atomic values are plain integers: they travel
	// big-endian on the wire, as the specification gives them, and the
	// target word is read and written in host (little-endian) byte order
	// in the peer's memory, as rxe does, as is the original value placed
	// in the local 8-byte buffer.
	CompareAdd uint64
	// Swap is compare-and-swap's new value.
	Swap uint64
	// AH is a UD send's destination (Device.CreateAH).
	AH *AH
	// RemoteQPN is a UD send's destination QP.
	RemoteQPN uint32
	// RemoteQKey is the Q_Key a UD send carries; it must equal the
	// destination QP's. With the high bit set it stands for the sending
	// QP's own Q_Key (IBA 10.2.5).
	RemoteQKey uint32
	// Bind is what a WRBindMW binds (the bind_mw of struct ibv_send_wr).
	Bind MWBindWR
	// Reg is what a WRRegMR registers (the kernel's struct ib_reg_wr).
	Reg RegMR
	// RemoteSRQN is the XRC SRQ at the target an XRC initiator's request
	// is received into (qp_type.xrc.remote_srqn; SRQ.SRQN there): required
	// on an XRCIni QP, whose packets carry it in their XRCETH. goroce
	// numbers no SRQ 0, so 0 means none was given.
	RemoteSRQN uint32
}

// RegMR is a fast registration: the region and what it maps.
type RegMR struct {
	MR   *MR     // allocated by PD.AllocFastMR, in the QP's PD
	Info RegInfo // the range of its allocation, the address, rights and new key
}

// MWBind is a memory window bind: the window, the rkey it gets, and the
// range and rights it grants.
type MWBindWR struct {
	MW   *MW      // the type 2 window, of the QP's PD
	RKey uint32   // the window's new rkey: its index, with a new 8-bit variant
	Info BindInfo // the range and rights it grants
}

// RecvWR is a receive work request (struct ibv_recv_wr).
type RecvWR struct {
	WRID uint64 // returned in the completion
	SGL  []SGE  // where the message lands (UD: 40 bytes of GRH first); needs LocalWrite
}

// PostError reports which work request of a list failed to post and why,
// as the bad_wr of ibv_post_send.
type PostError struct {
	Index int   // the failed work request's index in the list; none after it was posted
	Err   error // why it failed
}

// Error returns Err's message.
func (e *PostError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
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
	status   WCStatus
	type1    bool // a WRBindMW posted by QP.BindMW, for a type 1 window

	// Assigned when the requester first sends it.
	firstPSN bth.PSN
	lastPSN  bth.PSN
	npkts    uint32

	// UD destination snapshot, taken at post time.
	outer bth.Outer
	qkey  uint32
	dqpn  uint32
}

// wrOp is a row of the work-request opcode table: what a posted operation
// is on the wire and in its completion. The requester finds each packet's
// opcode in bth's table from the row (kind, position, imm, inv), so that
// no switch of its own says which operation sends which opcode.
type wrOp struct {
	kind  bth.Kind // the operation its packets carry; KindInvalid: none (local)
	imm   bool     // its last packet carries ImmDt
	inv   bool     // its last packet carries an IETH
	wc    WCOpcode // its completion's opcode
	local bool     // executed by the QP itself: no packet, completes in send-queue order
}

// wrOps is the work-request opcode table, by ibv_wr_opcode.
var wrOps = [WRRegMR + 1]wrOp{
	WRRDMAWrite:         {kind: bth.KindWrite, wc: OpRDMAWrite},
	WRRDMAWriteWithImm:  {kind: bth.KindWrite, imm: true, wc: OpRDMAWrite},
	WRSend:              {kind: bth.KindSend, wc: OpSend},
	WRSendWithImm:       {kind: bth.KindSend, imm: true, wc: OpSend},
	WRSendWithInv:       {kind: bth.KindSend, inv: true, wc: OpSend},
	WRRDMARead:          {kind: bth.KindReadRequest, wc: OpRDMARead},
	WRAtomicCmpAndSwp:   {kind: bth.KindCompareSwap, wc: OpCompSwap},
	WRAtomicFetchAndAdd: {kind: bth.KindFetchAdd, wc: OpFetchAdd},
	WRLocalInv:          {wc: OpLocalInv, local: true},
	WRBindMW:            {wc: OpBindMW, local: true},
	WRRegMR:             {wc: OpRegMR, local: true},
}

// wrOpOf returns o's row of the opcode table, or nil for an opcode
// goroce does not know.
func wrOpOf(o WROpcode) *wrOp {
	if int(o) >= len(wrOps) || (wrOps[o].kind == bth.KindInvalid && !wrOps[o].local) {
		return nil
	}
	return &wrOps[o]
}

// segmented reports whether the operation's message is cut into packets
// of the path MTU: SENDs and WRITEs. A READ or an atomic is one request.
func (d *wrOp) segmented() bool { return d.kind == bth.KindSend || d.kind == bth.KindWrite }

// position returns where a packet that is, or is not, the first and the
// last of the operation's message sits.
func (d *wrOp) position(first, last bool) bth.Position {
	if d.segmented() {
		return bth.MessagePosition(first, last)
	}
	return bth.PosNone
}

// opcode returns the opcode of the operation's packet at first/last in
// transport t, from the opcode table; ok is false where t has no such
// operation.
func (d *wrOp) opcode(t bth.Transport, first, last bool) (bth.OpCode, bool) {
	return bth.Find(t, d.kind, d.position(first, last), last && d.imm, last && d.inv)
}

// sentOn reports whether transport t carries the operation (a local one
// needs no packet and goes on any): whether table 38 defines its single
// packet there.
func (d *wrOp) sentOn(t bth.Transport) bool {
	if d.local {
		return true
	}
	_, ok := d.opcode(t, true, true)
	return ok
}

// op returns the WQE's row of the opcode table (post accepts only
// opcodes that have one).
func (w *sendWQE) op() *wrOp { return &wrOps[w.wr.Opcode] }

// readsBack reports whether the operation's response carries data into
// the local SGL: a READ or an atomic.
func (d *wrOp) readsBack() bool {
	return d.kind == bth.KindReadRequest || d.kind == bth.KindCompareSwap || d.kind == bth.KindFetchAdd
}

// isReadOrAtomic reports whether the WQE waits for a response carrying data.
func (w *sendWQE) isReadOrAtomic() bool { return w.op().readsBack() }

// isLocal reports whether the WQE is a local operation: it sends no
// packet and completes once executed, in send-queue order.
func (w *sendWQE) isLocal() bool { return w.op().local }

func (w *sendWQE) isAtomic() bool {
	k := w.op().kind
	return k == bth.KindCompareSwap || k == bth.KindFetchAdd
}

// wcOpcode returns the completion opcode of the WQE.
func (w *sendWQE) wcOpcode() WCOpcode { return w.op().wc }

// recvWQE is a receive queue entry.
type recvWQE struct {
	wrID   uint64
	sgl    []SGE
	length uint32
}

// sgeTotal sums the lengths of an SGL, reporting overflow past 2^31.
func sgeTotal(sgl []SGE) (uint32, bool) {
	var n uint64
	for _, s := range sgl {
		n += uint64(s.Length)
	}
	return uint32(n), n <= MaxMsgSize
}
