package transport_test

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

// TestHostQPNs: with Options.QPNs the search for each QP's number starts
// where the host's counter says (modulo the range, which leaves out QPNs
// 0, 1 and the multicast QPN), and still skips a number in use. Two
// devices drawing from one counter, as two processes of a host do, never
// hand out the same QPN one after the other: a peer's CM would take the
// second for the first's stale connection.
func TestHostQPNs(t *testing.T) {
	n := mem.NewNet(1)
	var ctr uint32
	next := func() uint32 { ctr++; return ctr - 1 }
	open := func(addr string) *transport.Device {
		l, err := n.Attach(netip.MustParseAddr(addr), mem.Options{})
		if err != nil {
			t.Fatal(err)
		}
		d, err := transport.Open(l, transport.Options{QPNs: next})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	create := func(d *transport.Device) *transport.QP {
		t.Helper()
		c := d.CreateCQ(4)
		q, err := d.CreateQP(d.AllocPD(), transport.QPInitAttr{Type: transport.RC, SendCQ: c, RecvCQ: c,
			Cap: transport.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	a, b := open("192.0.2.1"), open("192.0.2.2")
	qa := create(a)
	a.DestroyQP(qa) // the process ends: its QPN is free again on a
	if qa.QPN() != 0x11 {
		t.Fatalf("first QPN %#x, want 0x11 as a fresh rxe device's", qa.QPN())
	}
	if qb := create(b); qb.QPN() != 0x12 {
		t.Fatalf("the next process's first QPN %#x, want 0x12", qb.QPN())
	}
	// The counter at the top of the range: 0xfffffe, then round to 0x11.
	ctr = 0xfffffe - 0x11
	if q := create(a); q.QPN() != 0xfffffe {
		t.Fatalf("top QPN %#x", q.QPN())
	}
	if q := create(a); q.QPN() != 0x11 {
		t.Fatalf("after the wrap %#x", q.QPN())
	}
	// In use on this device: the search goes on to the next free one.
	ctr = 0
	if q := create(a); q.QPN() != 0x12 {
		t.Fatalf("skipping a used QPN: %#x", q.QPN())
	}
}
