package conformance

import (
	"context"
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
