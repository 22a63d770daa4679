package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/goroce/goroce/internal/endpoint"
	"github.com/goroce/goroce/interop"
)

// TestRdmaCoreSuite runs rdma-core's own test suite (Debian's
// python3-pyverbs ships it) with /usr/bin/python3 over the library, on
// goroce0 over eth0 of a network namespace (the suite needs the device's
// net interface), as interop.RdmaCoreSuiteScript runs it on rxe0 in
// the lab. The rdmacm tests fork a passive and an active process on the
// address the parent already opened: the port's owner and roced serve
// --auto share it with no step of the test's. It holds the run to both
// committed references, rxe0 on the bookworm and trixie guests
// (interop/rdmacore-suite.sh wrote them): no crash, failure or error;
// no skip rxe does not share but those of interop.RdmaCoreGaps; at
// least rxe's pass count over the tests both have. It needs root (the
// namespace) and is skipped by -short (make test's system stage runs it).
func TestRdmaCoreSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("rdma-core's suite takes minutes: make test's system stage runs it")
	}
	if _, err := os.Stat("/usr/share/doc/rdma-core/tests/run_tests.py"); err != nil {
		t.Skipf("rdma-core's tests are not installed (Debian's python3-pyverbs; make deps installs it): %v", err)
	}
	refs := map[string]interop.UnittestRun{}
	for _, suite := range []string{"bookworm", "trixie"} {
		b, err := os.ReadFile(filepath.Join("../../interop/testdata/rdma-core", "rxe0-"+suite+".txt"))
		if err != nil {
			t.Fatal(err)
		}
		r, err := interop.ParseUnittest(interop.Output{Stdout: string(b)})
		if err != nil {
			t.Fatalf("rxe0-%s.txt: %v", suite, err)
		}
		refs[suite] = r
	}
	p := readmeVeth(t)
	ctx, cancel := context.WithTimeout(context.Background(), interop.RdmaCoreSuiteTimeout)
	defer cancel()
	var out []byte
	err := p.A.Do(func() error {
		cmd := exec.CommandContext(ctx, "sh", "-c", interop.RdmaCoreSuiteScript("goroce0"))
		cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib, "GOROCE_NETDEV=eth0",
			"XDG_RUNTIME_DIR="+t.TempDir(), endpoint.EnvRoced+"="+roced)
		var err error
		out, err = cmd.CombinedOutput()
		return err
	})
	// The script's status is the suite's: judged below, test by test.
	if ctx.Err() != nil {
		t.Fatalf("the suite did not end in %v (%v):\n%s", interop.RdmaCoreSuiteTimeout, err, out)
	}
	g, perr := interop.ParseUnittest(interop.Output{Stdout: string(out)})
	if perr != nil {
		t.Fatalf("the run: %v (exit %v):\n%s", perr, err, out)
	}
	for _, suite := range []string{"bookworm", "trixie"} {
		reasons, notes := interop.CompareSuites(refs[suite], g)
		t.Logf("against %s's rxe0: %v", suite, notes)
		for _, r := range reasons {
			t.Errorf("against %s's rxe0: %s", suite, r)
		}
	}
	if t.Failed() {
		t.Logf("the run:\n%s", out)
	}
}
