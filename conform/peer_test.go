package conform

import (
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
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

// TestPeerNeeds: every responder case names a tool and why; every
// requester case a tool, how it is played and why; no entry names a case
// that is not in the catalogue.
func TestPeerNeeds(t *testing.T) {
	cases := Catalogue()
	ids := map[string]bool{}
	for i := range cases {
		c := &cases[i]
		ids[c.ID] = true
		n := peerNeeds(c)
		switch {
		case n.why == "":
			t.Errorf("%s: no reason", c.ID)
		case c.Role == Responder && (n.tool == toolNone || n.req != nil):
			t.Errorf("%s: a responder case without a tool, or played as a requester", c.ID)
		case c.Role == Requester && (n.tool == toolNone || n.req == nil || n.req.play == nil || n.req.tool != n.tool):
			t.Errorf("%s: a requester case without a tool to play it: %v %q", c.ID, n.tool, n.why)
		}
	}
	for id := range peerReqs {
		if !ids[id] {
			t.Errorf("peerReqs names %s, not a case", id)
		}
	}
}

// TestClientCommands: the peer's client command lines of the requester
// cases, ending with the suite's address as the tool's host operand.
func TestClientCommands(t *testing.T) {
	c := PeerConfig{Dev: "rxe0", GID: 1, Timeout: 30 * time.Second, Local: netip.MustParseAddr("192.0.2.1"), Python: "/mnt/host/r.py"}
	for _, tc := range []struct {
		id, want string
	}{
		{"req-ack-completes", "timeout 30 ibv_rc_pingpong -d rxe0 -g 1 -p 18600 -s 64 -n 1 192.0.2.1"},
		{"req-unsolicited-ack", "timeout 30 ibv_rc_pingpong -d rxe0 -g 1 -p 18600 -s 64 -n 2 192.0.2.1"},
		{"req-ack-mid-message", "timeout 30 ibv_rc_pingpong -d rxe0 -g 1 -p 18600 -s 3072 -n 1 192.0.2.1"},
		{"req-coalesced-ack", "timeout 30 ib_write_bw -d rxe0 -x 1 -p 18600 -F -s 64 -n 5 192.0.2.1"},
		{"req-read-response-middle-first", "timeout 30 ib_read_bw -d rxe0 -x 1 -p 18600 -F -s 2048 -n 5 192.0.2.1"},
		{"req-atomic-ack-completes", "timeout 30 ib_atomic_bw -d rxe0 -x 1 -p 18600 -F -s 8 -n 5 -A FETCH_AND_ADD 192.0.2.1"},
		{"req-implicit-ack-by-read-response", "timeout 30 python3 /mnt/host/r.py send-read 192.0.2.1 18600 rxe0 1"},
		{"req-rnr-retry-exhausted", "timeout 30 python3 /mnt/host/r.py rnr-retry-2 192.0.2.1 18600 rxe0 1"},
	} {
		r := peerReqs[tc.id]
		if got := strings.Join(c.clientCommand(&r, 18600), " "); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.id, got, tc.want)
		}
	}
}

// TestToolStatus: the completion status as rc_pingpong and perftest print
// it.
func TestToolStatus(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want transport.WCStatus
		ok   bool
	}{
		{"Failed status transport retry counter exceeded (12) for wr_id 2", transport.RetryExcErr, true},
		{"local address: ... Failed status remote access error (10) for wr_id 2 parse WC failed 1", transport.RemAccessErr, true},
		{" Completion with error at client  Failed status 13: wr_id 0 syndrom 0x82", transport.RNRRetryExcErr, true},
		{"Couldn't connect to 192.0.2.1:18515", 0, false},
		{"Failed status (999999999999999999999)", 0, false},
	} {
		got, ok := toolStatus(tc.out)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%q: %v %v, want %v %v", tc.out, got, ok, tc.want, tc.ok)
		}
	}
}

// TestReaction: a request sent again soon after the suite's answer is a
// reaction to it; one at the timer's cadence, or that came before the
// answer went, is not.
func TestReaction(t *testing.T) {
	t0 := time.Now()
	s := &session{peer: &remote{answeredAt: t0, answerOut: t0}}
	ms := time.Millisecond
	for _, tc := range []struct {
		at, since time.Duration // arrival after the answer; since its last transmission
		want      bool
	}{
		{1 * ms, 2 * ms, true},     // at once
		{1 * ms, 40 * ms, true},    // at once, the answer late
		{1 * ms, 100 * ms, false},  // the timer's, on its way as the answer went
		{3 * ms, 67 * ms, false},   // the timer's, just after a late answer
		{67 * ms, 67 * ms, false},  // the timer's
		{22 * ms, 22 * ms, false},  // the timer's, the request seen 45 ms late
		{-1 * ms, 67 * ms, false},  // crossed the answer
		{30 * ms, 200 * ms, false}, // too long after the answer
	} {
		if got := s.reaction(peerEvent{at: t0.Add(tc.at), since: tc.since}); got != tc.want {
			t.Errorf("%v after the answer, %v after its last: %v", tc.at, tc.since, got)
		}
	}
}

// TestReactionSlowSend: the suite preempted for 30 ms in its send. A
// resend stamped while the send was under way (the peer's reaction on
// loopback, before the send returned) and one 10 ms after it returned
// are reactions; one stamped before the send began is not.
func TestReactionSlowSend(t *testing.T) {
	t0 := time.Now()
	ms := time.Millisecond
	s := &session{peer: &remote{answeredAt: t0, answerOut: t0.Add(30 * ms)}}
	for _, tc := range []struct {
		at   time.Duration // after the send began
		want bool
	}{{5 * ms, true}, {40 * ms, true}, {-1 * ms, false}} {
		if got := s.reaction(peerEvent{at: t0.Add(tc.at), since: 2*ms + tc.at}); got != tc.want {
			t.Errorf("%v after the send began: reaction %v", tc.at, got)
		}
	}
}

// TestReactionTimerPSN: when the play knows the PSN the peer's timer
// would resend first, a resend of another PSN is a reaction even if the
// answer went late (here 60 ms after the request, 1 ms before the
// resend), and the timer's own PSN is judged by time as before.
func TestReactionTimerPSN(t *testing.T) {
	t0 := time.Now()
	ms := time.Millisecond
	s := &session{peer: &remote{answeredAt: t0, answerOut: t0, timerPSN: 10, timerPSNSet: true}}
	late := peerEvent{psn: 14, at: t0.Add(1 * ms), since: 61 * ms}
	if !s.reaction(late) || s.timerResend(late) {
		t.Errorf("psn 14 after a late answer: reaction %v, timer %v", s.reaction(late), s.timerResend(late))
	}
	if ev := (peerEvent{psn: 10, at: t0.Add(1 * ms), since: 67 * ms}); s.reaction(ev) || !s.timerResend(ev) {
		t.Error("the timer's PSN at its cadence was not the timer's")
	}
	// The answer acknowledged the timer's PSN, so no reaction sends it
	// again: at the timer's cadence it is the timer's even well after
	// the answer (a loaded peer read the answer late); sooner it is not.
	if ev := (peerEvent{psn: 10, at: t0.Add(30 * ms), since: 95 * ms}); !s.timerResend(ev) {
		t.Error("the timer's PSN 30 ms after the answer, 95 ms after it was sent: not the timer's")
	}
	if ev := (peerEvent{psn: 10, at: t0.Add(1 * ms), since: 5 * ms}); s.timerResend(ev) {
		t.Error("the timer's PSN 5 ms after it was sent: the timer's")
	}
	s.peer.timerPSNSet = false
	if s.reaction(late) {
		t.Error("without timerPSN, a resend at the timer's cadence just after the answer is the timer's")
	}
}

// TestNAKSeqReaction: after a sequence error NAK for the last of five
// WRITEs (PSNs 10 to 14), the reaction is the first request sent again
// that was not the timer's, but for a lone resend of the first beside the
// last's (a probe at the timeout whose cadence a loaded host's stamps
// hid), which is set aside; a go-back from the first is still the
// reaction it is.
func TestNAKSeqReaction(t *testing.T) {
	evs := func(psns ...uint32) []peerEvent {
		var e []peerEvent
		for _, p := range psns {
			e = append(e, peerEvent{psn: p, resent: true})
		}
		return e
	}
	for _, c := range []struct {
		name   string
		psns   []uint32
		timer  []bool
		want   uint32
		probes int
	}{
		{"the last only", []uint32{14}, []bool{false}, 14, 0},
		{"the timer's probe, then the last", []uint32{10, 14}, []bool{true, false}, 14, 0},
		{"a probe whose cadence the stamps hid, then the last", []uint32{10, 14}, []bool{false, false}, 14, 1},
		{"the last, then such a probe", []uint32{14, 10}, []bool{false, false}, 14, 1},
		{"back to the first in reaction", []uint32{10, 11, 12, 13, 14}, []bool{false, false, false, false, false}, 10, 0},
		{"the first only", []uint32{10}, []bool{false}, 10, 0},
	} {
		pick, probes := nakSeqReaction(10, 14, evs(c.psns...), c.timer)
		if pick == nil || pick.psn != c.want || probes != c.probes {
			t.Errorf("%s: picked %v, %d probes; want psn %d, %d", c.name, pick, probes, c.want, c.probes)
		}
	}
}

// TestPeerRunNoPython: a case requester.py plays, run without the
// script's path on the peer, ends with the verdict error and what it
// needs, at once, without starting anything.
func TestPeerRunNoPython(t *testing.T) {
	n := 0
	for _, c := range Catalogue() {
		if peerNeeds(&c).tool != toolPyverbs {
			continue
		}
		n++
		e := &peerEnv{cfg: &PeerConfig{Exec: []string{"false"}}}
		r := e.run(&c, 0)
		if r.Verdict != Error || !strings.Contains(r.Observed, "--peer-python") || r.PeerTool != "requester.py" {
			t.Errorf("%s: %+v", c.ID, r)
		}
	}
	if n != 2 {
		t.Errorf("%d cases played by requester.py, want 2", n)
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
		{Outcome{Reply: NAK, NAK: bth.NAKInvalidRequest, State: transport.Err}, 1},
	} {
		if got := tc.o.answers(); got != tc.want {
			t.Errorf("%v: %d, want %d", tc.o, got, tc.want)
		}
	}
}

// TestShellLine: a printed command is one line sh splits back into the
// same words.
func TestShellLine(t *testing.T) {
	words := []string{"timeout", "60", "/opt/my roced", "rc_pingpong", "-d", "it's", "", "-g", "1"}
	line := shellLine(words)
	if want := `timeout 60 '/opt/my roced' rc_pingpong -d 'it'\''s' '' -g 1`; line != want {
		t.Fatalf("%s, want %s", line, want)
	}
	got, err := exec.Command("sh", "-c", "printf '<%s>' "+line).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := ""
	for _, w := range words {
		want += "<" + w + ">"
	}
	if string(got) != want {
		t.Errorf("sh splits it into %s, want %s", got, want)
	}
}
