package qp

// The Modify QP state machine of IBA 10.3.1 (figure 124 and table 91) as
// libibverbs users meet it through the kernel's ib_modify_qp_is_ok: for each
// transition and QP type, the attributes that must be given and those that
// may be. Anything else is EINVAL.

type transition struct {
	valid    bool
	req, opt [UD + 1]AttrMask
}

// per QP type: index RC, UC, UD.
func byType(rc, uc, ud AttrMask) (t [UD + 1]AttrMask) {
	t[RC], t[UC], t[UD] = rc, uc, ud
	return t
}

const (
	connOpt = AttrAltPath | AttrAccessFlags | AttrPathMigState
)

// toRTSOpt: what RTR->RTS, RTS->RTS and SQD->RTS may also change.
var toRTSOpt = byType(
	AttrCurState|connOpt|AttrMinRNRTimer,
	AttrCurState|connOpt,
	AttrCurState|AttrQKey)

var stateTable = [Err + 1][Err + 1]transition{
	Reset: {
		Reset: {valid: true},
		Init: {valid: true, req: byType(
			AttrPKeyIndex|AttrPort|AttrAccessFlags,
			AttrPKeyIndex|AttrPort|AttrAccessFlags,
			AttrPKeyIndex|AttrPort|AttrQKey)},
	},
	Init: {
		Reset: {valid: true},
		Err:   {valid: true},
		Init: {valid: true, opt: byType(
			AttrPKeyIndex|AttrPort|AttrAccessFlags,
			AttrPKeyIndex|AttrPort|AttrAccessFlags,
			AttrPKeyIndex|AttrPort|AttrQKey)},
		RTR: {valid: true,
			req: byType(
				AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer,
				AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN,
				0),
			opt: byType(
				AttrAltPath|AttrAccessFlags|AttrPKeyIndex,
				AttrAltPath|AttrAccessFlags|AttrPKeyIndex,
				AttrPKeyIndex|AttrQKey)},
	},
	RTR: {
		Reset: {valid: true},
		Err:   {valid: true},
		RTS: {valid: true,
			req: byType(
				AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrSQPSN|AttrMaxQPRdAtomic,
				AttrSQPSN,
				AttrSQPSN),
			opt: toRTSOpt},
	},
	RTS: {
		Reset: {valid: true},
		Err:   {valid: true},
		RTS:   {valid: true, opt: toRTSOpt},
		SQD:   {valid: true, opt: byType(AttrEnSQDAsyncNotify, AttrEnSQDAsyncNotify, AttrEnSQDAsyncNotify)},
	},
	SQD: {
		Reset: {valid: true},
		Err:   {valid: true},
		RTS:   {valid: true, opt: toRTSOpt},
		SQD: {valid: true, opt: byType(
			AttrPort|AttrAV|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxQPRdAtomic|
				AttrMaxDestRdAtomic|connOpt|AttrPKeyIndex|AttrMinRNRTimer,
			AttrAV|connOpt|AttrPKeyIndex,
			AttrPKeyIndex|AttrQKey)},
	},
	// SQE exists for UC and UD only: an RC send error takes the QP to ERR (IBA 10.3.1.6).
	SQE: {
		Reset: {valid: true},
		Err:   {valid: true},
		RTS:   {valid: true, opt: byType(0, AttrCurState|AttrAccessFlags, AttrCurState|AttrQKey)},
	},
	Err: {
		Reset: {valid: true},
		Err:   {valid: true},
	},
}

// checkTransition validates a Modify call as ib_modify_qp_is_ok does.
func checkTransition(t Type, cur, next State, mask AttrMask) error {
	if cur > Err || next > Err {
		return &AttrError{From: cur, To: next, Type: t, Reason: "no such state"}
	}
	if mask&AttrCurState != 0 && cur != RTR && cur != RTS && cur != SQD && cur != SQE {
		return &AttrError{From: cur, To: next, Type: t, Extra: AttrCurState,
			Reason: "CUR_STATE only from RTR, RTS, SQD or SQE"}
	}
	tr := stateTable[cur][next]
	if !tr.valid || (cur == SQE && t == RC) {
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
