package conformance

import (
	"context"
	"os/exec"
	"strings"
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
