package transport

// The Modify QP state machine of IBA 10.3.1 (figure 124 and table 91) as
// libibverbs users meet it through the kernel's ib_modify_qp_is_ok: for each
// transition and QP type, the attributes that must be given and those that
// may be. Anything else is EINVAL. The XRC columns are the kernel's
// qp_state_table's: an initiator sets up as RC's sending half (no
// MAX_DEST_RD_ATOMIC or MIN_RNR_TIMER), a target as its receiving half
// (RTS needs only TIMEOUT and SQ_PSN).

type transition struct {
	valid    bool
	req, opt [numTypes]QPAttrMask
}

// per QP type: RC, UC, UD, XRC initiator, XRC target.
func byType(rc, uc, ud, ini, tgt QPAttrMask) (t [numTypes]QPAttrMask) {
	t[RC], t[UC], t[UD], t[XRCIni], t[XRCTgt] = rc, uc, ud, ini, tgt
	return t
}

const (
	connOpt = AttrAltPath | AttrAccessFlags | AttrPathMigState
	initReq = AttrPKeyIndex | AttrPort | AttrAccessFlags
)

// toRTSOpt: what RTR->RTS, RTS->RTS and SQD->RTS may also change.
var toRTSOpt = byType(
	AttrCurState|connOpt|AttrMinRNRTimer,
	AttrCurState|connOpt,
	AttrCurState|AttrQKey,
	AttrCurState|connOpt,
	AttrCurState|connOpt|AttrMinRNRTimer)

var stateTable = [Err + 1][Err + 1]transition{
	Reset: {
		Reset: {valid: true},
		Init: {valid: true, req: byType(
			initReq,
			initReq,
			AttrPKeyIndex|AttrPort|AttrQKey,
			initReq,
			initReq)},
	},
	Init: {
		Reset: {valid: true},
		Err:   {valid: true},
		Init: {valid: true, opt: byType(
			initReq,
			initReq,
			AttrPKeyIndex|AttrPort|AttrQKey,
			initReq,
			initReq)},
		RTR: {valid: true,
			req: byType(
				AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer,
				AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN,
				0,
				AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN,
				AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer),
			opt: byType(
				AttrAltPath|AttrAccessFlags|AttrPKeyIndex,
				AttrAltPath|AttrAccessFlags|AttrPKeyIndex,
				AttrPKeyIndex|AttrQKey,
				AttrAltPath|AttrAccessFlags|AttrPKeyIndex,
				AttrAltPath|AttrAccessFlags|AttrPKeyIndex)},
	},
	RTR: {
		Reset: {valid: true},
		Err:   {valid: true},
		RTS: {valid: true,
			req: byType(
				AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrSQPSN|AttrMaxQPRdAtomic,
				AttrSQPSN,
				AttrSQPSN,
				AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrSQPSN|AttrMaxQPRdAtomic,
				AttrTimeout|AttrSQPSN),
			opt: toRTSOpt},
	},
	RTS: {
		Reset: {valid: true},
		Err:   {valid: true},
		RTS:   {valid: true, opt: toRTSOpt},
		SQD: {valid: true, opt: byType(AttrEnSQDAsyncNotify, AttrEnSQDAsyncNotify, AttrEnSQDAsyncNotify,
			AttrEnSQDAsyncNotify, AttrEnSQDAsyncNotify)},
	},
	SQD: {
		Reset: {valid: true},
		Err:   {valid: true},
		RTS:   {valid: true, opt: toRTSOpt},
		SQD: {valid: true, opt: byType(
			AttrPort|AttrAV|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxQPRdAtomic|
				AttrMaxDestRdAtomic|connOpt|AttrPKeyIndex|AttrMinRNRTimer,
			AttrAV|connOpt|AttrPKeyIndex,
			AttrPKeyIndex|AttrQKey,
			AttrPort|AttrAV|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxQPRdAtomic|connOpt|AttrPKeyIndex,
			AttrPort|AttrAV|AttrTimeout|AttrMaxDestRdAtomic|connOpt|AttrPKeyIndex|AttrMinRNRTimer)},
	},
	// SQE exists for UC and UD only: an RC or XRC send error takes the QP
	// to ERR (IBA 10.3.1.6).
	SQE: {
		Reset: {valid: true},
		Err:   {valid: true},
		RTS:   {valid: true, opt: byType(0, AttrCurState|AttrAccessFlags, AttrCurState|AttrQKey, 0, 0)},
	},
	Err: {
		Reset: {valid: true},
		Err:   {valid: true},
	},
}

// checkTransition validates a Modify call as ib_modify_qp_is_ok does.
func checkTransition(t QPType, cur, next QPState, mask QPAttrMask) error {
	if t >= numTypes || typeNames[t] == "" {
		return &AttrError{From: cur, To: next, Type: t, Reason: "no such QP type"}
	}
	if cur > Err || next > Err {
		return &AttrError{From: cur, To: next, Type: t, Reason: "no such state"}
	}
	if mask&AttrCurState != 0 && cur != RTR && cur != RTS && cur != SQD && cur != SQE {
		return &AttrError{From: cur, To: next, Type: t, Extra: AttrCurState,
			Reason: "CUR_STATE only from RTR, RTS, SQD or SQE"}
	}
	tr := stateTable[cur][next]
	if !tr.valid || (cur == SQE && t.reliable()) {
		return &AttrError{From: cur, To: next, Type: t, Reason: "invalid transition"}
	}
	req, opt := tr.req[t], tr.opt[t]
	missing := req &^ mask
	extra := mask &^ (req | opt | AttrState)
	if missing != 0 || extra != 0 {
		return &AttrError{From: cur, To: next, Type: t, Missing: missing, Extra: extra}
	}
	return nil
}
