package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pyverbsPython returns a python3 that imports pyverbs (Debian's
// python3-pyverbs is for the system's /usr/bin/python3, which another
// python3 first on PATH may hide), skipping the test without one.
func pyverbsPython(t *testing.T) string {
	t.Helper()
	cands := []string{"/usr/bin/python3"}
	if p, err := exec.LookPath("python3"); err == nil {
		cands = append([]string{p}, cands...)
	}
	for _, p := range cands {
		if exec.Command(p, "-c", "import pyverbs.device").Run() == nil {
			return p
		}
	}
	t.Skip("no python3 with pyverbs (Debian's python3-pyverbs; make deps installs it)")
	return ""
}

// TestConformRequesterScript runs the requester cases that goroce's
// requester.py plays (roced conform --peer-python) with the script over
// pyverbs over this library, against roced conform on loopback (the
// suite at 127.0.79.1, the peer at 127.0.79.2): the script's exchange,
// its QP's attributes and its report of how its work ended, which the
// lab's interop stage relies on against rxe. Each case must pass; and a
// script whose rnr_retry is one more than the case's must be a deviation,
// so that the case can fail.
func TestConformRequesterScript(t *testing.T) {
	py := pyverbsPython(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "requester.py")
	out, err := exec.Command(roced, "conform", "--requester-script").Output()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, out, 0o644); err != nil {
		t.Fatal(err)
	}
	wrong := filepath.Join(dir, "requester-rnr3.py")
	if !strings.Contains(string(out), `"rnr-retry-2": 2`) {
		t.Fatal(`the script does not set rnr_retry 2 as "rnr-retry-2": 2`)
	}
	if err := os.WriteFile(wrong, []byte(strings.Replace(string(out), `"rnr-retry-2": 2`, `"rnr-retry-2": 3`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	peerExec := "env PATH=" + filepath.Dir(py) + ":" + os.Getenv("PATH") + " LD_PRELOAD=" + lib + " GOROCE_NETDEV=127.0.79.2"
	run := func(script, cases string) map[string]string {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		js := filepath.Join(dir, "out.json")
		cmd := exec.CommandContext(ctx, roced, "conform", "--peer-exec", peerExec, "--peer-python", script,
			"--peer-dev", "goroce0", "--peer-gid", "1", "-d", "127.0.79.1", "--port", "19700", "--run", cases, "--json", js, "127.0.79.2")
		b, _ := cmd.CombinedOutput()
		var doc struct {
			Cases []struct{ ID, Verdict, Observed string } `json:"cases"`
		}
		raw, err := os.ReadFile(js)
		if err != nil || json.Unmarshal(raw, &doc) != nil {
			t.Fatalf("roced conform wrote no results (%v):\n%s", err, b)
		}
		got := map[string]string{}
		for _, c := range doc.Cases {
			got[c.ID] = c.Verdict
			t.Logf("%s: %s: %s", c.ID, c.Verdict, c.Observed)
		}
		return got
	}
	got := run(script, "^(req-implicit-ack-by-read-response|req-rnr-retry-exhausted)$")
	for _, id := range []string{"req-implicit-ack-by-read-response", "req-rnr-retry-exhausted"} {
		if got[id] != "pass" {
			t.Errorf("%s: %q, want pass", id, got[id])
		}
	}
	if v := run(wrong, "^req-rnr-retry-exhausted$")["req-rnr-retry-exhausted"]; v != "deviation" {
		t.Errorf("with rnr_retry 3 the case is %q, want deviation", v)
	}
}
