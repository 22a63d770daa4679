package qp_test

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

// TestNoLinkDeps: a QP needs the link interface (package nic), not the
// links, so building qp brings none of what the links need: cilium/ebpf
// (AF_XDP), gopacket (the pcap tap) or netlink (the GID table and the
// neighbour resolver). Issue 13.
func TestNoLinkDeps(t *testing.T) {
	for _, p := range goList(t, "-deps", "github.com/goroce/goroce/qp") {
		for _, bad := range []string{"cilium", "gopacket", "netlink"} {
			if strings.Contains(strings.ToLower(p), bad) {
				t.Errorf("qp depends on %s", p)
			}
		}
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
