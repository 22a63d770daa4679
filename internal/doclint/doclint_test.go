package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestCheck: on testdata/src, doclint names exactly the identifiers whose
// names start with Bad (and never one from a test file, testdata or package
// main).
func TestCheck(t *testing.T) {
	m, err := walk(filepath.Join("testdata", "src"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, x := range m {
		got = append(got, x.name)
		if !strings.HasSuffix(x.pos.Filename, filepath.Join("lib", "lib.go")) {
			t.Errorf("%v: outside lib.go", x)
		}
	}
	want := []string{"Bad", "T.BadF", "BadT", "T.BadM", "T2.BadGeneric", "I.BadIM", "BadC4", "BadC6", "BadV", "BadG3"}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("found %v\nwant  %v", got, want)
	}
}

// TestModule: the module itself is clean, so that make vet's run and this
// test agree; a failure lists what lacks a comment.
func TestModule(t *testing.T) {
	m, err := walk(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range m {
		t.Error(x)
	}
}

// TestExit: the command exits 1 and says so on undocumented identifiers,
// 2 with a one-line error on a file that does not parse, 0 on a clean tree.
func TestExit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	bin := filepath.Join(t.TempDir(), "doclint")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	broken := t.TempDir()
	if err := os.WriteFile(filepath.Join(broken, "x.go"), []byte("package x\nfunc {"), 0o644); err != nil {
		t.Fatal(err)
	}
	clean := t.TempDir()
	if err := os.WriteFile(filepath.Join(clean, "x.go"), []byte("// Package x is clean.\npackage x\n\n// F is documented.\nfunc F() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir  string
		code int
		says string
	}{
		{filepath.Join("testdata", "src"), 1, "10 exported identifiers without a doc comment"},
		{broken, 2, "doclint: "},
		{clean, 0, ""},
	} {
		out, err := exec.Command(bin, c.dir).CombinedOutput()
		code := 0
		if e, ok := err.(*exec.ExitError); ok {
			code = e.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != c.code || !strings.Contains(string(out), c.says) {
			t.Errorf("doclint %s: exit %d, output %q; want exit %d saying %q", c.dir, code, out, c.code, c.says)
		}
	}
}
