package main

import (
	"os"
	"strings"
	"testing"
)

// readmeDocs are the pages that show how to run a real tool over the
// library, and the heading of the block in each: the README's tour and
// docs/libgoroce.md. Both must show the same lines, which TestVethReadme
// runs.
var readmeDocs = []struct{ file, heading string }{
	{"../../README.md", "### A real tool over libgoroce.so"},
	{"../../docs/libgoroce.md", "# Unmodified RDMA programs: bin/libgoroce.so"},
}

// readmeLines returns the lines of the first sh block after heading in
// file.
func readmeLines(t *testing.T, file, heading string) []string {
	t.Helper()
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(text), heading+"\n")
	_, block, ok2 := strings.Cut(sec, "```sh\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatalf("%s has no sh block after %q", file, heading)
	}
	return strings.Split(strings.TrimSpace(block), "\n")
}

// readmeScript is the block the README and docs/libgoroce.md show, as a
// shell runs it on the client's side of TestVethReadme: the library
// built by TestMain in place of $PWD/bin/libgoroce.so, and the
// pingpong's TCP port (-p) before the server's address. It fails when the
// pages differ or the block is not the form the test runs: the
// environment, then commands, the last one the pingpong client.
func readmeScript(t *testing.T, port string) string {
	t.Helper()
	var lines []string
	for i, d := range readmeDocs {
		l := readmeLines(t, d.file, d.heading)
		if i == 0 {
			lines = l
		} else if strings.Join(l, "\n") != strings.Join(lines, "\n") {
			t.Fatalf("%s shows\n%s\n%s shows\n%s", readmeDocs[0].file, strings.Join(lines, "\n"), d.file, strings.Join(l, "\n"))
		}
	}
	const export = "export LD_PRELOAD=$PWD/bin/libgoroce.so "
	if len(lines) < 2 || !strings.HasPrefix(lines[0], export) {
		t.Fatalf("the block does not start with %q: %q", export, lines)
	}
	last := strings.Fields(lines[len(lines)-1])
	if len(last) < 2 || last[0] != "ibv_rc_pingpong" {
		t.Fatalf("the block does not end with an ibv_rc_pingpong client: %q", lines)
	}
	lines[0] = "export LD_PRELOAD=" + lib + " " + strings.TrimPrefix(lines[0], export)
	last = append(last[:len(last)-1:len(last)-1], "-p", port, last[len(last)-1])
	lines[len(lines)-1] = strings.Join(last, " ")
	return strings.Join(lines, "\n") + "\n"
}

// TestReadmeLines: the README's and docs/libgoroce.md's lines are the
// same, and of the form TestVethReadme (root, a veth pair) runs; this
// test runs without either, so that an edit of the pages fails at once.
func TestReadmeLines(t *testing.T) {
	script := readmeScript(t, "18515")
	for _, want := range []string{"GOROCE_NETDEV=eth0\n", "\nibv_devices\n", "\nibv_devinfo -v\n", "\nibv_rc_pingpong -d goroce0 -g 1 -p 18515 192.0.2.2\n"} {
		if !strings.Contains(script, want) {
			t.Errorf("script %q lacks %q, which TestVethReadme's checks expect", script, want)
		}
	}
}
