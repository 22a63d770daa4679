package interop

import (
	"testing"

	"github.com/goroce/goroce/internal/endpoint"
)

// TestListensOn: a stats socket's LISTEN cm_id on the netdev and port is
// what StatsCMWaiter waits for; another port, netdev or state is not.
// With addresses (a roced server's), a listener bound to another address
// is another process's, and one bound to the unspecified address is
// anyone's; no netdev is any.
func TestListensOn(t *testing.T) {
	all := []endpoint.StatsReply{{PID: 1, CMIDs: []endpoint.CMID{
		{Dev: "goroce0", Netdev: "rxetap0", PS: "TCP", State: "LISTEN", Src: "192.0.2.1:18515"},
		{Dev: "goroce0", Netdev: "taplib2", PS: "UDP", State: "LISTEN", Src: "[2001:db8:1::1]:7174"},
	}}, {PID: 2, CMIDs: []endpoint.CMID{
		{Dev: "goroce0", Netdev: "lo", PS: "TCP", State: "LISTEN", Src: "0.0.0.0:21000"},
	}}}
	for _, tc := range []struct {
		w    StatsCMWaiter
		port int
		want bool
	}{
		{StatsCMWaiter{Netdev: "rxetap0"}, 18515, true},
		{StatsCMWaiter{Netdev: "taplib2"}, 7174, true},
		{StatsCMWaiter{Netdev: "taplib2"}, 18515, false},
		{StatsCMWaiter{Netdev: "rxetap0"}, 7174, false},
		{StatsCMWaiter{}, 7174, true},
		{StatsCMWaiter{Addrs: []string{"192.0.2.1", "2001:db8:1::1"}}, 18515, true},
		{StatsCMWaiter{Addrs: []string{"192.0.2.9", "2001:db8:1::1"}}, 7174, true},
		{StatsCMWaiter{Addrs: []string{"192.0.2.9"}}, 18515, false},
		{StatsCMWaiter{Addrs: []string{"192.0.2.9"}}, 7174, false},
		{StatsCMWaiter{Addrs: []string{"127.0.40.1"}}, 21000, true},
		{StatsCMWaiter{Netdev: "rxetap0", Addrs: []string{"127.0.40.1"}}, 21000, false},
		// A side with no address (the README pairs' server) names none.
		{StatsCMWaiter{Addrs: []string{"", ""}}, 18515, true},
		{StatsCMWaiter{Addrs: []string{"", "2001:db8:1::9"}}, 7174, false},
	} {
		if got := tc.w.listensOn(all, tc.port); got != tc.want {
			t.Errorf("%+v.listensOn(%d) = %v, want %v", tc.w, tc.port, got, tc.want)
		}
	}
	all[0].CMIDs[0].State = "CONNECT"
	if (StatsCMWaiter{Netdev: "rxetap0"}).listensOn(all, 18515) {
		t.Error("a cm_id not in LISTEN counted")
	}
}
