package transport_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/testharness"

	"github.com/goroce/goroce/transport"
)

// TestForeignObjects: a PD or CQ of another device is refused where it is
// passed, with an error that says so and wraps transport.ErrInvalid, and nothing
// is created; the device's own objects still work.
func TestForeignObjects(t *testing.T) {
	a, b, _ := testharness.MemPair(t, testharness.Options{NoConnect: true})
	ok := transport.QPInitAttr{Type: transport.RC, SendCQ: a.SCQ, RecvCQ: a.RCQ,
		Cap: transport.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
	withCQs := func(s, r *transport.CQ) transport.QPInitAttr { ia := ok; ia.SendCQ, ia.RecvCQ = s, r; return ia }
	srq, err := b.Dev.CreateSRQ(b.PD, transport.SRQAttr{MaxWR: 4, MaxSGE: 1})
	testharness.Must(t, err)
	withSRQ := ok
	withSRQ.SRQ = srq
	for _, c := range []struct {
		name string
		call func() error
		want string
	}{
		{"CreateQP, another device's PD", func() error { _, err := a.Dev.CreateQP(b.PD, ok); return err },
			"device: create_qp: " + b.PD.String() + " belongs to another device: qp: invalid argument"},
		{"CreateQP, no PD", func() error { _, err := a.Dev.CreateQP(nil, ok); return err },
			"device: create_qp: no protection domain: qp: invalid argument"},
		{"CreateQP, another device's send CQ", func() error { _, err := a.Dev.CreateQP(a.PD, withCQs(b.SCQ, a.RCQ)); return err },
			"device: create_qp: completion queue belongs to another device, or was destroyed: qp: invalid argument"},
		{"CreateQP, another device's receive CQ", func() error { _, err := a.Dev.CreateQP(a.PD, withCQs(a.SCQ, b.RCQ)); return err },
			"device: create_qp: completion queue belongs to another device, or was destroyed: qp: invalid argument"},
		{"CreateQP, another device's SRQ", func() error { _, err := a.Dev.CreateQP(a.PD, withSRQ); return err },
			"qp: invalid argument: SRQ belongs to another protection domain"},
		{"CreateSRQ, another device's PD", func() error {
			_, err := a.Dev.CreateSRQ(b.PD, transport.SRQAttr{MaxWR: 4, MaxSGE: 1})
			return err
		}, "device: create_srq: " + b.PD.String() + " belongs to another device: qp: invalid argument"},
		{"CreateAH, another device's PD", func() error {
			_, err := a.Dev.CreateAH(b.PD, transport.AHAttr{DGID: a.Dev.GIDs()[a.Dev.DefaultGIDIndex()], PortNum: 1})
			return err
		}, "device: create_ah: " + b.PD.String() + " belongs to another device: qp: invalid argument"},
	} {
		err := c.call()
		if !errors.Is(err, transport.ErrInvalid) || err.Error() != c.want {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// The device's own objects still make a QP.
	q, err := a.Dev.CreateQP(a.PD, ok)
	testharness.Must(t, err)
	if a.Dev.LookupQP(q.QPN()) != q {
		t.Fatal("the device's own QP is not found")
	}
}

// TestDestroyTwice: a QP, SRQ or AH destroyed a second time is refused
// (ErrInvalid) and releases nothing twice; a destroyed QP is no longer
// found, a destroyed SRQ takes no new QP and a destroyed AH no send.
func TestDestroyTwice(t *testing.T) {
	a, b, _ := testharness.MemPair(t, testharness.Options{Type: transport.UD})

	qpn := a.QP.QPN()
	testharness.Must(t, b.Dev.DestroyQP(b.QP))
	if a.Dev.DestroyQP(b.QP) == nil {
		t.Fatal("another device destroyed a QP")
	}
	testharness.Must(t, a.Dev.DestroyQP(a.QP))
	if a.Dev.LookupQP(qpn) != nil {
		t.Fatal("a destroyed QP is still found")
	}
	if err := a.Dev.DestroyQP(a.QP); !errors.Is(err, transport.ErrInvalid) {
		t.Fatalf("QP destroyed twice: %v", err)
	}

	pd := a.Dev.AllocPD()
	srq, err := a.Dev.CreateSRQ(pd, transport.SRQAttr{MaxWR: 4, MaxSGE: 1})
	testharness.Must(t, err)
	testharness.Must(t, srq.Destroy())
	if err := srq.Destroy(); !errors.Is(err, transport.ErrInvalid) {
		t.Fatalf("SRQ destroyed twice: %v", err)
	}
	_, err = a.Dev.CreateQP(pd, transport.QPInitAttr{Type: transport.RC, SendCQ: a.SCQ, RecvCQ: a.RCQ, SRQ: srq,
		Cap: transport.QPCap{MaxSendWR: 1, MaxSendSGE: 1}})
	if !errors.Is(err, transport.ErrInvalid) || err.Error() != "qp: invalid argument: SRQ destroyed" {
		t.Fatalf("QP over a destroyed SRQ: %v", err)
	}
	testharness.Must(t, pd.Dealloc()) // the SRQ released its PD once, and the refused QP held nothing

	ud, err := a.Dev.CreateQP(a.PD, transport.QPInitAttr{Type: transport.UD, SendCQ: a.SCQ, RecvCQ: a.RCQ,
		Cap: transport.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	testharness.Must(t, err)
	ep, err := a.Dev.LocalEndpoint(ud)
	testharness.Must(t, err)
	testharness.Must(t, a.Dev.Connect(ud, ep, ep, transport.ConnectOptions{}))
	ah, err := a.Dev.CreateAH(a.PD, transport.AHAttr{DGID: ep.GID, SGIDIndex: a.Dev.DefaultGIDIndex(), PortNum: 1})
	testharness.Must(t, err)
	testharness.Must(t, ah.Destroy())
	if err := ah.Destroy(); !errors.Is(err, transport.ErrInvalid) {
		t.Fatalf("AH destroyed twice: %v", err)
	}
	err = ud.PostSend(&transport.SendWR{Opcode: transport.WRSend, AH: ah, RemoteQPN: ud.QPN(), RemoteQKey: transport.DefaultQKey})
	if !errors.Is(err, transport.ErrInvalid) || err.Error() != "qp: invalid argument: address handle destroyed" {
		t.Fatalf("send with a destroyed AH: %v", err)
	}
}

// TestDestroyCQ: ibv_destroy_cq's rules. A CQ a QP's queue completes on
// is busy until that QP is destroyed; a destroyed CQ ends its waiters and
// polls with ErrInvalid, cannot be destroyed twice or given to a new QP;
// another device's CQ is refused.
func TestDestroyCQ(t *testing.T) {
	a, b, _ := testharness.MemPair(t, testharness.Options{NoConnect: true})
	c := a.Dev.CreateCQ(4)
	q, err := a.Dev.CreateQP(a.PD, transport.QPInitAttr{Type: transport.RC, SendCQ: c, RecvCQ: c,
		Cap: transport.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	testharness.Must(t, err)
	if err := a.Dev.DestroyCQ(c); !errors.Is(err, transport.ErrBusy) || !strings.Contains(err.Error(), "2 QP queues") {
		t.Fatalf("CQ of a live QP: %v", err)
	}
	if err := b.Dev.DestroyCQ(c); !errors.Is(err, transport.ErrInvalid) {
		t.Fatalf("another device's CQ: %v", err)
	}
	waited := make(chan error, 1)
	go func() { _, err := c.PollWait(context.Background(), make([]transport.WC, 1)); waited <- err }()
	testharness.Must(t, a.Dev.DestroyQP(q))
	testharness.Must(t, a.Dev.DestroyCQ(c))
	if err := <-waited; !errors.Is(err, transport.ErrInvalid) {
		t.Fatalf("a wait on the destroyed CQ: %v", err)
	}
	if _, err := c.Poll(make([]transport.WC, 1)); !errors.Is(err, transport.ErrInvalid) {
		t.Fatalf("Poll of the destroyed CQ: %v", err)
	}
	if err := a.Dev.DestroyCQ(c); !errors.Is(err, transport.ErrInvalid) {
		t.Fatalf("destroyed twice: %v", err)
	}
	if _, err := a.Dev.CreateQP(a.PD, transport.QPInitAttr{Type: transport.RC, SendCQ: a.SCQ, RecvCQ: c,
		Cap: transport.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); !errors.Is(err, transport.ErrInvalid) {
		t.Fatalf("a QP on a destroyed CQ: %v", err)
	}
	// A failed CreateQP counted nothing: a.scq is not held by it.
	d := a.Dev.CreateCQ(4)
	if _, err := a.Dev.CreateQP(a.PD, transport.QPInitAttr{Type: transport.RC, SendCQ: d, RecvCQ: d}); err == nil {
		t.Fatal("a QP with no capabilities")
	}
	testharness.Must(t, a.Dev.DestroyCQ(d))
}
