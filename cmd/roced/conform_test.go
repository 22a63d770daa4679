package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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
	b, err := os.ReadFile(jf)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []struct {
			ID, Rule, Role, Expected, Observed, Verdict string
			PeerAlive                                   *bool `json:"peer_alive"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cases) < 60 {
		t.Fatalf("%d cases in the JSON", len(doc.Cases))
	}
	pass := 0
	for _, c := range doc.Cases {
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
	if want := 0; pass != len(doc.Cases) {
		want = 1
		if rc != want {
			t.Errorf("exit %d with %d of %d passing, want %d", rc, pass, len(doc.Cases), want)
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
	block, after := readmeShBlock(t, "### roced conform:")
	t.Chdir(t.TempDir())
	var summary string
	var selfRC int
	for _, l := range strings.Split(strings.TrimSpace(block), "\n") {
		l, _, _ = strings.Cut(l, "#")
		w := shellWords(t, l)
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
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestConformPeerLoopback runs roced conform --peer-exec against roced's
// own tools in a second process on loopback (the peer at 127.0.0.2, the
// suite at 127.0.0.1): the plumbing of the peer run without rxe. Each
// responder case (roced's tool a server) and each requester case (roced's
// tool a client of the suite, which plays the tool's server) must get the
// verdict --self gives it, and the peer serve a fresh QP afterwards; only
// the requester cases no tool can play are the verdict error, with what
// they need.
func TestConformPeerLoopback(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	self, peer := filepath.Join(dir, "self.json"), filepath.Join(dir, "peer.json")
	var out, errb bytes.Buffer
	run([]string{"conform", "--self", "--json", self}, &out, &errb)
	out.Reset()
	rc := run([]string{"conform", "--peer-exec", "env ROCED_TEST_MAIN=1", "--peer-roced", exe, "--peer-dev", "127.0.0.2",
		"-d", "127.0.0.1", "--port", "19600", "--json", peer, "127.0.0.2"}, &out, &errb)
	if errb.Len() != 0 {
		t.Fatalf("exit %d, stderr: %s", rc, errb.String())
	}
	type doc struct {
		Cases []struct {
			ID, Role, Observed, Verdict string
			PeerTool                    string `json:"peer_tool"`
			PeerAlive                   bool   `json:"peer_alive"`
		} `json:"cases"`
	}
	read := func(f string) doc {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d doc
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	want := map[string]string{}
	for _, c := range read(self).Cases {
		want[c.ID] = c.Verdict
	}
	d := read(peer)
	// The requester cases no tool's client can play (conform's reqNoTool).
	noTool := map[string]bool{"req-implicit-ack-by-read-response": true, "req-rnr-retry-exhausted": true}
	errs := 0
	if len(d.Cases) != len(want) {
		t.Fatalf("%d cases against the peer, %d with --self", len(d.Cases), len(want))
	}
	for _, c := range d.Cases {
		switch {
		case noTool[c.ID]:
			if c.Role != "requester" || c.Verdict != "error" || !strings.Contains(c.Observed, "needs") || c.PeerTool != "none" {
				t.Errorf("%s: %s %q", c.ID, c.Verdict, c.Observed)
			}
			errs++
		case c.Verdict != want[c.ID] || !c.PeerAlive || c.PeerTool == "" || c.PeerTool == "none":
			t.Errorf("%s (%s): %s (--self: %s), peer alive %v, tool %q: %s", c.ID, c.Role, c.Verdict, want[c.ID], c.PeerAlive, c.PeerTool, c.Observed)
		}
	}
	if errs != len(noTool) {
		t.Errorf("%d of the %d cases no tool plays were run", errs, len(noTool))
	}
	if rc != 1 {
		t.Errorf("exit %d with error verdicts", rc)
	}
}
