package interop

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestSelfMatrix runs the whole matrix with roced on both ends: two roced
// processes on testAddrA and testAddrB, over kernel UDP on loopback. It
// needs no privilege and no VM, so every machine checks that goroce's
// thirteen tools agree with themselves in both roles, at every size, with
// the same judge as the lab run (both ends strict). $ROCED names a built
// binary; otherwise the test builds cmd/roced.
func TestSelfMatrix(t *testing.T) {
	t.Parallel() // beside TestRunFake: both mostly wait on processes
	roced := os.Getenv("ROCED")
	if roced == "" {
		roced = filepath.Join(t.TempDir(), "roced")
		gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
		out, err := exec.Command(gobin, "build", "-o", roced, "github.com/goroce/goroce/cmd/roced").CombinedOutput()
		if err != nil {
			t.Fatalf("building roced: %v\n%s", err, out)
		}
	}
	cases, err := Matrix(MatrixOptions{MTU: 1024})
	if err != nil {
		t.Fatal(err)
	}
	// Loopback is fast, so the real iteration counts cost little; the
	// timeouts are generous for a loaded CI machine running -race builds
	// of other packages beside this one.
	rep := Run(context.Background(), SelfPeer(roced, testAddrA, testAddrB, nil), cases, Options{
		Port: freePort(t), Timeout: 30 * time.Second, ListenTimeout: 15 * time.Second, Grace: 5 * time.Second,
		Artifacts: t.TempDir(),
	})
	if !rep.OK() {
		var b strings.Builder
		rep.WriteText(&b)
		t.Fatalf("roced against roced:\n%s", b.String())
	}
	t.Logf("%d cases passed in %.1fs", rep.Passed, rep.Seconds)
}
