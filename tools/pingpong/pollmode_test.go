package pingpong

import (
	"sync"
	"testing"

	"github.com/goroce/goroce/internal/endpoint"
)

// TestPollByDefault: without -e the tools spin on ibv_poll_cq, with the
// device in poll mode, so the spinning thread handles the packets it
// waits for; GOROCE_POLL_MODE=0 leaves that to the receive goroutines.
func TestPollByDefault(t *testing.T) {
	var mu sync.Mutex
	polled := map[bool][]uint64{} // poll mode: each device's packets handled by its pollers
	ppClosing = func(ep *endpoint.Endpoint) {
		mu.Lock()
		defer mu.Unlock()
		polled[ep.Device.PollMode()] = append(polled[ep.Device.PollMode()], ep.Device.Counters().PolledPkts.Load())
	}
	t.Cleanup(func() { ppClosing = func(*endpoint.Endpoint) {} })
	for _, c := range []struct {
		env  string
		poll bool
	}{{"", true}, {"0", false}} {
		t.Setenv(endpoint.EnvPollMode, c.env)
		clear(polled)
		args := []string{"-g", "1", "-s", "64", "-n", "500"}
		srv, cli := ppPair(t, RC, args, args)
		ppCheck(t, RC, 64, 500, 1, srv, cli)
		mu.Lock()
		got := polled[c.poll]
		if len(got) != 2 || len(polled[!c.poll]) != 0 {
			t.Errorf("GOROCE_POLL_MODE=%q: devices by poll mode %v, want both %v", c.env, polled, c.poll)
		}
		for _, n := range got {
			if (n > 0) != c.poll {
				t.Errorf("GOROCE_POLL_MODE=%q: %d packets handled by pollers", c.env, n)
			}
		}
		mu.Unlock()
	}
}
