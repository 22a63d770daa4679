package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/profile"
	"github.com/goroce/goroce/internal/testharness"
)

// TestConformSelf runs roced conform --self as a user would: the table,
// the JSON file with issue 16's fields, and the exit status, which is 0
// exactly when every case passes.
func TestConformSelf(t *testing.T) {
	dir := t.TempDir()
	jf := filepath.Join(dir, "c.json")
	var out, errb bytes.Buffer
	rc := run([]string{"conform", "--self", "--json", jf}, &out, &errb)
	if errb.Len() != 0 {
		t.Fatalf("stderr: %s", errb.String())
	}
	cases := readConform(t, jf)
	if len(cases) < 60 {
		t.Fatalf("%d cases in the JSON", len(cases))
	}
	pass := 0
	for _, c := range cases {
		if c.ID == "" || c.Rule == "" || c.Expected == "" || c.Observed == "" || c.PeerAlive == nil ||
			(c.Role != "requester" && c.Role != "responder") {
			t.Errorf("incomplete case %+v", c)
		}
		if !strings.Contains(out.String(), c.ID) {
			t.Errorf("%s not in the table", c.ID)
		}
		if c.Verdict == "pass" {
			pass++
		}
	}
	if want := 0; pass != len(cases) {
		want = 1
		if rc != want {
			t.Errorf("exit %d with %d of %d passing, want %d", rc, pass, len(cases), want)
		}
	} else if rc != 0 {
		t.Errorf("exit %d with every case passing", rc)
	}
	out.Reset()
	if rc := run([]string{"conform", "--self", "--run", "^resp-send-only$"}, &out, &errb); rc != 0 ||
		!strings.Contains(out.String(), "1 cases: 1 pass, 0 deviation, 0 error") {
		t.Errorf("--run: exit %d:\n%s%s", rc, out.String(), errb.String())
	}
}

// TestConformBadInput: each mistake is one line on stderr and exit 2.
func TestConformBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"conform"},
		{"conform", "--bogus"},
		{"conform", "--self", "somehost"},
		{"conform", "--self", "--run", "("},
		{"conform", "--self", "--run", "no-such-case"},
		{"conform", "--self", "--json", filepath.Join(t.TempDir(), "no", "dir", "c.json")},
		{"conform", "--self", "--html", filepath.Join(t.TempDir(), "no", "dir", "c.html")},
	} {
		var out, errb bytes.Buffer
		rc := run(args, &out, &errb)
		msg := errb.String()
		if rc != 2 || out.Len() != 0 || strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "roced conform: ") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, rc, out.String(), msg)
		}
	}
}

// TestConformReadme runs the README's roced conform lines as written (in a
// temporary directory, for the JSON file) and checks what the README says
// of the run: its counts and its exit status.
func TestConformReadme(t *testing.T) {
	block, after := testharness.ReadmeShBlock(t, "../../docs/conformance.md", "## roced conform:")
	t.Chdir(t.TempDir())
	var summary string
	var selfRC int
	for _, l := range strings.Split(strings.TrimSpace(block), "\n") {
		l, _, _ = strings.Cut(l, "#")
		w := testharness.ShellWords(t, l)
		if len(w) < 2 || w[0] != "roced" || w[1] != "conform" {
			t.Fatalf("README line %q is not roced conform", l)
		}
		var out, errb bytes.Buffer
		rc := run(w[1:], &out, &errb)
		if errb.Len() != 0 {
			t.Errorf("%q: stderr %s", l, errb.String())
		}
		if strings.TrimSpace(l) == "roced conform --self" {
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			summary, selfRC = lines[len(lines)-1], rc
		} else if rc != 0 {
			t.Errorf("%q: exit %d:\n%s", l, rc, out.String())
		}
	}
	for _, f := range []string{"nak.json", "conform.html"} {
		if _, err := os.Stat(f); err != nil {
			t.Error(err)
		}
	}
	// "reports 67 cases, 67 passes and no deviations, and exits 0"
	m := regexp.MustCompile(`reports (\d+) cases,\s+(\d+) passes and (\w+) deviations?`).FindStringSubmatch(after)
	if m == nil {
		t.Fatal("README does not say what roced conform --self reports")
	}
	words := map[string]string{"no": "0", "one": "1", "two": "2"}
	n, pass, dev := m[1], m[2], words[m[3]]
	if want := n + " cases: " + pass + " pass, " + dev + " deviation, 0 error"; summary != want {
		t.Errorf("roced conform --self ends with %q; the README says %q", summary, want)
	}
	if (dev != "0") != (selfRC == 1) {
		t.Errorf("roced conform --self exits %d with %s deviations", selfRC, dev)
	}
}

// TestConformHTML: --html writes the page, with one ladder for the case
// and one arrow per packet (resp-psn-ahead: the stimulus, its NAK, the
// fence twice and its ACKs).
func TestConformHTML(t *testing.T) {
	hf := filepath.Join(t.TempDir(), "c.html")
	var out, errb bytes.Buffer
	if rc := run([]string{"conform", "--self", "--run", "^resp-psn-ahead$", "--html", hf}, &out, &errb); rc != 0 {
		t.Fatalf("exit %d: %s%s", rc, out.String(), errb.String())
	}
	b, err := os.ReadFile(hf)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	if n, a := strings.Count(page, "<svg "), strings.Count(page, `<g class="arrow"`); n != 1 || a != 6 {
		t.Errorf("%d ladders with %d arrows, want 1 with 6", n, a)
	}
	for _, want := range []string{"<!DOCTYPE html>", "resp-psn-ahead", "NAK PSN sequence error", "the suite&#39;s fence"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

// TestMain lets a test start this test binary as roced: with
// ROCED_TEST_MAIN=1 it runs its arguments as roced's command line.
func TestMain(m *testing.M) {
	if os.Getenv("ROCED_TEST_MAIN") == "1" {
		os.Exit(runProfiled(os.Args[1:], profile.FromEnv(), os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// conformCase is a case of roced conform's JSON report, as these tests
// read it.
type conformCase struct {
	ID, Rule, Role, Expected, Observed, Verdict string
	PeerTool                                    string `json:"peer_tool"`
	PeerAlive                                   *bool  `json:"peer_alive"`
}

// readConform reads the cases of the JSON report f.
func readConform(t *testing.T, f string) []conformCase {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Cases []conformCase `json:"cases"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	return d.Cases
}

// toolsAsProcesses skips under -short a test that runs roced's tools as
// real processes (make system runs it, without -race), and returns this
// test binary, which stands in for roced (TestMain).
func toolsAsProcesses(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("roced's tools as real processes: make system runs it, without -race")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// TestConformPeerLoopback runs roced conform --peer-exec against roced's
// own tools in a second process on loopback (the peer at 127.0.18.2, the
// suite at 127.0.18.1: addresses no other package's tests bind, as go test
// runs tools/pingpong's, on 127.0.0.1 and .2, beside these): the plumbing of
// the peer run without rxe. Each
// responder case (roced's tool a server) and each requester case (roced's
// tool a client of the suite, which plays the tool's server) must get the
// verdict --self gives it, and the peer serve a fresh QP afterwards; only
// the requester cases no tool can play are the verdict error, with what
// they need.
func TestConformPeerLoopback(t *testing.T) {
	exe := toolsAsProcesses(t)
	dir := t.TempDir()
	self, peer := filepath.Join(dir, "self.json"), filepath.Join(dir, "peer.json")
	var out, errb bytes.Buffer
	run([]string{"conform", "--self", "--json", self}, &out, &errb)
	out.Reset()
	rc := run([]string{"conform", "--peer-exec", "env ROCED_TEST_MAIN=1", "--peer-roced", exe, "--peer-dev", "127.0.18.2",
		"-d", "127.0.18.1", "--port", "19600", "--json", peer, "127.0.18.2"}, &out, &errb)
	if errb.Len() != 0 {
		t.Fatalf("exit %d, stderr: %s", rc, errb.String())
	}
	want := map[string]string{}
	for _, c := range readConform(t, self) {
		want[c.ID] = c.Verdict
	}
	cases := readConform(t, peer)
	// The requester cases goroce's requester.py plays, which this run
	// (roced's tools, no --peer-python) does not have: cmd/libgoroce's
	// TestConformRequesterScript runs them over pyverbs.
	noTool := map[string]bool{"req-implicit-ack-by-read-response": true, "req-rnr-retry-exhausted": true}
	errs := 0
	if len(cases) != len(want) {
		t.Fatalf("%d cases against the peer, %d with --self", len(cases), len(want))
	}
	for _, c := range cases {
		switch {
		case noTool[c.ID]:
			if c.Role != "requester" || c.Verdict != "error" || !strings.Contains(c.Observed, "--peer-python") || c.PeerTool != "requester.py" {
				t.Errorf("%s: %s %q", c.ID, c.Verdict, c.Observed)
			}
			errs++
		case c.Verdict != want[c.ID] || c.PeerAlive == nil || !*c.PeerAlive || c.PeerTool == "" || c.PeerTool == "none":
			t.Errorf("%s (%s): %s (--self: %s), peer alive %v, tool %q: %s", c.ID, c.Role, c.Verdict, want[c.ID], c.PeerAlive != nil && *c.PeerAlive, c.PeerTool, c.Observed)
		}
	}
	if errs != len(noTool) {
		t.Errorf("%d of the %d cases no tool plays were run", errs, len(noTool))
	}
	if rc != 1 {
		t.Errorf("exit %d with error verdicts", rc)
	}
}

// TestConformAckReadLate: req-ack-completes against rc_pingpong whose
// first ACK is held 300 ms on its way in (a fault rule, added by a
// wrapper the suite runs the tool through), well past the tool's local
// ACK timeout of 67 ms, so that a loaded host's late timers keep that
// order, and short of its 7 retries: its timer sends the SEND again
// before it reads the ACK, as a loaded tool's did in CI, and the ACK then
// completes it. The
// case passes and says so; a play that judged the timer's resend as the
// tool's reaction to the ACK called it a deviation ("waiting").
func TestConformAckReadLate(t *testing.T) {
	exe := toolsAsProcesses(t)
	dir := t.TempDir()
	wrap := filepath.Join(dir, "late-ack.sh")
	// The suite runs "timeout N ROCED rc_pingpong ARGS": the rule goes
	// after the tool's name.
	script := "#!/bin/sh\nt=$1 n=$2 exe=$3 tool=$4\nshift 4\n" +
		"ROCED_TEST_MAIN=1 exec \"$t\" \"$n\" \"$exe\" \"$tool\" --fault-rule 'rx opcode=ACKNOWLEDGE nth=1 delay=300ms' \"$@\"\n"
	if err := os.WriteFile(wrap, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	peer := filepath.Join(dir, "peer.json")
	var out, errb bytes.Buffer
	rc := run([]string{"conform", "--peer-exec", wrap, "--peer-roced", exe, "--peer-dev", "127.0.18.2",
		"-d", "127.0.18.1", "--port", "19640", "--run", "^req-ack-completes$", "--json", peer, "127.0.18.2"}, &out, &errb)
	if rc != 0 || errb.Len() != 0 {
		t.Fatalf("exit %d, stderr: %s\n%s", rc, errb.String(), out.String())
	}
	if cases := readConform(t, peer); len(cases) != 1 || cases[0].Verdict != "pass" || !strings.Contains(cases[0].Observed, "before it read the ACK") {
		t.Fatalf("want req-ack-completes passed, its timer's resend noted: %+v", cases)
	}
}

// peerRunner is the person of roced conform's printed-commands mode: it
// reads what roced prints and runs each "run on the peer:" line through
// sh as written, in the background, as a person would paste it into a
// shell on the peer.
type peerRunner struct {
	t    *testing.T
	env  []string
	mu   sync.Mutex
	buf  bytes.Buffer // what roced printed, whole
	part []byte       // the line not complete yet
	cmds []*peerCmd
}

type peerCmd struct {
	line    string
	cmd     *exec.Cmd
	out     bytes.Buffer
	started chan struct{} // closed once the process started
	done    chan error    // the process's end
	ended   chan struct{} // closed after done was sent
}

func (r *peerRunner) Write(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf.Write(b)
	r.part = append(r.part, b...)
	for {
		i := bytes.IndexByte(r.part, '\n')
		if i < 0 {
			return len(b), nil
		}
		line := string(r.part[:i])
		r.part = r.part[i+1:]
		cmdline, ok := strings.CutPrefix(line, "run on the peer: ")
		if !ok {
			continue
		}
		c := &peerCmd{line: cmdline, started: make(chan struct{}), done: make(chan error, 1), ended: make(chan struct{})}
		c.cmd = exec.Command("sh", "-c", cmdline)
		c.cmd.Env = r.env
		c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
		c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		var prev *peerCmd
		if len(r.cmds) > 0 {
			prev = r.cmds[len(r.cmds)-1]
		}
		r.cmds = append(r.cmds, c)
		// A person runs a printed command once the one before it has
		// ended: the two would share the peer's address and UDP port
		// 4791, and a loaded host can leave the first exiting while the
		// suite prints the second.
		go func() {
			defer close(c.ended)
			if prev != nil {
				<-prev.ended
			}
			if err := c.cmd.Start(); err != nil {
				r.t.Errorf("%q: %v", cmdline, err)
				c.done <- err
				return
			}
			close(c.started)
			c.done <- c.cmd.Wait()
		}()
	}
}

// wait waits for every command to end by itself (30 s each at most; a
// command still running then is ended, and the test fails).
func (r *peerRunner) wait() {
	r.mu.Lock()
	cmds := append([]*peerCmd(nil), r.cmds...)
	r.mu.Unlock()
	for _, c := range cmds {
		select {
		case <-c.done:
		case <-time.After(30 * time.Second):
			<-c.started
			_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			<-c.done
			r.t.Errorf("the printed command %q did not end by itself:\n%s", c.line, c.out.String())
		}
	}
}

// TestConformPrinted runs roced conform without --peer-exec, the printed
// commands run by peerRunner as a person would (roced's own tools as the
// peer, this test binary standing in for roced, on loopback, where
// TestConformPeerLoopback runs): each case that starts a tool gets the
// verdict --self gives it, so the printed lines are runnable as written
// and are what the suite needs; a requester case is the verdict error, as
// printed commands give back no exit status, and prints nothing.
func TestConformPrinted(t *testing.T) {
	exe := toolsAsProcesses(t)
	// One case per tool: rc_pingpong, ib_write_bw, ib_read_bw,
	// ib_atomic_bw, and ib_write_bw's missing receive.
	const sel = "^(resp-psn-ahead|resp-write-bad-rkey|resp-dup-read|resp-dup-atomic|resp-rnr-no-receive|req-ack-completes)$"
	dir := t.TempDir()
	self, peer := filepath.Join(dir, "self.json"), filepath.Join(dir, "peer.json")
	var out, errb bytes.Buffer
	run([]string{"conform", "--self", "--run", sel, "--json", self}, &out, &errb)
	r := &peerRunner{t: t, env: append(os.Environ(), "ROCED_TEST_MAIN=1")}
	// A printed command that fails leaves nobody listening: the suite
	// waits 20 s for it, not a person's 10 minutes.
	rc := run([]string{"conform", "--peer-roced", exe, "--peer-dev", "127.0.18.2", "-d", "127.0.18.1", "--port", "19900", "--peer-start", "20s",
		"--run", sel, "--json", peer, "127.0.18.2"}, r, &errb)
	r.wait()
	if errb.Len() != 0 {
		t.Fatalf("exit %d, stderr: %s", rc, errb.String())
	}
	observed := map[string]string{} // the printed run's, for a failure's message
	verdicts := func(f string, printed bool) map[string]string {
		m := map[string]string{}
		for _, c := range readConform(t, f) {
			m[c.ID] = c.Verdict
			if printed {
				observed[c.ID] = c.Observed
			}
			if printed && c.Role == "requester" && !strings.Contains(c.Observed, "printed commands") {
				t.Errorf("%s: %s", c.ID, c.Observed)
			}
		}
		return m
	}
	want, got := verdicts(self, false), verdicts(peer, true)
	if len(want) != 6 || len(got) != 6 {
		t.Fatalf("%d cases with --self, %d printed", len(want), len(got))
	}
	for id, v := range got {
		if id == "req-ack-completes" {
			v = "pass" // printed commands cannot judge it
		}
		if v != want[id] {
			t.Errorf("%s: %s (--self: %s); observed: %s", id, v, want[id], observed[id])
		}
	}
	// Each of the five responder cases printed its tool's command and
	// the fresh rc_pingpong of the check afterwards.
	if n := len(r.cmds); n != 10 {
		t.Errorf("%d commands printed and run, want 10:\n%s", n, r.buf.String())
	}
	if !strings.Contains(r.buf.String(), "run on the peer: timeout 60 "+exe+" rc_pingpong -d 127.0.18.2 -g 1 -p 19900 ") {
		t.Errorf("no rc_pingpong line as expected:\n%s", r.buf.String())
	}
}
