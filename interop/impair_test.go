package interop

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
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

// What a killed run left of the impaired path is found and removed, and
// nothing else in the lab's namespace is touched: left there, its veth
// end made roced refuse the README's lines (no -d, two interfaces).
func TestImpairedPathLeft(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	ctx := context.Background()
	lab := &Lab{NetNS: fmt.Sprintf("goroceleft%d", os.Getpid()), Script: "true"}
	p := NewImpairedPath(lab, impair.Faults{}, 0)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", lab.NetNS)
	t.Cleanup(func() {
		for _, ns := range []string{lab.NetNS, p.RocedNS, p.MiddleNS} {
			exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	ip("-n", lab.NetNS, "link", "add", "tapkeep", "type", "veth", "peer", "name", "tapkeep1")
	if left := p.Left(ctx); left != nil {
		t.Fatalf("a clean lab namespace: %q left", left)
	}
	ip("netns", "add", p.RocedNS)
	ip("-n", lab.NetNS, "link", "add", impairLabLink, "type", "veth", "peer", "name", "mt")
	want := []string{"namespace " + p.RocedNS, impairLabLink + " in namespace " + lab.NetNS}
	if left := p.Left(ctx); !slices.Equal(left, want) {
		t.Fatalf("left %q, want %q", left, want)
	}
	p.Teardown(ctx)
	if left := p.Left(ctx); left != nil {
		t.Fatalf("after Teardown: %q left", left)
	}
	ip("-n", lab.NetNS, "link", "show", "tapkeep")
}
