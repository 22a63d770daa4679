package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRun: a run as the table publishes it exits 0, one that differs 1
// with a line naming the case, bad input 2.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	readme := filepath.Join(dir, "README.md")
	os.WriteFile(readme, []byte("## rxe's conformance table\n| `a` | r | pass / deviation |\n| `b` | r | error / error |\n"), 0o644)
	good := filepath.Join(dir, "good.json")
	os.WriteFile(good, []byte(`{"cases":[{"id":"a","verdict":"pass"},{"id":"b","verdict":"error"}]}`), 0o644)
	var out, errb bytes.Buffer
	if rc := run([]string{"-readme", readme, "-suite", "bookworm", good}, &out, &errb); rc != 0 {
		t.Errorf("bookworm: exit %d: %s%s", rc, out.String(), errb.String())
	}
	out.Reset()
	if rc := run([]string{"-readme", readme, "-suite", "trixie", good}, &out, &errb); rc != 1 || !strings.Contains(out.String(), "DIFFERS a: pass, the table says deviation") {
		t.Errorf("trixie: exit %d: %s", rc, out.String())
	}
	for _, args := range [][]string{
		{"-readme", readme, good},
		{"-readme", readme, "-suite", "sid", good},
		{"-readme", filepath.Join(dir, "none.md"), "-suite", "bookworm", good},
		{"-readme", readme, "-suite", "bookworm", filepath.Join(dir, "none.json")},
		{"-readme", readme, "-suite", "bookworm", readme},
	} {
		if rc := run(args, &out, &errb); rc != 2 {
			t.Errorf("%v: exit %d", args, rc)
		}
	}
}
