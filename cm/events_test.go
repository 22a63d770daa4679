package cm

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/manualclock"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/nic/mem"
)

// nextEvent waits for m's next event (bounded by the test's context, not
// a guess at when it comes).
func nextEvent(t *testing.T, m *Manager) Event {
	t.Helper()
	select {
	case e, ok := <-m.Events():
		if !ok {
			t.Fatal("the event stream closed")
		}
		return e
	case <-ctx10(t).Done():
		t.Fatal("no event")
	}
	return Event{}
}

// TestEvents: each side's stream says ESTABLISHED for its connection, then
// DISCONNECTED (the DREQ's side's cause ErrDisconnected once the DREP
// came, the other's the DREQ), then TIMEWAIT_EXIT once the time wait on
// the managers' clock is over; a Dial to a port nobody listens on is
// REJECTED with reason 8; nothing else is in the streams, and Close closes
// them.
func TestEvents(t *testing.T) {
	clk := manualclock.New()
	net := mem.NewNet(1)
	a, b := memNode(t, net, "192.0.2.1", nil), memNode(t, net, "192.0.2.2", nil)
	ma, mb := newManager(t, a, clk), newManager(t, b, clk)
	ca, cb := connectPair(t, a, b, ma, mb)
	for _, x := range []struct {
		m *Manager
		c *Conn
	}{{ma, ca}, {mb, cb}} {
		if e := nextEvent(t, x.m); e.Type != EventEstablished || e.Conn != x.c || e.Err != nil {
			t.Errorf("first event %v, want ESTABLISHED of its connection", e)
		}
	}
	if err := ca.Disconnect(ctx10(t)); err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		m *Manager
		c *Conn
	}{{ma, ca}, {mb, cb}} {
		if e := nextEvent(t, x.m); e.Type != EventDisconnected || e.Conn != x.c || !errors.Is(e.Err, ErrDisconnected) {
			t.Errorf("event %v, want DISCONNECTED (%v)", e, ErrDisconnected)
		}
	}
	// Time wait is the connection's measure (ibaTime of its ACK timeout):
	// move the managers' clock well past any of it.
	clk.Advance(ibaTime(31))
	for _, x := range []struct {
		m *Manager
		c *Conn
	}{{ma, ca}, {mb, cb}} {
		if e := nextEvent(t, x.m); e.Type != EventTimewaitExit || e.Conn != x.c {
			t.Errorf("event %v, want TIMEWAIT_EXIT", e)
		}
	}

	_, err := ma.Dial(ctx10(t), netip.AddrPortFrom(a.addr, 0), netip.AddrPortFrom(b.addr, 9), a.qpConfig(), ConnParams{})
	var rej *RejectError
	if !errors.As(err, &rej) || rej.Reason != mad.RejInvalidServiceID {
		t.Fatalf("Dial to no listener: %v", err)
	}
	e := nextEvent(t, ma)
	if !errors.As(e.Err, &rej) || e.Type != EventRejected || rej.Reason != mad.RejInvalidServiceID {
		t.Errorf("event %v, want REJECTED with reason 8", e)
	}
	ma.Close()
	mb.Close()
	for _, m := range []*Manager{ma, mb} {
		if e, ok := <-m.Events(); ok {
			t.Errorf("left in the stream: %v", e)
		}
		if m.EventsLost() != 0 {
			t.Errorf("%d events lost", m.EventsLost())
		}
	}
}

// TestEventUnreachable: a REQ nobody answers, retries included, ends in
// UNREACHABLE with ErrTimeout.
func TestEventUnreachable(t *testing.T) {
	s := newScript(t)
	res := s.dial()
	s.expect(mad.AttrREQ)
	for range maxCMRetries + 1 {
		s.clk.Advance(reqTimeout)
	}
	if d := <-res; !errors.Is(d.err, ErrTimeout) {
		t.Fatalf("Dial: %v", d.err)
	}
	if e := nextEvent(t, s.m); e.Type != EventUnreachable || !errors.Is(e.Err, ErrTimeout) {
		t.Errorf("event %v, want UNREACHABLE", e)
	}
}

// TestEventConnectError: a Dial whose context ends before the REP is a
// CONNECT_ERROR with the context's error.
func TestEventConnectError(t *testing.T) {
	s := newScript(t)
	ctx, cancel := context.WithCancel(context.Background())
	res := s.dialCtx(ctx)
	s.expect(mad.AttrREQ)
	cancel()
	if d := <-res; !errors.Is(d.err, context.Canceled) {
		t.Fatalf("Dial: %v", d.err)
	}
	if e := nextEvent(t, s.m); e.Type != EventConnectError || !errors.Is(e.Err, context.Canceled) {
		t.Errorf("event %v, want CONNECT_ERROR", e)
	}
}

func TestEventTypeString(t *testing.T) {
	if EventEstablished.String() != "ESTABLISHED" || EventTimewaitExit.String() != "TIMEWAIT_EXIT" || EventType(99).String() != "EventType(99)" {
		t.Error("names")
	}
}
