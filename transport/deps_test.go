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
// sit below the engine, so none of them depends on transport; what they
// share with it, the clock a test moves by hand, lives in package clock.
// Issue 45.
func TestLinksDoNotImportEngine(t *testing.T) {
	pairs := goList(t, "-f", `{{$p := .ImportPath}}{{$p}}:{{range .Deps}} {{$p}}:{{.}}{{end}}`, "github.com/goroce/goroce/nic/...")
	links := map[string]bool{}
	for _, pair := range pairs {
		link, dep, _ := strings.Cut(pair, ":")
		links[link] = true
		if dep == "github.com/goroce/goroce/transport" || strings.HasPrefix(dep, "github.com/goroce/goroce/transport/") {
			t.Errorf("%s depends on %s", link, dep)
		}
	}
	if len(links) < 2 {
		t.Fatalf("go list shows %d link packages; want nic and its subpackages", len(links))
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
