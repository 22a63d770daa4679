package device_test

import (
	"testing"

	"github.com/goroce/goroce/device"
	"github.com/goroce/goroce/internal/hook"
)

// The device reports a QP's event with the value qp raised it with, so
// the two lists of ibv_event_type values must agree.
func TestQPEventValues(t *testing.T) {
	for _, c := range []struct {
		raised hook.QPEvent
		want   device.EventType
	}{
		{hook.QPFatal, device.EventQPFatal}, {hook.QPReqErr, device.EventQPReqErr},
		{hook.QPAccessErr, device.EventQPAccessErr}, {hook.CommEst, device.EventCommEst},
		{hook.SQDrained, device.EventSQDrained}, {hook.QPLastWQEReached, device.EventQPLastWQEReached},
	} {
		if device.EventType(c.raised) != c.want {
			t.Errorf("qp raises %v as %d, the device's value is %d", c.want, c.raised, c.want)
		}
	}
}
