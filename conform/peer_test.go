package conform

import (
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/qp"
)

// TestPeerCommands: the peer's command lines, as rdma-core's and
// perftest's tools and as roced's stand-ins take them.
func TestPeerCommands(t *testing.T) {
	c := PeerConfig{Dev: "rxe0", GID: 1, Timeout: 30 * time.Second}
	for _, tc := range []struct {
		tool  peerTool
		alive bool
		want  string
	}{
		{toolPingpong, false, "timeout 30 ibv_rc_pingpong -d rxe0 -g 1 -p 18600 -s 4096 -n 1000 -e"},
		{toolPingpong, true, "timeout 30 ibv_rc_pingpong -d rxe0 -g 1 -p 18600 -s 4096 -n 1 -e"},
		{toolWriteBW, false, "timeout 30 ib_write_bw -d rxe0 -x 1 -p 18600 -n 5 -F"},
		{toolReadBW, false, "timeout 30 ib_read_bw -d rxe0 -x 1 -p 18600 -n 5 -F"},
		{toolAtomicBW, false, "timeout 30 ib_atomic_bw -d rxe0 -x 1 -p 18600 -n 5 -F"},
	} {
		if got := strings.Join(c.command(tc.tool, 18600, tc.alive), " "); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.tool, got, tc.want)
		}
	}
	c = PeerConfig{Roced: "/opt/roced", Dev: "127.0.0.2", GID: 1}
	if got, want := strings.Join(c.command(toolReadBW, 1, false), " "), "timeout 60 /opt/roced read_bw -d 127.0.0.2 -x 1 -p 1 -n 5 -F"; got != want {
		t.Errorf("roced: %q, want %q", got, want)
	}
}

// TestPeerNeeds: every responder case names a tool and why; the
// requester cases say what they need.
func TestPeerNeeds(t *testing.T) {
	cases := Catalogue()
	for i := range cases {
		c := &cases[i]
		n := peerNeeds(c)
		switch {
		case n.why == "":
			t.Errorf("%s: no reason", c.ID)
		case c.Role == Responder && n.tool == toolNone:
			t.Errorf("%s: a responder case without a tool", c.ID)
		case c.Role == Requester && (n.tool != toolNone || !strings.HasPrefix(n.why, "needs ")):
			t.Errorf("%s: %v %q", c.ID, n.tool, n.why)
		}
	}
}

// TestPeerRunNoTool: a case no tool can play ends with the verdict error
// and what it needs, at once, without starting anything.
func TestPeerRunNoTool(t *testing.T) {
	var req []Case
	for _, c := range Catalogue() {
		if c.Role == Requester {
			req = append(req, c)
			break
		}
	}
	e := &peerEnv{cfg: &PeerConfig{}}
	r := e.run(&req[0], 0)
	if r.Verdict != Error || !strings.Contains(r.Observed, "needs") || r.PeerTool != "none" {
		t.Errorf("%+v", r)
	}
}

// TestAnswers: how many packets the fence waits for before it goes.
func TestAnswers(t *testing.T) {
	for _, tc := range []struct {
		o    Outcome
		want int
	}{
		{Outcome{Reply: Silent, Count: 0, CheckCount: true}, 0},
		{Outcome{Reply: ACK}, 1},
		{Outcome{Reply: ReadResponse, Count: 2, CheckCount: true}, 2},
		{Outcome{Reply: NAK, NAK: bth.NAKInvalidRequest, State: qp.Err}, 1},
	} {
		if got := tc.o.answers(); got != tc.want {
			t.Errorf("%v: %d, want %d", tc.o, got, tc.want)
		}
	}
}
