package perftest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"unsafe"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

// Constants of perftest's buffer layout and QPs (perftest_resources.h).
const (
	ptCycleBuffer = 4096       // check_sys_data's page size: small messages cycle through it
	ptCacheLine   = 64         // and its cache line: small messages start on one
	ptUDAddition  = 40         // the GRH in front of every UD receive
	ptQKey        = 0x11111111 // DEF_QKEY
	ptMinRNRTimer = 12         // MIN_RNR_TIMER: 0.64 ms
	ptRetry       = 7          // retry_cnt and rnr_retry (7: RNR retries forever)
	ptAtomicAdd   = 1          // ATOMIC_ADD_VALUE
	ptAtomicSwap  = 0          // ATOMIC_SWAP_VALUE
)

// ptAccess is the buffer's access flags, and an RC QP's.
const ptAccess = transport.LocalWrite | transport.RemoteWrite | transport.RemoteRead | transport.RemoteAtomic

// ptBuffSize is BUFF_SIZE: a QP's share of the buffer, at least the cycle
// buffer.
func ptBuffSize(size uint64) uint64 { return max(size, ptCycleBuffer) }

// ptInc is INC: the stride between the messages of a cycle, a whole number
// of cache lines.
func ptInc(size uint64) uint64 {
	return max((size+ptCacheLine-1)/ptCacheLine*ptCacheLine, ptCacheLine)
}

// ptCycleOffset is where the n-th message of a run starts inside its QP's
// area: messages up to half the cycle buffer rotate through it in INC
// steps (increase_loc_addr / increase_rem_addr), larger ones all start at
// the area's beginning. The real tools address our memory the same way,
// which is why the areas are at least a cycle buffer long.
func ptCycleOffset(size, n uint64) uint64 {
	if size > ptCycleBuffer/2 {
		return 0
	}
	inc := ptInc(size)
	return n % (ptCycleBuffer / inc) * inc
}

// ptDeviceAttr is ibv_query_device for goroce, sent in the 6.28+
// negotiation. The limits are the engine's; counts goroce does not bound
// (CQs, PDs, address handles: memory is the only limit) are the largest
// int32, and the GUIDs are made from the link's MAC as rxe makes its own.
func ptDeviceAttr(dev *transport.Device) DeviceAttr {
	var guid [8]byte
	if mac := dev.Link().Info().MAC; len(mac) == 6 {
		guid = [8]byte{mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]}
	}
	const unbounded = math.MaxInt32
	a := DeviceAttr{
		NodeGUID: guid, SysImageGUID: guid,
		MaxMRSize:   math.MaxUint64,
		PageSizeCap: 0xfffff000,
		MaxQP:       int32(bth.PSNMask) - 0x11, // QPNs 0x11 .. 0xfffffe
		MaxQPWR:     transport.MaxWR,
		MaxSGE:      transport.MaxSGE, MaxSGERd: transport.MaxSGE,
		MaxCQ: unbounded, MaxCQE: unbounded,
		MaxMR:       transport.MaxRegions - 1,
		MaxPD:       unbounded,
		MaxQPRdAtom: transport.MaxRdAtomic, MaxResRdAtom: unbounded, MaxQPInitRdAtom: transport.MaxRdAtomic,
		AtomicCap: 1, // IBV_ATOMIC_HCA: atomic with respect to every QP of the device
		MaxAH:     unbounded,
		MaxSRQ:    unbounded, MaxSRQWR: transport.MaxWR, MaxSRQSGE: transport.MaxSGE,
		MaxPkeys:        1,
		LocalCAAckDelay: 15,
		PhysPortCnt:     1,
	}
	copy(a.FWVer[:], "goroce")
	return a
}

// ptCtx is struct pingpong_context: the verbs resources of a run.
type ptCtx struct {
	cfg    *Config
	dev    *transport.Device
	gidIdx uint8
	pd     *transport.PD
	buf    []byte // the registered buffer: q send areas, then q remote areas
	mr     *transport.MR
	area   uint64 // BUFF_SIZE of the largest message of the run
	sendCQ *transport.CQ
	recvCQ *transport.CQ
	srq    *transport.SRQ
	qps    []*transport.QP
	ahs    []*transport.AH
	// udPeers are the QPN and Q_Key each UD QP sends to when the RDMA CM
	// gave them (-R: SIDR, or the client's parameters message), as
	// perftest's cma_master nodes hold them; without -R the peer's record
	// names the QPN and the Q_Key is DEF_QKEY.
	udPeers []udPeer
	my      []Record
	rem     []Record
	// peerPSN is the PSN of the peer's next write to QP 0 (write_lat
	// follows the peer's messages by their PSNs).
	peerPSN uint32
}

// receives reports whether this side posts receive WQEs: the receiver of
// SEND and WRITE with immediate, and with -b or a latency test both sides.
func (c *ptCtx) receives() bool {
	v := c.cfg.Verb()
	if v != VerbSend && v != VerbWriteImm {
		return false
	}
	return c.cfg.IsServer() || c.cfg.Duplex || !c.cfg.Test.BW()
}

// sends reports whether this side posts send WQEs (ctx_connect's RTS rule).
func (c *ptCtx) sends() bool {
	return !c.cfg.Test.BW() || !c.cfg.IsServer() || c.cfg.Duplex
}

// newPtCtx is ctx_init: buffer, PD, MR, CQs, SRQ, QPs moved to INIT, and
// this side's records (set_up_connection).
func newPtCtx(cfg *Config, dev *transport.Device, gidIdx uint8) (*ptCtx, error) {
	c := &ptCtx{cfg: cfg, dev: dev, gidIdx: gidIdx}
	q := cfg.NumQPs
	size := cfg.Size
	if cfg.Conn == ConnUD {
		size += ptCacheLine // the GRH and the offset that aligns the payload
	}
	c.area = ptBuffSize(size)
	// Page aligned as memalign gives the tools, so remote atomics (8-byte
	// aligned) land on the offsets the peer computes; one extra cycle
	// buffer of slack at the end for the last UD receive of a cycle.
	total := 2*uint64(q)*c.area + ptCycleBuffer
	raw := make([]byte, total+ptCycleBuffer)
	off := ptCycleBuffer - int(uintptr(unsafe.Pointer(&raw[0]))%ptCycleBuffer)
	c.buf = raw[off : off+int(total)]
	c.pd = dev.AllocPD()
	var err error
	if c.mr, err = c.pd.Register(c.buf, ptAccess); err != nil {
		return nil, fmt.Errorf("Couldn't allocate MR: %w", err)
	}
	tx := max(cfg.TxDepth, cfg.PostList) * q
	switch {
	case c.receives() && cfg.Duplex:
		// run_iter_bi waits on sends and receives at once: one queue.
		c.sendCQ = dev.CreateCQ(tx + cfg.RxDepth*q)
		c.recvCQ = c.sendCQ
	case c.receives():
		c.sendCQ = dev.CreateCQ(tx)
		c.recvCQ = dev.CreateCQ(cfg.RxDepth * q)
	default:
		c.sendCQ = dev.CreateCQ(tx)
		c.recvCQ = c.sendCQ
	}
	if c.receives() && cfg.UseSRQ {
		if c.srq, err = dev.CreateSRQ(c.pd, transport.SRQAttr{MaxWR: uint32(cfg.RxDepth), MaxSGE: 1}); err != nil {
			return nil, fmt.Errorf("Couldn't create SRQ: %w", err)
		}
	}
	if cfg.RDMACM {
		return c, nil // the QPs come from the connection manager (addQP)
	}
	for range q {
		x, err := dev.CreateQP(c.pd, c.initAttr())
		if err != nil {
			return nil, fmt.Errorf("Couldn't create QP: %w", err)
		}
		if err := c.toInit(x); err != nil {
			return nil, err
		}
		c.addQP(x)
	}
	return c, nil
}

// qpType is the QP type of -c.
func (c *ptCtx) qpType() transport.QPType {
	return map[int32]transport.QPType{ConnRC: transport.RC, ConnUC: transport.UC, ConnUD: transport.UD}[c.cfg.Conn]
}

// initAttr is create_qp_main's ibv_qp_init_attr.
func (c *ptCtx) initAttr() transport.QPInitAttr {
	cfg := c.cfg
	rxWR := uint32(1)
	if c.receives() {
		rxWR = uint32(cfg.RxDepth)
	}
	ia := transport.QPInitAttr{Type: c.qpType(), SendCQ: c.sendCQ, RecvCQ: c.recvCQ, SRQ: c.srq,
		Cap: transport.QPCap{MaxSendWR: uint32(max(cfg.TxDepth, cfg.PostList)), MaxRecvWR: rxWR, MaxSendSGE: 1, MaxRecvSGE: 1}}
	if c.srq != nil {
		ia.Cap.MaxRecvWR = 0
	}
	return ia
}

// toInit is ctx_modify_qp_to_init.
func (c *ptCtx) toInit(x *transport.QP) error {
	cfg := c.cfg
	init := transport.QPAttr{State: transport.Init, PKeyIndex: uint16(cfg.PKeyIndex), PortNum: 1}
	mask := transport.AttrState | transport.AttrPKeyIndex | transport.AttrPort
	switch x.Type() {
	case transport.UD:
		init.QKey = ptQKey
		mask |= transport.AttrQKey
	case transport.UC:
		init.AccessFlags = transport.LocalWrite | transport.RemoteWrite
		mask |= transport.AttrAccessFlags
	default:
		init.AccessFlags = ptAccess
		mask |= transport.AttrAccessFlags
	}
	if err := x.Modify(&init, mask); err != nil {
		return fmt.Errorf("Failed to modify QP to INIT: %w", err)
	}
	return nil
}

// addQP takes QP x as the next QP of the run, with its record
// (set_up_connection: its QPN, a random PSN, the MR and the QP's area).
func (c *ptCtx) addQP(x *transport.QP) {
	i := len(c.qps)
	c.qps = append(c.qps, x)
	gid, _ := c.dev.GID(c.gidIdx)
	c.my = append(c.my, Record{
		OutReads: uint16(c.cfg.OutReads), QPN: x.QPN(), PSN: rand.Uint32() & bth.PSNMask,
		RKey: c.mr.RKey(), VAddr: c.remoteArea(i), GID: [16]byte(gid), GIDIndex: int32(c.gidIdx),
	})
}

// sendArea and remoteArea are the addresses of QP i's two areas: the
// first holds what it sends (or reads into), the second is what the peer
// writes, reads and receives into, the address its record advertises.
func (c *ptCtx) sendArea(i int) uint64 { return c.mr.Addr() + uint64(i)*c.area }
func (c *ptCtx) remoteArea(i int) uint64 {
	return c.mr.Addr() + uint64(c.cfg.NumQPs+i)*c.area
}

// bytesAt returns the buffer bytes at a registered address.
func (c *ptCtx) bytesAt(addr, n uint64) []byte {
	off := addr - c.mr.Addr()
	return c.buf[off : off+n]
}

// connect is ctx_connect for QP i once the peer's record is known: RTR with
// the peer's QPN, PSN and GID, then RTS on the sending sides, and the
// address handle of a UD sender.
func (c *ptCtx) connect(i int, rem Record, mtu transport.MTU) error {
	cfg := c.cfg
	x := c.qps[i]
	// perftest asks for hop limit 0xff; rxe's IPv4 packets carry the
	// route's TTL (64) whatever the address vector says, and goroce's
	// default (0) sends the same.
	av := transport.AHAttr{DGID: bth.GID(rem.GID), SGIDIndex: c.gidIdx, PortNum: 1, SL: uint8(cfg.SL),
		TrafficClass: uint8(cfg.TClass), FlowLabel: uint32(cfg.FlowLabel)}
	rtr := transport.QPAttr{State: transport.RTR}
	mask := transport.AttrState
	if x.Type() != transport.UD {
		rtr.AH, rtr.PathMTU, rtr.DestQPN, rtr.RQPSN = av, mtu, rem.QPN, rem.PSN
		mask |= transport.AttrAV | transport.AttrPathMTU | transport.AttrDestQPN | transport.AttrRQPSN
		if x.Type() == transport.RC {
			rtr.MaxDestRdAtomic = uint8(cfg.OutReads)
			rtr.MinRNRTimer = ptMinRNRTimer
			mask |= transport.AttrMaxDestRdAtomic | transport.AttrMinRNRTimer
		}
	}
	if err := x.Modify(&rtr, mask); err != nil {
		return fmt.Errorf("Failed to modify QP %d to RTR: %w", x.QPN(), err)
	}
	if i == 0 {
		c.peerPSN = rem.PSN & bth.PSNMask
	}
	if !c.sends() {
		return nil // the bandwidth servers stay in RTR, as perftest leaves them
	}
	rts := transport.QPAttr{State: transport.RTS, SQPSN: c.my[i].PSN}
	mask = transport.AttrState | transport.AttrSQPSN
	if x.Type() == transport.RC {
		rts.Timeout, rts.RetryCnt, rts.RNRRetry = uint8(cfg.QPTimeout), ptRetry, ptRetry
		// The peer's responder resources bound our reads and atomics in
		// flight; a record claiming none or more than the device takes is
		// clamped rather than trusted.
		rts.MaxRdAtomic = uint8(min(max(int(rem.OutReads), 1), transport.MaxRdAtomic))
		mask |= transport.AttrTimeout | transport.AttrRetryCnt | transport.AttrRNRRetry | transport.AttrMaxQPRdAtomic
	}
	if err := x.Modify(&rts, mask); err != nil {
		return fmt.Errorf("Failed to modify QP to RTS: %w", err)
	}
	if x.Type() == transport.UD {
		ah, err := c.dev.CreateAH(c.pd, av)
		if err != nil {
			return fmt.Errorf("Failed to create AH: %w", err)
		}
		c.ahs = append(c.ahs, ah)
	}
	return nil
}

// udPeer is where a UD QP's messages go, as the RDMA CM said.
type udPeer struct{ qpn, qkey uint32 }

// addUDPeer gives the next UD QP its destination: the address handle of
// av (the CM's path, or the answer to a received GRH, as perftest takes
// them unchanged), the peer's QPN and Q_Key.
func (c *ptCtx) addUDPeer(av transport.AHAttr, qpn, qkey uint32) error {
	ah, err := c.dev.CreateAH(c.pd, av)
	if err != nil {
		return fmt.Errorf("Failed to create AH for RDMA CM connection: %w", err)
	}
	c.ahs = append(c.ahs, ah)
	c.udPeers = append(c.udPeers, udPeer{qpn: qpn, qkey: qkey})
	return nil
}

// dropUD destroys the UD QPs and address handles of a -R attempt that
// failed, for the next (rdma_cm_destroy_cma); the caller forgets qps.
func (c *ptCtx) dropUD() {
	for _, x := range c.qps {
		_ = c.dev.DestroyQP(x)
	}
	for _, ah := range c.ahs {
		_ = ah.Destroy()
	}
	c.ahs, c.udPeers = nil, nil
}

// udDest is where UD QP i sends: the CM's QPN and Q_Key, or else the
// peer's record's QPN and DEF_QKEY.
func (c *ptCtx) udDest(i int) (qpn, qkey uint32) {
	if i < len(c.udPeers) {
		return c.udPeers[i].qpn, c.udPeers[i].qkey
	}
	return c.rem[i].QPN, ptQKey
}

// waitOne waits for one completion on q, as perftest's busy polls of
// the RDMA CM UD exchange do, until ctx ends.
func (c *ptCtx) waitOne(ctx context.Context, q *transport.CQ) (transport.WC, error) {
	var wc [1]transport.WC
	_, err := q.PollWait(ctx, wc[:])
	return wc[0], err
}

// close destroys the QPs and the device's other objects with them.
func (c *ptCtx) close() {
	for _, x := range c.qps {
		_ = c.dev.DestroyQP(x)
	}
	for _, ah := range c.ahs {
		_ = ah.Destroy()
	}
	if c.mr != nil {
		_ = c.mr.Dereg()
	}
}
