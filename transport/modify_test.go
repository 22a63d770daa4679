package device_test

import (
	"errors"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"

	"github.com/goroce/goroce/cq"
	"github.com/goroce/goroce/device"
	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/qp"
)

// The required attributes of each forward transition, written out from the
// IBA table (vol 1, 10.3.1, table 91) and the ibv_modify_qp man page, not
// derived from the engine's own table.
var required = []struct {
	typ      qp.Type
	from, to qp.State
	mask     qp.AttrMask
}{
	{qp.RC, qp.Reset, qp.Init, qp.AttrPKeyIndex | qp.AttrPort | qp.AttrAccessFlags},
	{qp.UC, qp.Reset, qp.Init, qp.AttrPKeyIndex | qp.AttrPort | qp.AttrAccessFlags},
	{qp.UD, qp.Reset, qp.Init, qp.AttrPKeyIndex | qp.AttrPort | qp.AttrQKey},
	{qp.RC, qp.Init, qp.RTR, qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN | qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer},
	{qp.UC, qp.Init, qp.RTR, qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN},
	{qp.UD, qp.Init, qp.RTR, 0},
	{qp.RC, qp.RTR, qp.RTS, qp.AttrSQPSN | qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxQPRdAtomic},
	{qp.UC, qp.RTR, qp.RTS, qp.AttrSQPSN},
	{qp.UD, qp.RTR, qp.RTS, qp.AttrSQPSN},
}

func modifySide(t *testing.T, typ qp.Type) (*rdmatest.Peer, *device.Device) {
	o := rdmatest.Options{Type: typ}
	o.MemDefaults()
	s := rdmatest.NewMemPeer(t, mem.NewNet(1), "10.0.0.1", o)
	return s, s.Dev
}

func fullAttr(s *rdmatest.Peer, to qp.State) qp.Attr {
	g, _ := s.Dev.GID(1)
	return qp.Attr{State: to, PortNum: 1, AccessFlags: mr.LocalWrite, QKey: 1, PathMTU: qp.MTU1024,
		DestQPN: 0x42, RQPSN: 1, SQPSN: 2, MaxDestRdAtomic: 1, MinRNRTimer: 12, Timeout: 14,
		RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1, AH: qp.AHAttr{DGID: g, SGIDIndex: 1}}
}

// walk moves a fresh QP of type typ to state via the required masks.
func walk(t *testing.T, s *rdmatest.Peer, typ qp.Type, to qp.State) {
	for _, r := range required {
		if r.typ != typ || s.QP.State() == to {
			continue
		}
		if r.from != s.QP.State() {
			continue
		}
		a := fullAttr(s, r.to)
		if err := s.QP.Modify(&a, r.mask|qp.AttrState); err != nil {
			t.Fatalf("%v %v->%v: %v", typ, r.from, r.to, err)
		}
	}
	if s.QP.State() != to {
		t.Fatalf("reached %v, want %v", s.QP.State(), to)
	}
}

func TestModifyRequiredAttributes(t *testing.T) {
	for _, r := range required {
		t.Run(r.typ.String()+"/"+r.from.String()+"->"+r.to.String(), func(t *testing.T) {
			// Each required attribute left out is an error naming it.
			for bit := qp.AttrMask(1); bit != 0 && bit <= qp.AttrDestQPN; bit <<= 1 {
				if r.mask&bit == 0 {
					continue
				}
				s, _ := modifySide(t, r.typ)
				walk(t, s, r.typ, r.from)
				a := fullAttr(s, r.to)
				err := s.QP.Modify(&a, (r.mask&^bit)|qp.AttrState)
				var ae *qp.AttrError
				if !errors.As(err, &ae) || ae.Missing != bit || !errors.Is(err, qp.ErrInvalid) {
					t.Fatalf("without %v: %v", bit, err)
				}
				if s.QP.State() != r.from {
					t.Fatal("a failed Modify changed the state")
				}
			}
			// An attribute the transition does not take is an error.
			s, _ := modifySide(t, r.typ)
			walk(t, s, r.typ, r.from)
			a := fullAttr(s, r.to)
			extra := qp.AttrCap
			if err := s.QP.Modify(&a, r.mask|qp.AttrState|extra); err == nil {
				t.Fatal("CAP accepted")
			}
			// The exact mask works.
			if err := s.QP.Modify(&a, r.mask|qp.AttrState); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestModifyTransitions(t *testing.T) {
	allowed := map[[2]qp.State]bool{}
	for _, p := range [][2]qp.State{
		{qp.Reset, qp.Reset}, {qp.Reset, qp.Init},
		{qp.Init, qp.Init}, {qp.Init, qp.RTR}, {qp.Init, qp.Reset}, {qp.Init, qp.Err},
		{qp.RTR, qp.RTS}, {qp.RTR, qp.Reset}, {qp.RTR, qp.Err},
		{qp.RTS, qp.RTS}, {qp.RTS, qp.SQD}, {qp.RTS, qp.Reset}, {qp.RTS, qp.Err},
		{qp.SQD, qp.SQD}, {qp.SQD, qp.RTS}, {qp.SQD, qp.Reset}, {qp.SQD, qp.Err},
		{qp.Err, qp.Reset}, {qp.Err, qp.Err},
	} {
		allowed[p] = true
	}
	for _, typ := range []qp.Type{qp.RC, qp.UC, qp.UD} {
		for from := qp.Reset; from <= qp.Err; from++ {
			if from == qp.SQE {
				continue // reached only by a send error, tested elsewhere
			}
			for to := qp.Reset; to <= qp.Err; to++ {
				s, _ := modifySide(t, typ)
				switch from {
				case qp.SQD:
					walk(t, s, typ, qp.RTS)
					a := qp.Attr{State: qp.SQD}
					rdmatest.Must(t, s.QP.Modify(&a, qp.AttrState))
				case qp.Err:
					walk(t, s, typ, qp.Init)
					a := qp.Attr{State: qp.Err}
					rdmatest.Must(t, s.QP.Modify(&a, qp.AttrState))
				default:
					walk(t, s, typ, from)
				}
				// Give the transition what it requires, nothing more.
				var mask qp.AttrMask
				for _, r := range required {
					if r.typ == typ && r.from == from && r.to == to {
						mask = r.mask
					}
				}
				a := fullAttr(s, to)
				err := s.QP.Modify(&a, mask|qp.AttrState)
				if ok := allowed[[2]qp.State{from, to}]; ok != (err == nil) {
					t.Errorf("%v %v->%v: allowed %v, got %v", typ, from, to, ok, err)
				}
			}
		}
	}
}

func TestModifyValues(t *testing.T) {
	s, _ := modifySide(t, qp.RC)
	walk(t, s, qp.RC, qp.Init)
	rtr := qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN | qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer | qp.AttrState
	for name, mod := range map[string]func(*qp.Attr){
		"path MTU above the active MTU": func(a *qp.Attr) { a.PathMTU = qp.MTU4096 + 1 },
		"SGID index not in the table":   func(a *qp.Attr) { a.AH.SGIDIndex = 9 },
		"zero DGID":                     func(a *qp.Attr) { a.AH.DGID = [16]byte{} },
		"IPv6 DGID from an IPv4 SGID":   func(a *qp.Attr) { a.AH.DGID = [16]byte{0x20, 1, 0xd, 0xb8} },
		"min_rnr_timer 32":              func(a *qp.Attr) { a.MinRNRTimer = 32 },
		"PSN beyond 24 bits":            func(a *qp.Attr) { a.RQPSN = 1 << 24 },
		"max_dest_rd_atomic 200":        func(a *qp.Attr) { a.MaxDestRdAtomic = 200 },
	} {
		a := fullAttr(s, qp.RTR)
		mod(&a)
		if err := s.QP.Modify(&a, rtr); !errors.Is(err, qp.ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	a := fullAttr(s, qp.RTR)
	rdmatest.Must(t, s.QP.Modify(&a, rtr))
	rts := fullAttr(s, qp.RTS)
	rts.RetryCnt = 8
	if err := s.QP.Modify(&rts, qp.AttrState|qp.AttrSQPSN|qp.AttrTimeout|qp.AttrRetryCnt|qp.AttrRNRRetry|qp.AttrMaxQPRdAtomic); err == nil {
		t.Error("retry_cnt 8 accepted")
	}
	// CUR_STATE must name the current state.
	rts.RetryCnt, rts.CurState = 7, qp.RTS
	if err := s.QP.Modify(&rts, qp.AttrState|qp.AttrCurState|qp.AttrSQPSN|qp.AttrTimeout|qp.AttrRetryCnt|qp.AttrRNRRetry|qp.AttrMaxQPRdAtomic); err == nil {
		t.Error("wrong CUR_STATE accepted")
	}
	rts.CurState = qp.RTR
	rdmatest.Must(t, s.QP.Modify(&rts, qp.AttrState|qp.AttrCurState|qp.AttrSQPSN|qp.AttrTimeout|qp.AttrRetryCnt|qp.AttrRNRRetry|qp.AttrMaxQPRdAtomic))
	got, ia := s.QP.Query()
	if got.State != qp.RTS || got.PathMTU != qp.MTU1024 || got.DestQPN != 0x42 || got.Timeout != 14 ||
		got.SQPSN != 2 || got.RQPSN != 1 || ia.Type != qp.RC || got.MinRNRTimer != 12 {
		t.Fatalf("Query %+v", got)
	}
}

func TestPostingByState(t *testing.T) {
	s, _ := modifySide(t, qp.RC)
	recv := &qp.RecvWR{SGL: []mr.SGE{s.MR.SGE(0, 8)}}
	send := &qp.SendWR{Opcode: qp.WRSend, SGL: []mr.SGE{s.MR.SGE(0, 8)}}
	if err := s.QP.PostRecv(recv); !errors.Is(err, qp.ErrState) {
		t.Errorf("post_recv in RESET: %v", err)
	}
	for _, st := range []qp.State{qp.Reset, qp.Init, qp.RTR} {
		walk(t, s, qp.RC, st)
		if err := s.QP.PostSend(send); !errors.Is(err, qp.ErrState) {
			t.Errorf("post_send in %v: %v", st, err)
		}
	}
	rdmatest.Must(t, s.QP.PostRecv(recv)) // INIT onwards
}

func TestErrorFlushesEverything(t *testing.T) {
	a, b, net := rdmatest.MemPair(t, rdmatest.Options{Timeout: 16})
	net.SetFilter(a.Addr, b.Addr, func([]byte) mem.Verdict { return mem.Drop })
	for i := range 5 {
		rdmatest.Must(t, a.QP.PostSend(&qp.SendWR{WRID: uint64(i), Opcode: qp.WRSend, SGL: []mr.SGE{a.MR.SGE(0, 8)}}))
		rdmatest.Must(t, a.QP.PostRecv(&qp.RecvWR{WRID: 100 + uint64(i), SGL: []mr.SGE{a.MR.SGE(0, 8)}}))
	}
	e := qp.Attr{State: qp.Err}
	rdmatest.Must(t, a.QP.Modify(&e, qp.AttrState))
	// Every outstanding WR, signaled or not, completes with a flush error,
	// in order (IBA 10.3.1.7).
	for i := range 5 {
		if wc := rdmatest.Wait(t, a.SCQ, timeoutShort); wc.WRID != uint64(i) || wc.Status != cq.WRFlushErr {
			t.Fatalf("send %d: %+v", i, wc)
		}
		if wc := rdmatest.Wait(t, a.RCQ, timeoutShort); wc.WRID != 100+uint64(i) || wc.Status != cq.WRFlushErr {
			t.Fatalf("recv %d: %+v", i, wc)
		}
	}
	// Posting in ERR flushes at once.
	rdmatest.Must(t, a.QP.PostSend(&qp.SendWR{WRID: 9, Opcode: qp.WRSend, SGL: []mr.SGE{a.MR.SGE(0, 8)}}))
	if wc := rdmatest.Wait(t, a.SCQ, timeoutShort); wc.WRID != 9 || wc.Status != cq.WRFlushErr {
		t.Fatalf("post in ERR: %+v", wc)
	}
	rdmatest.Must(t, a.QP.PostRecv(&qp.RecvWR{WRID: 10, SGL: []mr.SGE{a.MR.SGE(0, 8)}}))
	if wc := rdmatest.Wait(t, a.RCQ, timeoutShort); wc.WRID != 10 || wc.Status != cq.WRFlushErr {
		t.Fatalf("post_recv in ERR: %+v", wc)
	}
	// RESET empties the queues without completions; the QP can start over.
	r := qp.Attr{State: qp.Reset}
	rdmatest.Must(t, a.QP.Modify(&r, qp.AttrState))
	if a.SCQ.Len()+a.RCQ.Len() != 0 {
		t.Fatal("completions after RESET")
	}
}
