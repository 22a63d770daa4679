package endpoint

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestHostQPNCounter: the counter is one word of a file that every
// process maps: a child process's draws move the parent's mapping on, and
// the values never repeat.
func TestHostQPNCounter(t *testing.T) {
	if path := os.Getenv("GOROCE_TEST_QPN_FILE"); path != "" {
		// The child: draw five values.
		c, err := mapCounter(path)
		if err != nil {
			t.Fatal(err)
		}
		for range 5 {
			c.Add(1)
		}
		return
	}
	dir := filepath.Join(t.TempDir(), "goroce")
	path := filepath.Join(dir, "qpn")
	c, err := mapCounter(path)
	if err != nil {
		t.Fatal(err)
	}
	if v := c.Add(1) - 1; v != 0 {
		t.Fatalf("a new counter starts at %d", v)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHostQPNCounter$")
	cmd.Env = append(os.Environ(), "GOROCE_TEST_QPN_FILE="+path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if v := c.Add(1) - 1; v != 6 {
		t.Fatalf("after the child's five draws the counter gave %d, want 6", v)
	}
	// Another mapping (a process started later) sees the same word.
	d, err := mapCounter(path)
	if err != nil {
		t.Fatal(err)
	}
	if v := d.Add(1) - 1; v != 7 {
		t.Fatalf("a new mapping gave %d, want 7", v)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("directory %v %v", fi.Mode(), err)
	}
}
