package conformance

import (
	"testing"
	"time"

	"github.com/goroce/goroce/nic/impair"
)

// A run on the impaired path passes only if the forwarder lost packets
// each way: one it left whole proves nothing about recovery.
func TestImpairedReportNeedsLoss(t *testing.T) {
	rep := &Report{Passed: 3}
	for _, c := range []struct {
		toGuest, toRoced uint64
		ok               bool
	}{{0, 0, false}, {2, 0, false}, {0, 1, false}, {1, 1, true}} {
		rep.Impair = &ImpairStats{ToGuest: impair.Stats{Lost: c.toGuest}, ToRoced: impair.Stats{Lost: c.toRoced}}
		if rep.OK() != c.ok {
			t.Errorf("lost %d to the guest, %d to roced: OK %v, want %v", c.toGuest, c.toRoced, rep.OK(), c.ok)
		}
	}
	rep.Impair = nil
	if !rep.OK() {
		t.Error("a clean run with every case passed is not OK")
	}
}

func TestRepeat(t *testing.T) {
	cases, err := Matrix(MatrixOptions{MTU: 1024, Tools: []string{"rc_pingpong"}, Directions: []Direction{PeerServer}})
	if err != nil {
		t.Fatal(err)
	}
	rep := Repeat(cases[:2], 3)
	if len(rep) != 6 {
		t.Fatalf("%d cases, want 6", len(rep))
	}
	seen := map[string]bool{}
	for _, c := range rep {
		if seen[c.ID()] || c.Rep < 1 || c.Rep > 3 {
			t.Fatalf("case %s repeated with a duplicate ID or a bad number", c.ID())
		}
		seen[c.ID()] = true
	}
	if rep[0].ID() != "rc_pingpong/RC/s1@peer-server#1" || Repeat(cases, 1)[0].ID() != "rc_pingpong/RC/s1@peer-server" {
		t.Fatalf("IDs %q, %q", rep[0].ID(), Repeat(cases, 1)[0].ID())
	}
}

func TestParseGuestState(t *testing.T) {
	g, err := parseGuestState("clock=1764038400.25\nhw.rcvd_pkts=12\nhw.sent_pkts=7\ndmesg=301\nnoise\nhw.bad=x\n")
	if err != nil || g.counters["rcvd_pkts"] != 12 || g.counters["sent_pkts"] != 7 || len(g.counters) != 2 || g.dmesg != 301 ||
		!g.clock.Equal(time.Unix(1764038400, 250000000)) {
		t.Fatalf("got %+v, %v", g, err)
	}
	// A snapshot cut short (no clock, no log length) is an error, not zeros
	// that would make the next case's counters look moved.
	if _, err := parseGuestState("hw.rcvd_pkts=12\n"); err == nil {
		t.Fatal("an incomplete snapshot parsed")
	}
}
