package interop

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestShellJoinRoundTrip(t *testing.T) {
	// Every argv must reach the far side unchanged through one shell.
	for _, argv := range [][]string{
		{"ib_write_bw", "-d", "rxe0", "-x", "1", "192.0.2.1"},
		{"a b", "it's", `"q"`, "$HOME", "`id`", "*", "", "x;y", "\\", "tab\there", "new\nline"},
	} {
		script := "for a in " + ShellJoin(argv) + `; do printf '%s\0' "$a"; done`
		out, err := exec.Command("sh", "-c", script).Output()
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
		if strings.Join(got, "|") != strings.Join(argv, "|") {
			t.Errorf("through sh: %q, want %q", got, argv)
		}
	}
	if got := ShellJoin([]string{"roced", "write_bw", "-d", "198.18.15.1", "--link=udp"}); got != "roced write_bw -d 198.18.15.1 --link=udp" {
		t.Errorf("plain words quoted: %s", got)
	}
}

func TestShellRunner(t *testing.T) {
	r := LocalRunner()
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		argv     []string
		timeout  time.Duration
		stop     bool
		exit     int
		timedOut bool
		stopped  bool
		stdout   string
		stderr   string
	}{
		{name: "output and status", argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, timeout: 5 * time.Second,
			exit: 3, stdout: "out\n", stderr: "err\n"},
		{name: "timeout", argv: []string{"sleep", "30"}, timeout: time.Second, exit: 124, timedOut: true},
		{name: "stop", argv: []string{"sleep", "30"}, timeout: 30 * time.Second, stop: true, exit: -1, stopped: true},
		{name: "missing program", argv: []string{"/nonexistent/roced"}, timeout: 5 * time.Second, exit: 127},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			p := r.Start(ctx, tc.argv, tc.timeout)
			if tc.stop {
				time.Sleep(200 * time.Millisecond)
				p.Stop()
			}
			o := p.Wait()
			if tc.stop && o.Exit == 128+15 {
				// SIGTERM reached timeout(1) before it had started the
				// command, and it exits 128+15 then: a loaded machine can
				// take longer than the 200 ms above to get that far.
				o.Exit = -1
			}
			if o.Exit != tc.exit || o.TimedOut != tc.timedOut || o.Stopped != tc.stopped ||
				o.Stdout != tc.stdout || (tc.stderr != "" && o.Stderr != tc.stderr) {
				t.Errorf("got %+v", o)
			}
			if time.Since(start) > 10*time.Second {
				t.Errorf("took %v", time.Since(start))
			}
			select {
			case <-p.Done():
			default:
				t.Error("Done not closed after Wait")
			}
		})
	}
}

func TestWaitListenGivesUp(t *testing.T) {
	start := time.Now()
	err := LocalRunner().WaitListen(context.Background(), freePort(t), time.Second)
	if err == nil || !strings.Contains(err.Error(), "nothing listens on TCP port") {
		t.Fatalf("err %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("gave up after %v", d)
	}
}

// TestStopReachesTheTool runs the command behind an extra shell, as
// rxe-peer.sh host-exec and ip netns exec put it: timeout(1) is then not
// the process group leader, and Stop must still end the tool (and Wait
// must not hang on a survivor's output pipe).
func TestStopReachesTheTool(t *testing.T) {
	r := &ShellRunner{Name: "wrapped", Backstop: 10 * time.Second,
		Wrap: func(s string) []string { return []string{"sh", "-c", `sh -c "$1"; true`, "wrapper", s} }}
	pidFile := filepath.Join(t.TempDir(), "pid")
	p := r.Start(context.Background(), []string{"sh", "-c", `echo $$ > "$1"; exec sleep 60`, "tool", pidFile}, time.Minute)
	var pid int
	for i := 0; i < 100 && pid == 0; i++ {
		time.Sleep(20 * time.Millisecond)
		if b, err := os.ReadFile(pidFile); err == nil {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
	}
	if pid == 0 {
		t.Fatal("the tool did not start")
	}
	start := time.Now()
	p.Stop()
	o := p.Wait()
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("Stop and Wait took %v", d)
	}
	if !o.Stopped {
		t.Errorf("output %+v not marked stopped", o)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("the tool (pid %d) survived Stop", pid)
	}
}

// TestRemoteRunner drives the remote path (pid file, kill by pid, listener
// wait, cleanup) through a stand-in ssh that runs the command here, as
// ssh would on the far host: options dropped, the rest to a shell.
func TestRemoteRunner(t *testing.T) {
	bin := t.TempDir()
	fake := "#!/bin/sh\nwhile [ $# -gt 0 ]; do case \"$1\" in -o) shift 2;; -*) shift;; *) break;; esac; done\nshift\nexec sh -c \"$*\"\n"
	if err := os.WriteFile(filepath.Join(bin, "ssh"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	r := SSHRunner("hca-host", nil)
	ctx := context.Background()
	pidFiles := func() []string {
		f, _ := filepath.Glob("/tmp/goroce-conformance-*.pid")
		return f
	}
	before := pidFiles()

	o := r.Start(ctx, []string{"sh", "-c", "echo far side; exit 4"}, 5*time.Second).Wait()
	if o.Exit != 4 || o.Stdout != "far side\n" || o.Where != "ssh hca-host" {
		t.Errorf("got %+v", o)
	}

	pidFile := filepath.Join(t.TempDir(), "pid")
	p := r.Start(ctx, []string{"sh", "-c", `echo $$ > "$1"; exec sleep 60`, "tool", pidFile}, time.Minute)
	var pid int
	for i := 0; i < 100 && pid == 0; i++ {
		time.Sleep(20 * time.Millisecond)
		if b, err := os.ReadFile(pidFile); err == nil {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
	}
	if pid == 0 {
		t.Fatal("the tool did not start")
	}
	start := time.Now()
	p.Stop()
	o = p.Wait()
	// The kill by pid file ends it at once; only the fallback (killing
	// the local ssh after 5 s) would take longer.
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("Stop took %v: the remote kill did not reach the tool", d)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("the tool (pid %d) survived Stop", pid)
	}
	if after := pidFiles(); len(after) > len(before) {
		t.Errorf("pid files left behind: %v (before: %v)", after, before)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := r.WaitListen(ctx, ln.Addr().(*net.TCPAddr).Port, 5*time.Second); err != nil {
		t.Errorf("WaitListen with a listener: %v", err)
	}
}
