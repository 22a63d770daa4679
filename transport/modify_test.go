package transport_test

import (
	"errors"
	"testing"

	"github.com/goroce/goroce/internal/testharness"

	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

// The required attributes of each forward transition, written out from the
// IBA table (vol 1, 10.3.1, table 91) and the ibv_modify_qp man page, not
// derived from the engine's own table.
var required = []struct {
	typ      transport.QPType
	from, to transport.QPState
	mask     transport.QPAttrMask
}{
	{transport.RC, transport.Reset, transport.Init, transport.AttrPKeyIndex | transport.AttrPort | transport.AttrAccessFlags},
	{transport.UC, transport.Reset, transport.Init, transport.AttrPKeyIndex | transport.AttrPort | transport.AttrAccessFlags},
	{transport.UD, transport.Reset, transport.Init, transport.AttrPKeyIndex | transport.AttrPort | transport.AttrQKey},
	{transport.RC, transport.Init, transport.RTR, transport.AttrAV | transport.AttrPathMTU | transport.AttrDestQPN | transport.AttrRQPSN | transport.AttrMaxDestRdAtomic | transport.AttrMinRNRTimer},
	{transport.UC, transport.Init, transport.RTR, transport.AttrAV | transport.AttrPathMTU | transport.AttrDestQPN | transport.AttrRQPSN},
	{transport.UD, transport.Init, transport.RTR, 0},
	{transport.RC, transport.RTR, transport.RTS, transport.AttrSQPSN | transport.AttrTimeout | transport.AttrRetryCnt | transport.AttrRNRRetry | transport.AttrMaxQPRdAtomic},
	{transport.UC, transport.RTR, transport.RTS, transport.AttrSQPSN},
	{transport.UD, transport.RTR, transport.RTS, transport.AttrSQPSN},
}

func modifySide(t *testing.T, typ transport.QPType) (*testharness.Peer, *transport.Device) {
	o := testharness.Options{Type: typ}
	o.MemDefaults()
	s := testharness.NewMemPeer(t, mem.NewNet(1), "10.0.0.1", o)
	return s, s.Dev
}

func fullAttr(s *testharness.Peer, to transport.QPState) transport.QPAttr {
	g, _ := s.Dev.GID(1)
	return transport.QPAttr{State: to, PortNum: 1, AccessFlags: transport.LocalWrite, QKey: 1, PathMTU: transport.MTU1024,
		DestQPN: 0x42, RQPSN: 1, SQPSN: 2, MaxDestRdAtomic: 1, MinRNRTimer: 12, Timeout: 14,
		RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1, AH: transport.AHAttr{DGID: g, SGIDIndex: 1}}
}

// walk moves a fresh QP of type typ to state via the required masks.
func walk(t *testing.T, s *testharness.Peer, typ transport.QPType, to transport.QPState) {
	for _, r := range required {
		if r.typ != typ || s.QP.State() == to {
			continue
		}
		if r.from != s.QP.State() {
			continue
		}
		a := fullAttr(s, r.to)
		if err := s.QP.Modify(&a, r.mask|transport.AttrState); err != nil {
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
			for bit := transport.QPAttrMask(1); bit != 0 && bit <= transport.AttrDestQPN; bit <<= 1 {
				if r.mask&bit == 0 {
					continue
				}
				s, _ := modifySide(t, r.typ)
				walk(t, s, r.typ, r.from)
				a := fullAttr(s, r.to)
				err := s.QP.Modify(&a, (r.mask&^bit)|transport.AttrState)
				var ae *transport.AttrError
				if !errors.As(err, &ae) || ae.Missing != bit || !errors.Is(err, transport.ErrInvalid) {
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
			extra := transport.AttrCap
			if err := s.QP.Modify(&a, r.mask|transport.AttrState|extra); err == nil {
				t.Fatal("CAP accepted")
			}
			// The exact mask works.
			if err := s.QP.Modify(&a, r.mask|transport.AttrState); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestModifyTransitions(t *testing.T) {
	allowed := map[[2]transport.QPState]bool{}
	for _, p := range [][2]transport.QPState{
		{transport.Reset, transport.Reset}, {transport.Reset, transport.Init},
		{transport.Init, transport.Init}, {transport.Init, transport.RTR}, {transport.Init, transport.Reset}, {transport.Init, transport.Err},
		{transport.RTR, transport.RTS}, {transport.RTR, transport.Reset}, {transport.RTR, transport.Err},
		{transport.RTS, transport.RTS}, {transport.RTS, transport.SQD}, {transport.RTS, transport.Reset}, {transport.RTS, transport.Err},
		{transport.SQD, transport.SQD}, {transport.SQD, transport.RTS}, {transport.SQD, transport.Reset}, {transport.SQD, transport.Err},
		{transport.Err, transport.Reset}, {transport.Err, transport.Err},
	} {
		allowed[p] = true
	}
	for _, typ := range []transport.QPType{transport.RC, transport.UC, transport.UD} {
		for from := transport.Reset; from <= transport.Err; from++ {
			if from == transport.SQE {
				continue // reached only by a send error, tested elsewhere
			}
			for to := transport.Reset; to <= transport.Err; to++ {
				s, _ := modifySide(t, typ)
				switch from {
				case transport.SQD:
					walk(t, s, typ, transport.RTS)
					a := transport.QPAttr{State: transport.SQD}
					testharness.Must(t, s.QP.Modify(&a, transport.AttrState))
				case transport.Err:
					walk(t, s, typ, transport.Init)
					a := transport.QPAttr{State: transport.Err}
					testharness.Must(t, s.QP.Modify(&a, transport.AttrState))
				default:
					walk(t, s, typ, from)
				}
				// Give the transition what it requires, nothing more.
				var mask transport.QPAttrMask
				for _, r := range required {
					if r.typ == typ && r.from == from && r.to == to {
						mask = r.mask
					}
				}
				a := fullAttr(s, to)
				err := s.QP.Modify(&a, mask|transport.AttrState)
				if ok := allowed[[2]transport.QPState{from, to}]; ok != (err == nil) {
					t.Errorf("%v %v->%v: allowed %v, got %v", typ, from, to, ok, err)
				}
			}
		}
	}
}

func TestModifyValues(t *testing.T) {
	s, _ := modifySide(t, transport.RC)
	walk(t, s, transport.RC, transport.Init)
	rtr := transport.AttrAV | transport.AttrPathMTU | transport.AttrDestQPN | transport.AttrRQPSN | transport.AttrMaxDestRdAtomic | transport.AttrMinRNRTimer | transport.AttrState
	for name, mod := range map[string]func(*transport.QPAttr){
		"path MTU above the active MTU": func(a *transport.QPAttr) { a.PathMTU = transport.MTU4096 + 1 },
		"SGID index not in the table":   func(a *transport.QPAttr) { a.AH.SGIDIndex = 9 },
		"zero DGID":                     func(a *transport.QPAttr) { a.AH.DGID = [16]byte{} },
		"IPv6 DGID from an IPv4 SGID":   func(a *transport.QPAttr) { a.AH.DGID = [16]byte{0x20, 1, 0xd, 0xb8} },
		"min_rnr_timer 32":              func(a *transport.QPAttr) { a.MinRNRTimer = 32 },
		"PSN beyond 24 bits":            func(a *transport.QPAttr) { a.RQPSN = 1 << 24 },
		"max_dest_rd_atomic 200":        func(a *transport.QPAttr) { a.MaxDestRdAtomic = 200 },
	} {
		a := fullAttr(s, transport.RTR)
		mod(&a)
		if err := s.QP.Modify(&a, rtr); !errors.Is(err, transport.ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	a := fullAttr(s, transport.RTR)
	testharness.Must(t, s.QP.Modify(&a, rtr))
	rts := fullAttr(s, transport.RTS)
	rts.RetryCnt = 8
	if err := s.QP.Modify(&rts, transport.AttrState|transport.AttrSQPSN|transport.AttrTimeout|transport.AttrRetryCnt|transport.AttrRNRRetry|transport.AttrMaxQPRdAtomic); err == nil {
		t.Error("retry_cnt 8 accepted")
	}
	// CUR_STATE must name the current state.
	rts.RetryCnt, rts.CurState = 7, transport.RTS
	if err := s.QP.Modify(&rts, transport.AttrState|transport.AttrCurState|transport.AttrSQPSN|transport.AttrTimeout|transport.AttrRetryCnt|transport.AttrRNRRetry|transport.AttrMaxQPRdAtomic); err == nil {
		t.Error("wrong CUR_STATE accepted")
	}
	rts.CurState = transport.RTR
	testharness.Must(t, s.QP.Modify(&rts, transport.AttrState|transport.AttrCurState|transport.AttrSQPSN|transport.AttrTimeout|transport.AttrRetryCnt|transport.AttrRNRRetry|transport.AttrMaxQPRdAtomic))
	got, ia := s.QP.Query()
	if got.State != transport.RTS || got.PathMTU != transport.MTU1024 || got.DestQPN != 0x42 || got.Timeout != 14 ||
		got.SQPSN != 2 || got.RQPSN != 1 || ia.Type != transport.RC || got.MinRNRTimer != 12 {
		t.Fatalf("Query %+v", got)
	}
}

func TestPostingByState(t *testing.T) {
	s, _ := modifySide(t, transport.RC)
	recv := &transport.RecvWR{SGL: []transport.SGE{s.MR.SGE(0, 8)}}
	send := &transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{s.MR.SGE(0, 8)}}
	if err := s.QP.PostRecv(recv); !errors.Is(err, transport.ErrState) {
		t.Errorf("post_recv in RESET: %v", err)
	}
	for _, st := range []transport.QPState{transport.Reset, transport.Init, transport.RTR} {
		walk(t, s, transport.RC, st)
		if err := s.QP.PostSend(send); !errors.Is(err, transport.ErrState) {
			t.Errorf("post_send in %v: %v", st, err)
		}
	}
	testharness.Must(t, s.QP.PostRecv(recv)) // INIT onwards
}

func TestErrorFlushesEverything(t *testing.T) {
	a, b, net := testharness.MemPair(t, testharness.Options{Timeout: 16})
	net.SetFilter(a.Addr, b.Addr, func([]byte) mem.Verdict { return mem.Drop })
	for i := range 5 {
		testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: uint64(i), Opcode: transport.WRSend, SGL: []transport.SGE{a.MR.SGE(0, 8)}}))
		testharness.Must(t, a.QP.PostRecv(&transport.RecvWR{WRID: 100 + uint64(i), SGL: []transport.SGE{a.MR.SGE(0, 8)}}))
	}
	e := transport.QPAttr{State: transport.Err}
	testharness.Must(t, a.QP.Modify(&e, transport.AttrState))
	// Every outstanding WR, signaled or not, completes with a flush error,
	// in order (IBA 10.3.1.7).
	for i := range 5 {
		if wc := testharness.Wait(t, a.SCQ, timeoutShort); wc.WRID != uint64(i) || wc.Status != transport.WRFlushErr {
			t.Fatalf("send %d: %+v", i, wc)
		}
		if wc := testharness.Wait(t, a.RCQ, timeoutShort); wc.WRID != 100+uint64(i) || wc.Status != transport.WRFlushErr {
			t.Fatalf("recv %d: %+v", i, wc)
		}
	}
	// Posting in ERR flushes at once.
	testharness.Must(t, a.QP.PostSend(&transport.SendWR{WRID: 9, Opcode: transport.WRSend, SGL: []transport.SGE{a.MR.SGE(0, 8)}}))
	if wc := testharness.Wait(t, a.SCQ, timeoutShort); wc.WRID != 9 || wc.Status != transport.WRFlushErr {
		t.Fatalf("post in ERR: %+v", wc)
	}
	testharness.Must(t, a.QP.PostRecv(&transport.RecvWR{WRID: 10, SGL: []transport.SGE{a.MR.SGE(0, 8)}}))
	if wc := testharness.Wait(t, a.RCQ, timeoutShort); wc.WRID != 10 || wc.Status != transport.WRFlushErr {
		t.Fatalf("post_recv in ERR: %+v", wc)
	}
	// RESET empties the queues without completions; the QP can start over.
	r := transport.QPAttr{State: transport.Reset}
	testharness.Must(t, a.QP.Modify(&r, transport.AttrState))
	if a.SCQ.Len()+a.RCQ.Len() != 0 {
		t.Fatal("completions after RESET")
	}
}
