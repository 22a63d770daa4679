package interop

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The repository's lab (lab/rxe-peer.sh) without a guest: what it says to
// bad input, how status reads its state directory, and exec's round trip
// through the spool, served by the guest's own execd run here. None of it
// needs root, qemu or an image; none of it may call down or pcap stop,
// which would signal processes or (execd) power a machine off.

const labScript = "../lab/rxe-peer.sh"

// runLab runs the lab script with env added and returns its stdout,
// stderr and exit status.
func runLab(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, labScript, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), errb.String(), 0
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitCode()
	}
	t.Fatalf("rxe-peer.sh %v: %v", args, err)
	return "", "", -1
}

// labEnv is a lab instance whose state directory is the test's own.
func labEnv(t *testing.T) (state string, env []string) {
	state = filepath.Join(t.TempDir(), "state")
	return state, []string{"RXE_PEER_STATE=" + state, "RXE_PEER_CACHE=" + filepath.Join(t.TempDir(), "cache")}
}

func TestLabScriptBadInput(t *testing.T) {
	_, env := labEnv(t)
	for _, c := range []struct {
		env  []string
		args []string
		want string // in the one line of stderr
	}{
		{nil, nil, "no command"},
		{nil, []string{"boot"}, "unknown command 'boot'"},
		{nil, []string{"build", "--fast"}, "unknown argument '--fast'"},
		{nil, []string{"build", "--force", "x"}, "at most --force"},
		{nil, []string{"up", "now"}, "up takes no arguments"},
		{nil, []string{"status", "-v"}, "status takes no arguments"},
		{nil, []string{"down", "-f"}, "down takes no arguments"},
		{nil, []string{"exec"}, "exec needs a command"},
		{nil, []string{"host-exec"}, "host-exec needs a command"},
		{nil, []string{"pcap"}, "start or stop"},
		{nil, []string{"pcap", "begin", "x"}, "start or stop, not 'begin'"},
		{nil, []string{"pcap", "start"}, "needs a NAME"},
		{nil, []string{"pcap", "start", "--host"}, "needs a NAME"},
		{nil, []string{"pcap", "start", "../x"}, "use only"},
		{[]string{"RXE_PEER_SUITE=sid"}, []string{"status"}, "RXE_PEER_SUITE=sid"},
		{[]string{"RXE_PEER_MTU=15OO"}, []string{"status"}, "RXE_PEER_MTU=15OO is not a positive number"},
		{[]string{"RXE_PEER_EXEC_TIMEOUT=0"}, []string{"exec", "true"}, "RXE_PEER_EXEC_TIMEOUT=0"},
	} {
		out, errOut, code := runLab(t, append(env[:len(env):len(env)], c.env...), c.args...)
		if code != 2 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v %v: exit %d, stdout %q, stderr %q; want exit 2 and one line saying %q", c.env, c.args, code, out, errOut, c.want)
		}
	}
}

func TestLabScriptHelp(t *testing.T) {
	_, env := labEnv(t)
	for _, arg := range []string{"help", "-h", "--help"} {
		out, _, code := runLab(t, env, arg)
		if code != 0 {
			t.Errorf("%s: exit %d", arg, code)
		}
		// Every command the harness and interop-lab.sh call.
		for _, c := range []string{"build", "up", "status", "exec", "host-exec", "pcap start", "pcap stop", "down"} {
			if !strings.Contains(out, "\n  "+c) {
				t.Errorf("%s does not list %q:\n%s", arg, c, out)
			}
		}
	}
}

// fakeVM starts a process whose command line carries the lab's VM name,
// as the lab's qemu does, and writes its pid where up would; it blocks
// on stdin until the test ends.
func fakeVM(t *testing.T, state string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", "read x", "-name", "goroce-rxe-lab", "-M", "pc")
	w, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(); cmd.Wait() })
	if err := os.MkdirAll(filepath.Join(state, "share", "spool"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "qemu.pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLabScriptStatus(t *testing.T) {
	state, env := labEnv(t)
	// No pid file: down, exit status 3, which the harness and
	// interop-lab.sh read as "not up".
	out, _, code := runLab(t, env, "status")
	if code != 3 || out != "state=down\n" {
		t.Errorf("no VM: exit %d, %q; want 3, state=down", code, out)
	}
	// A pid file naming a process that is not the lab's VM (here this
	// test): still down, so up never takes a stranger for the guest and
	// down never signals it.
	if err := os.MkdirAll(state, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(state, "qemu.pid"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
	if out, _, code := runLab(t, env, "status"); code != 3 || out != "state=down\n" {
		t.Errorf("a stranger's pid: exit %d, %q; want 3, state=down", code, out)
	}

	fakeVM(t, state)
	out, _, code = runLab(t, env, "status")
	if code != 0 || !strings.HasPrefix(out, "state=booting\n") {
		t.Errorf("VM without its ready file: exit %d, %q; want 0, state=booting", code, out)
	}
	ready := "kernel=6.12.1-amd64\nos=trixie\naddr=192.0.2.2/24\nrxe=rxe0\n"
	if err := os.WriteFile(filepath.Join(state, "share", "ready"), []byte(ready), 0o644); err != nil {
		t.Fatal(err)
	}
	// The harness's reading of it.
	t.Setenv("RXE_PEER_STATE", state)
	lab := NewLab("../lab")
	kv, ok := lab.Status(context.Background())
	if !ok || kv["guest_os"] != "trixie" || kv["guest_kernel"] != "6.12.1-amd64" || kv["tap"] != "rxetap0" {
		t.Errorf("Lab.Status = %v, %v", kv, ok)
	}
}

// exec's round trip: the script's spool request served by the guest's
// execd (lab/guest/execd), run here on a spool of the test's own.
func TestLabScriptExec(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatalf("the guest's execd is Python: %v", err)
	}
	state, env := labEnv(t)
	fakeVM(t, state)
	os.WriteFile(filepath.Join(state, "share", "ready"), []byte("os=bookworm\n"), 0o644)
	home := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	d := exec.CommandContext(ctx, "python3", "../lab/guest/execd", filepath.Join(state, "share", "spool"))
	d.Env = append(os.Environ(), "HOME="+home)
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); d.Wait() })

	out, errOut, code := runLab(t, env, "exec", `pwd; echo to-stderr >&2; exit 7`)
	if code != 7 || out != home+"\n" || errOut != "to-stderr\n" {
		t.Errorf("exec: exit %d, stdout %q, stderr %q; want 7, %q, to-stderr", code, out, errOut, home)
	}
	// The arguments are one command, as the harness's Guest runner passes it.
	out, _, code = runLab(t, env, "exec", "echo", "a  b", "c")
	if code != 0 || out != "a b c\n" {
		t.Errorf("exec echo: exit %d, %q", code, out)
	}
	// Requests run side by side: the second answers while the first waits
	// for it (a server started in one exec and its client in another).
	done := make(chan string, 1)
	go func() {
		o, _, _ := runLab(t, env, "exec", `for i in $(seq 500); do [ -e flag ] && { echo saw-flag; exit 0; }; sleep 0.02; done; echo no-flag`)
		done <- o
	}()
	if _, _, code := runLab(t, env, "exec", "touch flag"); code != 0 {
		t.Errorf("touch flag: exit %d", code)
	}
	if o := <-done; o != "saw-flag\n" {
		t.Errorf("first request: %q, want saw-flag", o)
	}
	// A signal's death is 128+N, as bash reports it.
	if _, _, code := runLab(t, env, "exec", "kill -TERM $$"); code != 128+15 {
		t.Errorf("kill -TERM: exit %d, want 143", code)
	}
	// Nothing left in the spool.
	left, _ := filepath.Glob(filepath.Join(state, "share", "spool", "*"))
	if len(left) != 0 {
		t.Errorf("spool after the requests: %v", left)
	}
}

func TestLabScriptExecDown(t *testing.T) {
	_, env := labEnv(t)
	_, errOut, code := runLab(t, env, "exec", "true")
	if code != 1 || !strings.Contains(errOut, "not up") {
		t.Errorf("exec without a guest: exit %d, %q", code, errOut)
	}
}

func TestDepsScript(t *testing.T) {
	run := func(args ...string) (string, string, int) {
		cmd := exec.Command("../scripts/deps", args...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return out.String(), errb.String(), cmd.ProcessState.ExitCode()
	}
	out, _, code := run("--list")
	pkgs := strings.Fields(out)
	if code != 0 || strings.Count(out, "\n") != 1 {
		t.Fatalf("--list: exit %d, %q", code, out)
	}
	// The lab's host side and what .ci/run installed before.
	for _, p := range []string{"qemu-system-x86", "debootstrap", "e2fsprogs", "util-linux", "iproute2", "tcpdump",
		"tshark", "libibverbs-dev", "librdmacm-dev", "rdmacm-utils", "python3-pyverbs", "perftest", "chromium"} {
		found := false
		for _, q := range pkgs {
			found = found || q == p
		}
		if !found {
			t.Errorf("--list lacks %s: %s", p, out)
		}
	}
	for _, args := range [][]string{{"--fix"}, {"--list", "--check"}} {
		if out, errOut, code := run(args...); code != 2 || out != "" || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and one line", args, code, out, errOut)
		}
	}
}

// Without -lab or RXE_PEER_DIR the harness uses the repository's own lab.
func TestFindLabDirDefault(t *testing.T) {
	t.Setenv("RXE_PEER_DIR", "")
	want, err := filepath.Abs("../lab")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := FindLabDir(""); err != nil || got != want {
		t.Errorf("FindLabDir(\"\") = %q, %v; want %s", got, err, want)
	}
}
