package conform

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// knownDeviations are goroce's own deviations the suite has found and
// that are not fixed yet, each with what goroce does. They are reported
// (roced conform --self exits non-zero on them); TestSelf fails on any
// other deviation, and on a known one that no longer deviates, so that
// this list only shrinks.
var knownDeviations = map[string]string{}

// TestSelf runs the whole suite with goroce on both sides: a deviation of
// goroce's from the specification fails it.
func TestSelf(t *testing.T) {
	rs := RunSelf(Catalogue(), nil)
	if testing.Verbose() {
		WriteText(os.Stderr, rs)
	}
	if len(rs) < 60 {
		t.Errorf("%d cases", len(rs))
	}
	for _, r := range rs {
		why, known := knownDeviations[r.ID]
		switch {
		case r.Verdict == Deviation && known:
			t.Logf("known deviation %s: %s (%s)", r.ID, r.Observed, why)
		case r.Verdict != Pass:
			t.Errorf("%s (%s): %s: expected %s, observed %s", r.ID, r.Rule, r.Verdict, r.Expected, r.Observed)
		case known:
			t.Errorf("%s passes now: remove it from knownDeviations", r.ID)
		}
		if !r.PeerAlive {
			t.Errorf("%s: the peer no longer served a fresh QP", r.ID)
		}
	}
}

// TestCatalogue checks the catalogue itself: unique IDs, a rule, a role
// and at least one expectation for every case.
func TestCatalogue(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Catalogue() {
		if seen[c.ID] {
			t.Errorf("case %s twice", c.ID)
		}
		seen[c.ID] = true
		if c.Rule == "" || (c.Role != Requester && c.Role != Responder) || len(c.Expected) == 0 || c.run == nil {
			t.Errorf("case %s incomplete: %+v", c.ID, c)
		}
	}
}

// TestReport checks the text table and the JSON form with their fields as
// issue 16 names them.
func TestReport(t *testing.T) {
	rs := []Result{{ID: "a", Rule: "C9-105", Role: Responder, Expected: "ACK", Observed: "silent", Verdict: Deviation, PeerAlive: true}}
	var b bytes.Buffer
	if err := WriteJSON(&b, rs); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []map[string]any `json:"cases"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	want := []string{"id", "rule", "role", "expected", "observed", "verdict", "peer_alive"}
	if len(doc.Cases) != 1 || len(doc.Cases[0]) != len(want) {
		t.Fatalf("JSON %s", b.String())
	}
	for _, k := range want {
		if _, ok := doc.Cases[0][k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, b.String())
		}
	}
	b.Reset()
	if err := WriteText(&b, rs); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "1 cases: 0 pass, 1 deviation, 0 error") {
		t.Errorf("text:\n%s", b.String())
	}
}
