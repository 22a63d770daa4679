package cm

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/manualclock"
	"github.com/goroce/goroce/nic/mem"
)

// TestDialBurst: 1000 connections dialled at once, as cmtime -c 1000
// does, are all established on their first REQ: no MAD is dropped on
// the way into either manager (the REQs come faster than one goroutine
// handles them). The clock never moves, so no MAD is ever sent twice: a
// dropped one would leave its Dial waiting until the test's context
// ends, and the count of dropped MADs says why.
func TestDialBurst(t *testing.T) {
	const n = 1000
	clk := manualclock.New()
	net := mem.NewNet(1)
	a, b := memNode(t, net, "192.0.2.1", clk), memNode(t, net, "192.0.2.2", clk)
	ma, mb := newManager(t, a, clk), newManager(t, b, clk)
	qc := b.qpConfig()
	l, err := mb.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), 7471), ListenConfig{QP: qc, Backlog: n})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := ma.Dial(ctx10(t), netip.AddrPort{}, netip.AddrPortFrom(b.addr, 7471), a.qpConfig(), ConnParams{})
			errs <- err
		}()
	}
	for i := range n {
		if err := <-errs; err != nil {
			t.Fatalf("connection %d: %v (MADs dropped: client %d, server %d)", i, err, ma.Stats().Overflow, mb.Stats().Overflow)
		}
	}
	for i := range n {
		if _, err := l.Accept(ctx10(t)); err != nil {
			t.Fatalf("accept %d: %v", i, err)
		}
	}
	if sa, sb := ma.Stats(), mb.Stats(); sa.Overflow+sb.Overflow+sa.Retries+sb.Retries != 0 {
		t.Errorf("client %+v\nserver %+v", sa, sb)
	}
}
