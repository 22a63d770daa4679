package transport_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/goroce/goroce/cq"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/transport"
)

// TestForeignObjects: a PD or CQ of another device is refused where it is
// passed, with an error that says so and wraps qp.ErrInvalid, and nothing
// is created; the device's own objects still work.
func TestForeignObjects(t *testing.T) {
	a, b, _ := newPair(t, pairOpts{noConnect: true})
	ok := qp.InitAttr{Type: qp.RC, SendCQ: a.scq, RecvCQ: a.rcq,
		Cap: qp.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
	withCQs := func(s, r *cq.CQ) qp.InitAttr { ia := ok; ia.SendCQ, ia.RecvCQ = s, r; return ia }
	srq, err := b.dev.CreateSRQ(b.pd, qp.SRQAttr{MaxWR: 4, MaxSGE: 1})
	must(t, err)
	withSRQ := ok
	withSRQ.SRQ = srq
	for _, c := range []struct {
		name string
		call func() error
		want string
	}{
		{"CreateQP, another device's PD", func() error { _, err := a.dev.CreateQP(b.pd, ok); return err },
			"transport: create_qp: " + b.pd.String() + " belongs to another device: qp: invalid argument"},
		{"CreateQP, no PD", func() error { _, err := a.dev.CreateQP(nil, ok); return err },
			"transport: create_qp: no protection domain: qp: invalid argument"},
		{"CreateQP, another device's send CQ", func() error { _, err := a.dev.CreateQP(a.pd, withCQs(b.scq, a.rcq)); return err },
			"transport: create_qp: completion queue belongs to another device, or was destroyed: qp: invalid argument"},
		{"CreateQP, another device's receive CQ", func() error { _, err := a.dev.CreateQP(a.pd, withCQs(a.scq, b.rcq)); return err },
			"transport: create_qp: completion queue belongs to another device, or was destroyed: qp: invalid argument"},
		{"CreateQP, another device's SRQ", func() error { _, err := a.dev.CreateQP(a.pd, withSRQ); return err },
			"qp: invalid argument: SRQ belongs to another protection domain"},
		{"CreateSRQ, another device's PD", func() error {
			_, err := a.dev.CreateSRQ(b.pd, qp.SRQAttr{MaxWR: 4, MaxSGE: 1})
			return err
		}, "transport: create_srq: " + b.pd.String() + " belongs to another device: qp: invalid argument"},
		{"CreateAH, another device's PD", func() error {
			_, err := a.dev.CreateAH(b.pd, qp.AHAttr{DGID: a.dev.GIDs()[a.dev.DefaultGIDIndex()], PortNum: 1})
			return err
		}, "transport: create_ah: " + b.pd.String() + " belongs to another device: qp: invalid argument"},
	} {
		err := c.call()
		if !errors.Is(err, qp.ErrInvalid) || err.Error() != c.want {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// The device's own objects still make a QP.
	q, err := a.dev.CreateQP(a.pd, ok)
	must(t, err)
	if a.dev.LookupQP(q.QPN()) != q {
		t.Fatal("the device's own QP is not found")
	}
}

// TestDestroyTwice: a QP, SRQ or AH destroyed a second time is refused
// (ErrInvalid) and releases nothing twice; a destroyed QP is no longer
// found, a destroyed SRQ takes no new QP and a destroyed AH no send.
func TestDestroyTwice(t *testing.T) {
	a, b, _ := newPair(t, pairOpts{typ: qp.UD})

	qpn := a.qp.QPN()
	must(t, b.dev.DestroyQP(b.qp))
	if a.dev.DestroyQP(b.qp) == nil {
		t.Fatal("another device destroyed a QP")
	}
	must(t, a.dev.DestroyQP(a.qp))
	if a.dev.LookupQP(qpn) != nil {
		t.Fatal("a destroyed QP is still found")
	}
	if err := a.dev.DestroyQP(a.qp); !errors.Is(err, qp.ErrInvalid) {
		t.Fatalf("QP destroyed twice: %v", err)
	}

	pd := a.dev.AllocPD()
	srq, err := a.dev.CreateSRQ(pd, qp.SRQAttr{MaxWR: 4, MaxSGE: 1})
	must(t, err)
	must(t, srq.Destroy())
	if err := srq.Destroy(); !errors.Is(err, qp.ErrInvalid) {
		t.Fatalf("SRQ destroyed twice: %v", err)
	}
	_, err = a.dev.CreateQP(pd, qp.InitAttr{Type: qp.RC, SendCQ: a.scq, RecvCQ: a.rcq, SRQ: srq,
		Cap: qp.Cap{MaxSendWR: 1, MaxSendSGE: 1}})
	if !errors.Is(err, qp.ErrInvalid) || err.Error() != "qp: invalid argument: SRQ destroyed" {
		t.Fatalf("QP over a destroyed SRQ: %v", err)
	}
	must(t, pd.Dealloc()) // the SRQ released its PD once, and the refused QP held nothing

	ud, err := a.dev.CreateQP(a.pd, qp.InitAttr{Type: qp.UD, SendCQ: a.scq, RecvCQ: a.rcq,
		Cap: qp.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	ep, err := a.dev.LocalEndpoint(ud)
	must(t, err)
	must(t, a.dev.Connect(ud, ep, ep, transport.ConnectOptions{}))
	ah, err := a.dev.CreateAH(a.pd, qp.AHAttr{DGID: ep.GID, SGIDIndex: a.dev.DefaultGIDIndex(), PortNum: 1})
	must(t, err)
	must(t, ah.Destroy())
	if err := ah.Destroy(); !errors.Is(err, qp.ErrInvalid) {
		t.Fatalf("AH destroyed twice: %v", err)
	}
	err = ud.PostSend(&qp.SendWR{Opcode: qp.WRSend, AH: ah, RemoteQPN: ud.QPN(), RemoteQKey: transport.DefaultQKey})
	if !errors.Is(err, qp.ErrInvalid) || err.Error() != "qp: invalid argument: address handle destroyed" {
		t.Fatalf("send with a destroyed AH: %v", err)
	}
}

// TestDestroyCQ: ibv_destroy_cq's rules. A CQ a QP's queue completes on
// is busy until that QP is destroyed; a destroyed CQ ends its waiters and
// polls with ErrInvalid, cannot be destroyed twice or given to a new QP;
// another device's CQ is refused.
func TestDestroyCQ(t *testing.T) {
	a, b, _ := newPair(t, pairOpts{noConnect: true})
	c := a.dev.CreateCQ(4)
	q, err := a.dev.CreateQP(a.pd, qp.InitAttr{Type: qp.RC, SendCQ: c, RecvCQ: c,
		Cap: qp.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	if err := a.dev.DestroyCQ(c); !errors.Is(err, qp.ErrBusy) || !strings.Contains(err.Error(), "2 QP queues") {
		t.Fatalf("CQ of a live QP: %v", err)
	}
	if err := b.dev.DestroyCQ(c); !errors.Is(err, qp.ErrInvalid) {
		t.Fatalf("another device's CQ: %v", err)
	}
	waited := make(chan error, 1)
	go func() { _, err := c.PollWait(context.Background(), make([]cq.WC, 1)); waited <- err }()
	must(t, a.dev.DestroyQP(q))
	must(t, a.dev.DestroyCQ(c))
	if err := <-waited; !errors.Is(err, qp.ErrInvalid) {
		t.Fatalf("a wait on the destroyed CQ: %v", err)
	}
	if _, err := c.Poll(make([]cq.WC, 1)); !errors.Is(err, qp.ErrInvalid) {
		t.Fatalf("Poll of the destroyed CQ: %v", err)
	}
	if err := a.dev.DestroyCQ(c); !errors.Is(err, qp.ErrInvalid) {
		t.Fatalf("destroyed twice: %v", err)
	}
	if _, err := a.dev.CreateQP(a.pd, qp.InitAttr{Type: qp.RC, SendCQ: a.scq, RecvCQ: c,
		Cap: qp.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); !errors.Is(err, qp.ErrInvalid) {
		t.Fatalf("a QP on a destroyed CQ: %v", err)
	}
	// A failed CreateQP counted nothing: a.scq is not held by it.
	d := a.dev.CreateCQ(4)
	if _, err := a.dev.CreateQP(a.pd, qp.InitAttr{Type: qp.RC, SendCQ: d, RecvCQ: d}); err == nil {
		t.Fatal("a QP with no capabilities")
	}
	must(t, a.dev.DestroyCQ(d))
}
