package transport_test

import (
	"testing"

	"github.com/goroce/goroce/internal/hook"
	"github.com/goroce/goroce/transport"
)

// The device reports a QP's event with the value qp raised it with, so
// the two lists of ibv_event_type values must agree.
func TestQPEventValues(t *testing.T) {
	for _, c := range []struct {
		raised hook.QPEvent
		want   transport.EventType
	}{
		{hook.QPFatal, transport.EventQPFatal}, {hook.QPReqErr, transport.EventQPReqErr},
		{hook.QPAccessErr, transport.EventQPAccessErr}, {hook.CommEst, transport.EventCommEst},
		{hook.SQDrained, transport.EventSQDrained}, {hook.QPLastWQEReached, transport.EventQPLastWQEReached},
	} {
		if transport.EventType(c.raised) != c.want {
			t.Errorf("qp raises %v as %d, the device's value is %d", c.want, c.raised, c.want)
		}
	}
}
