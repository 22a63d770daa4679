package transport

import (
	"fmt"
	"sync"

	"github.com/goroce/goroce/bth"
)

// XRC, the eXtended Reliable Connected transport (IBA vol 1, annex A14;
// libibverbs' XRC verbs): RC's protocol between an initiator QP (XRCIni),
// which only sends, and a target QP (XRCTgt), which only receives, each
// request carrying an XRCETH that names the XRC SRQ at the target it is
// received into. Every process of a node can share one target QP and one
// XRC SRQ per peer process, where RC needs a QP per pair of processes.

// XRCD is an XRC domain (struct ibv_xrcd): the XRC SRQs and target QPs
// created in it, which only each other's requests reach. Its methods are
// safe for concurrent use.
type XRCD struct {
	closed func() bool            // the device closed
	lookup func(srqn uint32) *SRQ // the device's XRC SRQs by number

	mu    sync.Mutex
	users int // XRC SRQs and target QPs in the domain
	done  bool
}

// newXRCD creates an XRC domain; the device passes whether it has closed
// and how to find an XRC SRQ by number.
func newXRCD(closed func() bool, lookup func(srqn uint32) *SRQ) *XRCD {
	return &XRCD{closed: closed, lookup: lookup}
}

// Close closes the domain (ibv_close_xrcd). It fails while XRC SRQs or
// target QPs use it (ErrBusy, libibverbs' EBUSY) and a second time
// (ErrInvalid).
func (x *XRCD) Close() error {
	if x.closed() {
		return errQPClosed("close_xrcd")
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.done {
		return invalid("close_xrcd: the XRC domain was closed already")
	}
	if x.users != 0 {
		return fmt.Errorf("%w: XRC domain still used by %d XRC SRQs and target QPs", ErrBusy, x.users)
	}
	x.done = true
	return nil
}

// attach counts an XRC SRQ or target QP created in the domain; a closed
// domain takes none.
func (x *XRCD) attach() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.done {
		return invalid("XRC domain closed")
	}
	x.users++
	return nil
}

func (x *XRCD) detach() {
	x.mu.Lock()
	x.users--
	x.mu.Unlock()
}

// SRQType is the kind of a shared receive queue (enum ibv_srq_type).
type SRQType uint8

// SRQ types.
const (
	SRQBasic SRQType = 0 // IBV_SRQT_BASIC: QPs created with it receive from it
	SRQXRC   SRQType = 1 // IBV_SRQT_XRC: XRC target QPs of its domain receive into it, named by SRQN
)

// SRQInitAttr are the attributes of an SRQ created with
// Device.CreateSRQEx (struct ibv_srq_init_attr_ex). An XRC SRQ needs its
// domain and its CQ, as comp_mask IBV_SRQ_INIT_ATTR_XRCD|CQ asks.
type SRQInitAttr struct {
	Attr SRQAttr // queue sizes and limit
	Type SRQType // SRQBasic or SRQXRC
	XRCD *XRCD   // SRQXRC: the domain whose target QPs receive into it
	CQ   *CQ     // SRQXRC: where its receives complete
}

// newXRCSRQ creates an XRC SRQ numbered srqn in pd; unregister, called
// once when it is destroyed, takes it out of the device's tables.
func newXRCSRQ(pd *PD, ia SRQInitAttr, srqn uint32, limitReached func(*SRQ), unregister func()) (*SRQ, error) {
	if ia.Type != SRQXRC {
		return nil, invalid("SRQ type %d is not SRQXRC", ia.Type)
	}
	if ia.XRCD == nil || ia.CQ == nil {
		return nil, invalid("an XRC SRQ needs an XRC domain and a CQ (comp_mask XRCD|CQ)")
	}
	if srqn == 0 || srqn > bth.PSNMask {
		return nil, invalid("XRC SRQ number 0x%x outside 1..2^24-1", srqn)
	}
	s, err := newSRQ(pd, ia.Attr, limitReached)
	if err != nil {
		return nil, err
	}
	if err := ia.XRCD.attach(); err != nil {
		pd.release()
		return nil, err
	}
	s.srqn, s.xrcd, s.cq, s.unregister = srqn, ia.XRCD, ia.CQ, unregister
	return s, nil
}

// SRQN returns an XRC SRQ's number, which initiators name in
// SendWR.RemoteSRQN (ibv_get_srq_num); 0 for a basic SRQ.
func (s *SRQ) SRQN() uint32 { return s.srqn }

// XRCD returns an XRC SRQ's domain, or nil.
func (s *SRQ) XRCD() *XRCD { return s.xrcd }

// CQ returns the CQ an XRC SRQ's receives complete on, or nil.
func (s *SRQ) CQ() *CQ { return s.cq }

// checkXRC checks the XRC rules of ibv_create_qp_ex: an initiator sends
// only, a target belongs to a domain and has no queue, and only a target
// names a domain.
func (ia *QPInitAttr) checkXRC(pd *PD) error {
	switch ia.Type {
	case XRCIni:
		if pd == nil || ia.SendCQ == nil {
			return invalid("an XRC initiator QP needs a protection domain and a send CQ")
		}
		if ia.RecvCQ != nil || ia.SRQ != nil || ia.Cap.MaxRecvWR != 0 || ia.Cap.MaxRecvSGE != 0 {
			return invalid("an XRC initiator QP has no receive queue: no receive CQ, SRQ, max_recv_wr or max_recv_sge")
		}
	case XRCTgt:
		if ia.XRCD == nil {
			return invalid("an XRC target QP needs an XRC domain")
		}
		if ia.SendCQ != nil || ia.RecvCQ != nil || ia.SRQ != nil || ia.Cap != (QPCap{}) {
			return invalid("an XRC target QP has no queue: no CQ, SRQ or capacity (its requests name XRC SRQs)")
		}
	default:
		if ia.XRCD != nil {
			return invalid("only an XRC target QP belongs to an XRC domain")
		}
	}
	return nil
}

// xrcTarget resolves the XRC SRQ a request to a target QP names and makes
// it the QP's receive queue, protection domain and receive CQ for the
// request. An XRCETH naming no XRC SRQ, or one of another domain, is an
// invalid request (NAK, QP to ERR). IBA annex A14 was not at hand: the
// two errors are the affiliated ones Oracle's PSIF driver names ("invalid
// XRCETH", "XRC domain violation", raised as a QP fatal event), and the
// NAK is invalid request, as for any request a responder cannot execute
// (9.7.5.2). A message keeps the SRQ its first packet named.
func (q *QP) xrcTarget(p bth.Packet) bool {
	c := q.env.Counters
	n := p.XRCETH().XRCSRQ()
	s := q.xrcd.lookup(n)
	var why error
	switch {
	case s == nil:
		c.XRCBadSRQN.Add(1)
		why = fmt.Errorf("%w: 0x%06x", ErrXRCETH, n)
	case s.xrcd != q.xrcd:
		c.XRCDomainViolation.Add(1)
		why = fmt.Errorf("%w: 0x%06x", ErrXRCDomain, n)
	case q.resp.inMsg != msgNone && s != q.srq:
		why = badRequest("XRCETH names SRQ 0x%06x in the middle of a message into 0x%06x", n, q.srq.srqn)
	default:
		q.srq, q.pd, q.recvCQ = s, s.pd, s.cq
		// Any target QP of the domain may complete on the SRQ's CQ.
		s.cq.onQueue(q.rxQueue())
		return true
	}
	q.classC(bth.NAKInvalidRequest, RemInvReqErr, EventQPFatal, why)
	return false
}
