package fault_test

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/fault"
	"github.com/goroce/goroce/qp"
)

func counter(p *rdmatest.Peer, name string) uint64 {
	for _, c := range p.Dev.Stats() {
		if c.Name == name {
			return c.Value
		}
	}
	return 0
}

// TestDropNthWriteMiddle: two devices on a MemNet, the requester's link
// losing its first RDMA WRITE Middle. The responder sees the PSN gap and
// NAKs it (C9-114: a PSN sequence error), the requester goes back and
// resends, the WRITE completes with every byte right, and the rule says
// it fired once.
func TestDropNthWriteMiddle(t *testing.T) {
	n := nic.NewMemNet(1)
	aa, ba := netip.MustParseAddr("10.9.0.1"), netip.MustParseAddr("10.9.0.2")
	la, err := n.Attach(aa, nic.MemOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lb, err := n.Attach(ba, nic.MemOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := fault.ParseRule("tx opcode=RDMA_WRITE_MIDDLE nth=1 drop")
	if err != nil {
		t.Fatal(err)
	}
	fl := fault.Wrap(la, fault.Config{Rules: []fault.Rule{r}})
	a := rdmatest.NewPeer(t, fl, aa, rdmatest.Options{MTU: qp.MTU1024})
	b := rdmatest.NewPeer(t, lb, ba, rdmatest.Options{MTU: qp.MTU1024})
	rdmatest.Connect(t, a, b)
	rdmatest.Op(t, a, b, qp.WRRDMAWrite, 8*1024, 1, 42)
	s := fl.Faults()
	if s.Rules[0] != 1 || s.Tx.Lost != 1 {
		t.Fatalf("rule fired %d times, %d lost; want 1 and 1 (%v)", s.Rules[0], s.Tx.Lost, s)
	}
	if got := counter(b, "out_of_seq_request"); got == 0 {
		t.Fatal("the responder never saw the gap")
	}
	if got := counter(a, "rcvd_seq_err"); got == 0 {
		t.Fatal("the requester never had a sequence NAK: it did not recover by the NAK")
	}
}
