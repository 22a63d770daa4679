package profile

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
)

// pingpong blocks: two goroutines hand a token back and forth until the
// runtime has recorded a wait, however the scheduler runs them (nearly
// every exchange waits; a million that record none is a profile off).
func pingpong() bool {
	for i := 0; i < 1e6; i++ {
		if pprof.Lookup("block").Count() != 0 {
			return true
		}
		ping, pong := make(chan int), make(chan int)
		go func() { pong <- <-ping }()
		ping <- 1
		<-pong
	}
	return false
}

// read returns a profile file's decompressed protobuf.
func read(t *testing.T, file string) []byte {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v; want a gzipped profile as pprof writes", file, err)
	}
	b, err := io.ReadAll(z)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestStart(t *testing.T) {
	dir := t.TempDir()
	var w bytes.Buffer
	stop := Start(Env{CPU: filepath.Join(dir, "cpu-%p.pprof"), Block: filepath.Join(dir, "block.pprof")}, "test", &w)
	if !pingpong() {
		t.Fatal("the runtime recorded no wait: the block profile is off")
	}
	stop()
	stop() // once
	if w.Len() != 0 {
		t.Fatalf("said %q; want nothing", w.String())
	}
	if b := read(t, filepath.Join(dir, "block.pprof")); !bytes.Contains(b, []byte("profile.pingpong")) {
		t.Fatalf("the block profile names no wait in pingpong")
	}
	read(t, filepath.Join(dir, "cpu-"+strconv.Itoa(os.Getpid())+".pprof"))
}

func TestStartUnwritable(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "no", "such", "dir", "x.pprof")
	var w bytes.Buffer
	stop := Start(Env{CPU: bad, Block: bad}, "test", &w)
	stop()
	for _, env := range []string{"test: GOROCE_CPUPROFILE: ", "test: GOROCE_BLOCKPROFILE: "} {
		if !strings.Contains(w.String(), env) {
			t.Errorf("said %q; want a line starting %q", w.String(), env)
		}
	}
}

func TestStartNone(t *testing.T) {
	var w bytes.Buffer
	Start(Env{}, "test", &w)()
	if w.Len() != 0 {
		t.Fatalf("said %q; want nothing", w.String())
	}
}
