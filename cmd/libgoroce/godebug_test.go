package main

import (
	"debug/buildinfo"
	"path/filepath"
	"strings"
	"testing"
)

// TestEngineNoAsyncPreempt: the engine is built with asyncpreemptoff=1
// among its runtime's GODEBUG defaults (scripts/build-libgoroce.sh), so
// that no preemption signal reaches a program's thread after it left the
// engine and blocked in poll(2) (EINTR); and the module's own defaults
// are kept beside it.
func TestEngineNoAsyncPreempt(t *testing.T) {
	info, err := buildinfo.ReadFile(filepath.Join(filepath.Dir(lib), "libgoroce-engine.so"))
	if err != nil {
		t.Fatal(err)
	}
	var ldflags, defaults string
	for _, s := range info.Settings {
		switch s.Key {
		case "-ldflags":
			ldflags = s.Value
		case "DefaultGODEBUG":
			defaults = s.Value
		}
	}
	const x = "-X=runtime.godebugDefault="
	i := strings.Index(ldflags, x)
	if i < 0 {
		t.Fatalf("the engine's -ldflags %q set no runtime.godebugDefault", ldflags)
	}
	set := strings.Fields(ldflags[i+len(x):])[0]
	want := "asyncpreemptoff=1"
	if defaults != "" {
		want = defaults + "," + want
	}
	if set != want {
		t.Fatalf("the engine's runtime.godebugDefault is %q, want %q", set, want)
	}
}
