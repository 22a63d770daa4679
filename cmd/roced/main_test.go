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

// TestProcsFor: the latency tests run on one P unless GOMAXPROCS is set;
// every other command, and a bad or missing one, keeps the runtime's
// choice.
func TestProcsFor(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  string
		want int
	}{
		{[]string{"send_lat", "-s", "64"}, "", 1},
		{[]string{"write_lat"}, "", 1},
		{[]string{"read_lat"}, "", 1},
		{[]string{"atomic_lat"}, "", 1},
		{[]string{"send_lat"}, "2", 0},
		{[]string{"write_bw"}, "", 0},
		{[]string{"send_bw"}, "", 0},
		{[]string{"rc_pingpong"}, "", 0},
		{[]string{"no_such_command"}, "", 0},
		{nil, "", 0},
	} {
		if got := procsFor(c.args, c.env); got != c.want {
			t.Errorf("procsFor(%q, GOMAXPROCS=%q) = %d, want %d", c.args, c.env, got, c.want)
		}
	}
}
