package conformance

import (
	"testing"

	"github.com/goroce/goroce/internal/endpoint"
)

// TestListensOn: a stats socket's LISTEN cm_id on the netdev and port is
// what StatsCMWaiter waits for; another port, netdev or state is not.
func TestListensOn(t *testing.T) {
	all := []endpoint.StatsReply{{PID: 1, CMIDs: []endpoint.CMID{
		{Dev: "goroce0", Netdev: "rxetap0", PS: "TCP", State: "LISTEN", Src: "192.0.2.1:18515"},
		{Dev: "goroce0", Netdev: "taplib2", PS: "UDP", State: "LISTEN", Src: "[2001:db8:1::1]:7174"},
	}}}
	for _, tc := range []struct {
		netdev string
		port   int
		want   bool
	}{{"rxetap0", 18515, true}, {"taplib2", 7174, true}, {"taplib2", 18515, false}, {"rxetap0", 7174, false}} {
		if got := listensOn(all, tc.netdev, tc.port); got != tc.want {
			t.Errorf("listensOn(%s, %d) = %v, want %v", tc.netdev, tc.port, got, tc.want)
		}
	}
	all[0].CMIDs[0].State = "CONNECT"
	if listensOn(all, "rxetap0", 18515) {
		t.Error("a cm_id not in LISTEN counted")
	}
}
