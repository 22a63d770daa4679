package transport

import (
	"fmt"

	"github.com/goroce/goroce/bth"
)

// Modify and the attributes it sets (IBA 10.3; ibv_modify_qp). The table of
// legal transitions is in statemachine.go.

// Modify changes the QP's state and attributes, as ibv_modify_qp: the
// transition and the attribute mask must be one IBA 10.3.1 allows.
func (q *QP) Modify(a *QPAttr, mask QPAttrMask) error {
	q.mu.Lock()
	defer q.unlock()
	if q.deviceClosed() {
		return errQPClosed("modify_qp")
	}
	if q.destroyed {
		return errDestroyed
	}
	cur, next := q.state, q.state
	if mask&AttrState != 0 {
		next = a.State
	}
	if mask&AttrCurState != 0 && a.CurState != cur {
		return &AttrError{From: cur, To: next, Type: q.typ, Reason: fmt.Sprintf("cur_state %v is not the QP's state", a.CurState)}
	}
	if err := checkTransition(q.typ, cur, next, mask); err != nil {
		return err
	}
	if err := q.checkValues(a, mask); err != nil {
		return err
	}
	q.apply(a, mask)
	switch {
	case next == Reset && cur != Reset:
		q.reset()
	case next == Err && cur != Err:
		// The consumer may move the QP to ERR (rdma_disconnect does) as
		// soon as it has polled a receive whose ACK still waits for the
		// end of the burst. An HCA has sent that ACK by then, and so has
		// rxe by the time the QP leaves RTS; dropped, the peer's send never
		// completes. Send what is queued, as destroy does.
		if q.typ.reliable() && (cur == RTR || cur == RTS || cur == SQD || cur == SQE) {
			q.sendQueuedAcks()
		}
		q.toError(nil, WRFlushErr, why{cause: CauseModified})
	case next == RTR && cur == Init:
		q.resp.epsn = bth.PSN(q.attr.RQPSN & bth.PSNMask)
		q.resp.init(q.attr.MaxDestRdAtomic)
		q.state = RTR
	case next == RTS && cur == RTR:
		p := bth.PSN(q.attr.SQPSN & bth.PSNMask)
		q.req.psn, q.req.hiPSN, q.comp.psn = p, p, p
		q.comp.resetRetries(&q.attr)
		q.state = RTS
	case next == SQD && cur == RTS:
		q.state = SQD
		q.req.drainNotify = q.attr.EnSQDAsyncNotify
		q.checkDrained()
	case next == RTS && (cur == SQD || cur == SQE):
		q.state = RTS
		q.run()
	default:
		q.state = next
	}
	return nil
}

// checkValues checks attribute values the mask selects.
func (q *QP) checkValues(a *QPAttr, mask QPAttrMask) error {
	if mask&AttrPathMTU != 0 {
		if !a.PathMTU.Valid() {
			return invalid("path MTU %d is not an IB MTU enum (1..5)", a.PathMTU)
		}
		if q.env.MaxMTU != 0 && a.PathMTU > q.env.MaxMTU {
			return invalid("path MTU %v exceeds the port's active MTU %v", a.PathMTU, q.env.MaxMTU)
		}
	}
	if mask&AttrPort != 0 && a.PortNum != 1 {
		return invalid("port %d: the device has one port, 1", a.PortNum)
	}
	if mask&AttrPKeyIndex != 0 && a.PKeyIndex != 0 {
		return invalid("P_Key index %d: the P_Key table has one entry", a.PKeyIndex)
	}
	if mask&AttrMaxQPRdAtomic != 0 && a.MaxRdAtomic > MaxRdAtomic {
		return invalid("max_rd_atomic %d exceeds %d", a.MaxRdAtomic, MaxRdAtomic)
	}
	if mask&AttrMaxDestRdAtomic != 0 && a.MaxDestRdAtomic > MaxRdAtomic {
		return invalid("max_dest_rd_atomic %d exceeds %d", a.MaxDestRdAtomic, MaxRdAtomic)
	}
	if mask&(AttrRetryCnt) != 0 && a.RetryCnt > 7 {
		return invalid("retry_cnt %d exceeds 7", a.RetryCnt)
	}
	if mask&(AttrRNRRetry) != 0 && a.RNRRetry > 7 {
		return invalid("rnr_retry %d exceeds 7", a.RNRRetry)
	}
	if mask&AttrMinRNRTimer != 0 && a.MinRNRTimer > 31 {
		return invalid("min_rnr_timer %d exceeds 31", a.MinRNRTimer)
	}
	if mask&AttrTimeout != 0 && a.Timeout > 31 {
		return invalid("timeout %d exceeds 31", a.Timeout)
	}
	if mask&(AttrRQPSN) != 0 && a.RQPSN > bth.PSNMask || mask&AttrSQPSN != 0 && a.SQPSN > bth.PSNMask {
		return invalid("PSN beyond 24 bits")
	}
	if mask&AttrDestQPN != 0 && a.DestQPN > bth.PSNMask {
		return invalid("destination QPN 0x%x beyond 24 bits", a.DestQPN)
	}
	if mask&AttrAV != 0 {
		if _, err := q.resolvePath(&a.AH); err != nil {
			return err
		}
	}
	return nil
}

// apply stores the selected attributes.
func (q *QP) apply(a *QPAttr, mask QPAttrMask) {
	t := &q.attr
	if mask&AttrAccessFlags != 0 {
		t.AccessFlags = a.AccessFlags
	}
	if mask&AttrPKeyIndex != 0 {
		t.PKeyIndex = a.PKeyIndex
	}
	if mask&AttrPort != 0 {
		t.PortNum = a.PortNum
	}
	if mask&AttrQKey != 0 {
		t.QKey = a.QKey
	}
	if mask&AttrAV != 0 {
		t.AH = a.AH
		q.outer, _ = q.resolvePath(&a.AH)
	}
	if mask&AttrPathMTU != 0 {
		t.PathMTU = a.PathMTU
		q.mtu = a.PathMTU.Bytes()
	}
	if mask&AttrTimeout != 0 {
		t.Timeout = a.Timeout
	}
	if mask&AttrRetryCnt != 0 {
		t.RetryCnt = a.RetryCnt
		q.comp.retryCnt = a.RetryCnt
	}
	if mask&AttrRNRRetry != 0 {
		t.RNRRetry = a.RNRRetry
		q.comp.rnrRetry = a.RNRRetry
	}
	if mask&AttrRQPSN != 0 {
		t.RQPSN = a.RQPSN
	}
	if mask&AttrSQPSN != 0 {
		t.SQPSN = a.SQPSN
	}
	if mask&AttrMaxQPRdAtomic != 0 {
		t.MaxRdAtomic = a.MaxRdAtomic
	}
	if mask&AttrMaxDestRdAtomic != 0 {
		t.MaxDestRdAtomic = a.MaxDestRdAtomic
		if q.state == SQD {
			q.resp.init(a.MaxDestRdAtomic)
		}
	}
	if mask&AttrMinRNRTimer != 0 {
		t.MinRNRTimer = a.MinRNRTimer
	}
	if mask&AttrDestQPN != 0 {
		t.DestQPN = a.DestQPN
	}
	if mask&AttrEnSQDAsyncNotify != 0 {
		t.EnSQDAsyncNotify = a.EnSQDAsyncNotify
	}
	if q.typ == UD && q.mtu == 0 {
		// UD has no path MTU attribute: it sends up to the port's MTU.
		q.mtu = q.env.MaxMTU.Bytes()
		if q.mtu == 0 {
			q.mtu = MTU4096.Bytes()
		}
	}
}

// resolvePath turns an address vector into the IP and UDP headers its
// packets carry. The source is the local GID the vector selects.
func (q *QP) resolvePath(ah *AHAttr) (bth.Outer, error) {
	return resolveAH(q.env, ah, q.srcPort)
}

func resolveAH(env *env, ah *AHAttr, srcPort uint16) (bth.Outer, error) {
	sgid, ok := env.GID(ah.SGIDIndex)
	if !ok {
		return bth.Outer{}, invalid("source GID index %d is beyond the GID table or an empty slot", ah.SGIDIndex)
	}
	if ah.DGID.IsZero() {
		return bth.Outer{}, invalid("destination GID is zero (RoCE needs a global route)")
	}
	if sgid.IsIPv4() != ah.DGID.IsIPv4() {
		return bth.Outer{}, invalid("source GID %v and destination GID %v are of different IP versions", sgid, ah.DGID)
	}
	if ah.FlowLabel > 0xfffff {
		return bth.Outer{}, invalid("flow label 0x%x beyond 20 bits", ah.FlowLabel)
	}
	if ah.SrcPort != 0 {
		srcPort = ah.SrcPort
	}
	return bth.Outer{Src: sgid.Addr(), Dst: ah.DGID.Addr(), SrcPort: srcPort,
		TClass: ectMark(env, ah.TrafficClass), FlowLabel: ah.FlowLabel, HopLimit: ah.HopLimit}, nil
}
