package testharness

import (
	"runtime"
	"testing"
	"time"
)

// NoLeaks fails t if, once everything t set up has been torn down (its
// other cleanups run first: call NoLeaks before creating anything), more
// goroutines run than when it was called: a device, link or forwarder
// left something behind.
func NoLeaks(t testing.TB) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<20)
			t.Errorf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
		}
	})
}
