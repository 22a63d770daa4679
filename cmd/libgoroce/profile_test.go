package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestProfiles: a program over the library, with GOROCE_CPUPROFILE and
// GOROCE_BLOCKPROFILE set, leaves both profiles at its exit, "%p" its
// process ID.
func TestProfiles(t *testing.T) {
	devinfo := tool(t, "ibv_devinfo")
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := preloaded(ctx, addrA, devinfo)
	cmd.Env = append(cmd.Env, "GOROCE_CPUPROFILE="+filepath.Join(dir, "cpu-%p.pprof"), "GOROCE_BLOCKPROFILE="+filepath.Join(dir, "block-%p.pprof"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ibv_devinfo: %v\n%s", err, out)
	}
	for kind, want := range map[string]string{"cpu": "samples", "block": "contentions"} {
		files, _ := filepath.Glob(filepath.Join(dir, kind+"-*.pprof"))
		if len(files) != 1 || filepath.Base(files[0]) != kind+"-"+strconv.Itoa(cmd.Process.Pid)+".pprof" {
			t.Fatalf("%s profiles %v; want one, named by ibv_devinfo's PID %d", kind, files, cmd.Process.Pid)
		}
		f, err := os.Open(files[0])
		if err != nil {
			t.Fatal(err)
		}
		z, err := gzip.NewReader(f)
		if err != nil {
			t.Fatalf("%s: %v; want a profile", files[0], err)
		}
		b, err := io.ReadAll(z)
		f.Close()
		if err != nil || !bytes.Contains(b, []byte(want)) {
			t.Fatalf("%s: %v; want a %s profile (its sample type %q)", files[0], err, kind, want)
		}
	}
}
