package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestProfiled(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cpu.pprof")
	var stderr bytes.Buffer
	if code := profiled(file, &stderr, func() int { return 3 }); code != 3 || stderr.Len() != 0 {
		t.Fatalf("profiled: exit %d, stderr %q; want the function's 3 and nothing said", code, stderr.String())
	}
	if st, err := os.Stat(file); err != nil || st.Size() == 0 {
		t.Fatalf("profile: %v, want a non-empty file", err)
	}
	bad := filepath.Join(t.TempDir(), "no", "such", "dir", "cpu.pprof")
	if code := profiled(bad, &stderr, func() int { return 0 }); code != 0 || !strings.Contains(stderr.String(), "GOROCE_CPUPROFILE") {
		t.Fatalf("unwritable profile: exit %d, stderr %q; want the run to go on and say why", code, stderr.String())
	}
}
