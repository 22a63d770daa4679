package transport_test

import (
	"os/exec"
	"strings"
	"testing"
)

// goList runs go list with args and returns its output's lines; the test
// is skipped where there is no go command.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to list packages with: %v", err)
	}
	out, err := exec.Command(gocmd, append([]string{"list"}, args...)...).Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	return strings.Fields(string(out))
}

// TestNoLinkDeps: the engine needs the link interface (package nic) and,
// for the device's GID table and neighbour resolver, netlink (through
// nic/netdev), but not the other links, so building transport brings
// neither cilium/ebpf (AF_XDP) nor gopacket (the pcap tap). Issue 13.
func TestNoLinkDeps(t *testing.T) {
	for _, p := range goList(t, "-deps", "github.com/goroce/goroce/transport") {
		for _, bad := range []string{"cilium", "gopacket"} {
			if strings.Contains(strings.ToLower(p), bad) {
				t.Errorf("transport depends on %s", p)
			}
		}
	}
}

// TestLinksDoNotImportEngine: the links (nic and every package under it)
// sit below the engine, so none of them depends on transport, their tests
// included (go list -test: a link's test that needs the engine lives
// beside the engine); what they share with it, the clock a test moves by
// hand, lives in package clock. Issue 45.
func TestLinksDoNotImportEngine(t *testing.T) {
	// "package=>dependency" pairs; a test variant's import path has a
	// space in it ("nic/udp [nic/udp.test]"), so its pairs start at the
	// bracket, and the words before them carry no "=>".
	out := goList(t, "-test", "-f", `{{$p := .ImportPath}}{{range .Deps}}{{$p}}=>{{.}}{{"\n"}}{{end}}`, "github.com/goroce/goroce/nic/...")
	links, tests := map[string]bool{}, 0
	for _, pair := range out {
		link, dep, ok := strings.Cut(pair, "=>")
		if !ok {
			continue
		}
		links[link] = true
		if strings.HasSuffix(link, ".test") || strings.HasSuffix(link, ".test]") {
			tests++
		}
		if dep == "github.com/goroce/goroce/transport" || strings.HasPrefix(dep, "github.com/goroce/goroce/transport/") {
			t.Errorf("%s depends on %s", link, dep)
		}
	}
	if len(links) < 2 || tests == 0 {
		t.Fatalf("go list shows %d link packages, %d of them tests; want nic, its subpackages and their tests", len(links), tests)
	}
}

// TestNicIsLeaf: package nic, the link interface, imports the standard
// library and no goroce package but bth and inet; the links live in its
// subpackages.
func TestNicIsLeaf(t *testing.T) {
	imports := goList(t, "-f", `{{join .Imports "\n"}}`, "github.com/goroce/goroce/nic")
	if len(imports) == 0 {
		t.Fatal("go list shows nic importing nothing")
	}
	for _, p := range imports {
		switch p {
		case "github.com/goroce/goroce/bth", "github.com/goroce/goroce/inet":
			continue
		}
		if first, _, _ := strings.Cut(p, "/"); strings.Contains(first, ".") {
			t.Errorf("nic imports %s", p)
		}
	}
}
