package perftest

import (
	"sync"
	"testing"

	"github.com/goroce/goroce/internal/endpoint"
)

// closedDevice is what a run's device said as the run closed it.
type closedDevice struct {
	poll   bool
	polled uint64 // packets its pollers handled
}

// watchClosing records each endpoint's device as its run closes it.
func watchClosing(t *testing.T) func() []closedDevice {
	var mu sync.Mutex
	var got []closedDevice
	old := ptClosing
	ptClosing = func(ep *endpoint.Endpoint) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, closedDevice{ep.Device.PollMode(), ep.Device.Counters().PolledPkts.Load()})
	}
	t.Cleanup(func() { ptClosing = old })
	return func() []closedDevice {
		mu.Lock()
		defer mu.Unlock()
		return append([]closedDevice(nil), got...)
	}
}

// TestPerftestPollByDefault: the tools spin on their CQs, as perftest
// does, with the device in poll mode, so the spinning thread handles the
// packets it waits for; GOROCE_POLL_MODE=0 leaves that to the receive
// goroutines.
func TestPerftestPollByDefault(t *testing.T) {
	for _, off := range []bool{false, true} {
		if off {
			t.Setenv(endpoint.EnvPollMode, "0")
		}
		seen := watchClosing(t)
		srv, cli := pair(t, SendLat, []string{"-n", "500", "-s", "64"}, []string{"-n", "500", "-s", "64"})
		if srv.code != 0 || cli.code != 0 {
			t.Fatalf("GOROCE_POLL_MODE=0 %v: server %v\nclient %v", off, srv, cli)
		}
		got := seen()
		if len(got) != 2 {
			t.Fatalf("GOROCE_POLL_MODE=0 %v: %d devices closed, want 2", off, len(got))
		}
		for i, d := range got {
			if d.poll == off || (d.polled > 0) == off {
				t.Errorf("GOROCE_POLL_MODE=0 %v: device %d poll mode %v, %d packets handled by its pollers", off, i, d.poll, d.polled)
			}
		}
	}
}
