package main

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"testing"

	"github.com/goroce/goroce/internal/profile"
)

// TestProfiled: GOROCE_CPUPROFILE and GOROCE_BLOCKPROFILE reach the run
// (internal/profile tests what is in the files).
func TestProfiled(t *testing.T) {
	dir := t.TempDir()
	e := profile.Env{CPU: filepath.Join(dir, "cpu.pprof"), Block: filepath.Join(dir, "block.pprof")}
	var stdout, stderr bytes.Buffer
	if code := runProfiled([]string{"help"}, e, &stdout, &stderr); code != 0 || stderr.Len() != 0 {
		t.Fatalf("roced help: exit %d, stderr %q; want 0 and nothing said", code, stderr.String())
	}
	for _, f := range []string{e.CPU, e.Block} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := gzip.NewReader(bytes.NewReader(b)); err != nil {
			t.Fatalf("%s: %v; want a profile", f, err)
		}
	}
}
