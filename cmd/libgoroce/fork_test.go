package main

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestFork runs testdata/fork_check.c preloaded: children forked by a
// parent that never used a device (qperf's server, fio's forked jobs)
// move data with each other, and the parent afterwards; a child forked
// while the parent holds a device, QP and region opens the same device
// (its address the parent's: the two share port 4791, the parent owning
// it and roced serve --auto relaying the child's) on an engine of its own
// and moves data with the parent; four generations, each
// forked after its parent used and closed the devices, move data, every
// child on an engine of its own. Before libgoroce.so was C,
// the first child's first verb waited forever (the Go runtime's threads
// are not in a forked child), which the bound below turns into a failure.
func TestFork(t *testing.T) {
	bin := buildC(t, "fork_check")
	for _, mode := range []string{"before", "after", "nested"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out, err := preloaded(ctx, addrA+","+addrB, bin, mode).CombinedOutput()
			if err != nil || !bytes.Contains(out, []byte("fork_check: ok")) {
				t.Fatalf("fork_check %s: %v\n%s", mode, err, out)
			}
		})
	}
}
