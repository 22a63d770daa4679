package transport_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/testharness"
	"github.com/goroce/goroce/transport"
)

// TestCapMessages: a rejected Cap names the field that is wrong and the
// limit it broke, not the whole struct (issue 14 item 6).
func TestCapMessages(t *testing.T) {
	s, d := modifySide(t, transport.RC)
	for _, c := range []struct {
		cap  transport.QPCap
		want string
	}{
		{transport.QPCap{}, "max_send_wr is 0"},
		{transport.QPCap{MaxSendWR: 1, MaxRecvWR: transport.MaxWR + 1}, "max_recv_wr 32769 exceeds the device's max_qp_wr 32768"},
		{transport.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 33}, "max_send_sge 33 exceeds the device's max_sge 32"},
		{transport.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxInlineData: 4096}, "max_inline_data 4096 exceeds the device's max_inline 512"},
	} {
		_, err := d.CreateQP(s.PD, transport.QPInitAttr{Type: transport.RC, SendCQ: s.SCQ, RecvCQ: s.RCQ, Cap: c.cap})
		if !errors.Is(err, transport.ErrInvalid) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "{") {
			t.Errorf("Cap %+v: %v, want ErrInvalid saying %q", c.cap, err, c.want)
		}
	}
}

// TestPostToDestroyedQP: posting to a destroyed QP says so, in Modify's
// words, rather than naming the RESET state it was left in.
func TestPostToDestroyedQP(t *testing.T) {
	s, d := modifySide(t, transport.RC)
	walk(t, s, transport.RC, transport.RTS)
	testharness.Must(t, d.DestroyQP(s.QP))
	a := transport.QPAttr{State: transport.Err}
	merr := s.QP.Modify(&a, transport.AttrState)
	serr := s.QP.PostSend(&transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{s.MR.SGE(0, 8)}})
	rerr := s.QP.PostRecv(&transport.RecvWR{SGL: []transport.SGE{s.MR.SGE(0, 8)}})
	for _, err := range []error{merr, serr, rerr} {
		if !errors.Is(err, transport.ErrState) || !strings.Contains(fmtErr(err), "QP destroyed") {
			t.Errorf("after destroy: %v, want \"QP destroyed\"", err)
		}
	}
}

func fmtErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestSGECheckedAtPost: an SGE outside its region, with a wrong lkey, or
// without the local write a receive or READ needs fails the post that
// names it (the mr error wrapped), not a completion later.
func TestSGECheckedAtPost(t *testing.T) {
	s, d := modifySide(t, transport.RC)
	walk(t, s, transport.RC, transport.RTS)
	small, err := s.PD.Register(make([]byte, 4096), transport.LocalWrite)
	testharness.Must(t, err)
	ro, err := s.PD.Register(make([]byte, 4096), 0)
	testharness.Must(t, err)
	other, err := d.AllocPD().Register(make([]byte, 4096), transport.LocalWrite)
	testharness.Must(t, err)
	bad := transport.SGE{Addr: small.Addr(), Length: 8, LKey: small.LKey() ^ 0x80} // same index, another tag: no region
	srq, err := d.CreateSRQ(s.PD, transport.SRQAttr{MaxWR: 4, MaxSGE: 1})
	testharness.Must(t, err)
	for _, c := range []struct {
		name string
		post func() error
		want error
	}{
		{"send beyond the region", func() error {
			return s.QP.PostSend(&transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{small.SGE(5000, 10)}})
		}, transport.ErrBounds},
		{"send straddling the end", func() error {
			return s.QP.PostSend(&transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{small.SGE(0, 8), small.SGE(4090, 10)}})
		}, transport.ErrBounds},
		{"send with a wrong lkey", func() error {
			return s.QP.PostSend(&transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{bad}})
		}, transport.ErrInvalidKey},
		{"send from another PD's region", func() error {
			return s.QP.PostSend(&transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{other.SGE(0, 8)}})
		}, transport.ErrPD},
		{"READ into a region without local write", func() error {
			return s.QP.PostSend(&transport.SendWR{Opcode: transport.WRRDMARead, SGL: []transport.SGE{ro.SGE(0, 8)}, RemoteAddr: 0x1000, RKey: 1})
		}, transport.ErrAccess},
		{"receive beyond the region", func() error {
			return s.QP.PostRecv(&transport.RecvWR{SGL: []transport.SGE{small.SGE(5000, 10)}})
		}, transport.ErrBounds},
		{"receive into a region without local write", func() error {
			return s.QP.PostRecv(&transport.RecvWR{SGL: []transport.SGE{ro.SGE(0, 8)}})
		}, transport.ErrAccess},
		{"SRQ receive beyond the region", func() error {
			return srq.PostRecv(&transport.RecvWR{SGL: []transport.SGE{small.SGE(5000, 10)}})
		}, transport.ErrBounds},
	} {
		err := c.post()
		if !errors.Is(err, transport.ErrInvalid) || !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want ErrInvalid wrapping %v", c.name, err, c.want)
		}
	}
	if n := s.SCQ.Len() + s.RCQ.Len() + srq.Len(); n != 0 {
		t.Errorf("%d completions or WQEs from rejected posts", n)
	}
	// The same SGEs inside the region post (a send from a read-only region
	// is fine: sending only reads it).
	testharness.Must(t, s.QP.PostSend(&transport.SendWR{Opcode: transport.WRSend, SGL: []transport.SGE{ro.SGE(0, 8), small.SGE(4088, 8)}}))
	testharness.Must(t, s.QP.PostRecv(&transport.RecvWR{SGL: []transport.SGE{small.SGE(0, 4096)}}))
}
