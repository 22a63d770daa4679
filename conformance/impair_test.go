package conformance

import (
	"testing"

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
