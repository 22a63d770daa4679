package transport_test

import (
	"testing"

	"github.com/goroce/goroce/internal/hook"
	"github.com/goroce/goroce/qp"
)

// The device reports a QP's event with the value qp raised it with, so
// the two lists of ibv_event_type values must agree.
func TestQPEventValues(t *testing.T) {
	for _, c := range []struct {
		raised hook.QPEvent
		want   qp.EventType
	}{
		{hook.QPFatal, qp.EventQPFatal}, {hook.QPReqErr, qp.EventQPReqErr},
		{hook.QPAccessErr, qp.EventQPAccessErr}, {hook.CommEst, qp.EventCommEst},
		{hook.SQDrained, qp.EventSQDrained}, {hook.QPLastWQEReached, qp.EventQPLastWQEReached},
	} {
		if qp.EventType(c.raised) != c.want {
			t.Errorf("qp raises %v as %d, the device's value is %d", c.want, c.raised, c.want)
		}
	}
}
