package main

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWritesPlot runs the command line docs/congestion.md shows (into a
// temporary file) and checks the SVG: well-formed, a polyline per flow
// and one for the queue, and the summary's fairness line.
func TestWritesPlot(t *testing.T) {
	out := filepath.Join(t.TempDir(), "congestion-fairness.svg")
	var stdout, stderr strings.Builder
	if code := run([]string{"-svg", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "Jain's index") || !strings.Contains(stdout.String(), "flow 1:") {
		t.Fatalf("summary: %s", stdout.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Lines []struct {
			Points string `xml:"points,attr"`
		} `xml:"polyline"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("not XML: %v", err)
	}
	if len(doc.Lines) != 3 {
		t.Fatalf("%d polylines, want 3 (two flows and the queue)", len(doc.Lines))
	}
	for _, l := range doc.Lines {
		if n := len(strings.Fields(l.Points)); n != 200 {
			t.Fatalf("a polyline of %d points, want 200 (1 ms samples over 200 ms)", n)
		}
	}
}

// A capture that is not there is a one-line error and exit 1.
func TestMissingCapture(t *testing.T) {
	var stdout, stderr strings.Builder
	dir := t.TempDir()
	code := run([]string{"-in", filepath.Join(dir, "in.pcap"), "-out", filepath.Join(dir, "out.pcap"), "-rate", "40", "-svg", filepath.Join(dir, "x.svg")}, &stdout, &stderr)
	if code != 1 || strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 || !strings.Contains(stderr.String(), "in.pcap") {
		t.Fatalf("exit %d, stderr %q; want 1 and one line naming the file", code, stderr.String())
	}
}

func TestBadInput(t *testing.T) {
	for _, args := range [][]string{{}, {"-svg", "x.svg", "-flows", "0"}, {"-svg", "x.svg", "-cc", "off"},
		{"-svg", "x.svg", "-cc", "rp_ai_rate=x"}, {"-svg", "x.svg", "extra"},
		{"-in", "a.pcap", "-svg", "x.svg", "-rate", "40"}, {"-in", "a.pcap", "-out", "b.pcap", "-svg", "x.svg"},
		{"-in", "a.pcap", "-out", "b.pcap", "-rate", "40"}, {"-in", "a.pcap", "-out", "b.pcap", "-svg", "x.svg", "-rate", "40", "-kmin", "9", "-kmax", "8"},
		{"-in", "a.pcap", "-out", "b.pcap", "-svg", "x.svg", "-rate", "40", "-sample", "0s"}} {
		var stdout, stderr strings.Builder
		if code := run(args, &stdout, &stderr); code != 2 || strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 {
			t.Errorf("%q: exit %d, stderr %q; want 2 and one line", args, code, stderr.String())
		}
	}
}
