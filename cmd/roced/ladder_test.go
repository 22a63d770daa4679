package main

import (
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/testharness"
)

// TestDecodeLadder runs roced decode --ladder with its limits on the rxe
// capture with an RNR NAK and a sequence NAK.
func TestDecodeLadder(t *testing.T) {
	out, errOut, status := decodeOut(t, "--ladder", "--qp", "0x11", "--packets", "26-", "--count", "4",
		captures+"captures/send_bw_rnr_s64.pcap")
	if status != 0 {
		t.Fatalf("exit status %d: %s", status, errOut)
	}
	for _, want := range []string{
		"198.51.100.1", "QP 0x000011",
		"    26 ", "    29 ", "RNR NAK timer=12",
		"* receiver not ready for #26",
		"* sequence error: the responder expects psn 0xa05bf8",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "    30 ") || strings.Contains(out, "    25 ") {
		t.Errorf("--packets 26- --count 4 drew more than #26..#29:\n%s", out)
	}
	if !strings.Contains(errOut, "132 RoCEv2 packets, 4 drawn") {
		t.Errorf("stderr %q", errOut)
	}
	for _, args := range [][]string{
		{"--qp", "0x11", captures + "captures/send_bw_rnr_s64.pcap"},
		{"--ladder", "-v", captures + "captures/send_bw_rnr_s64.pcap"},
		{"--ladder", "--packets", "9-3", captures + "captures/send_bw_rnr_s64.pcap"},
		{"--ladder", "--qp", "x", captures + "captures/send_bw_rnr_s64.pcap"},
	} {
		if _, _, status := decodeOut(t, args...); status != 2 {
			t.Errorf("%v: exit status %d, want 2", args, status)
		}
	}
}

// TestLadderReadme runs the roced decode --ladder command of the README's
// tour and of docs/tools.md as written (from the repository's root) and
// compares its output with the block each shows after it.
func TestLadderReadme(t *testing.T) {
	for _, doc := range []struct{ file, heading string }{
		{"README.md", "### A capture decoded as a ladder"},
		{"docs/tools.md", "## Reading an exchange: `roced decode --ladder`"},
	} {
		t.Run(doc.file, func(t *testing.T) { checkLadderDoc(t, "../../"+doc.file, doc.heading) })
	}
}

// checkLadderDoc runs the sh block after heading in file and compares
// its output with the block file shows after it.
func checkLadderDoc(t *testing.T, file, heading string) {
	block, after := testharness.ReadmeShBlock(t, file, heading)
	w := testharness.ShellWords(t, strings.TrimSpace(block))
	if len(w) < 3 || w[0] != "roced" || w[1] != "decode" {
		t.Fatalf("%s's ladder command %q is not roced decode", file, block)
	}
	args := w[2:]
	args[len(args)-1] = "../../" + args[len(args)-1]
	out, errOut, status := decodeOut(t, args...)
	if status != 0 {
		t.Fatalf("exit status %d: %s", status, errOut)
	}
	_, shown, ok := strings.Cut(after, "```\n")
	shown, _, ok2 := strings.Cut(shown, "```")
	if !ok || !ok2 {
		t.Fatalf("%s shows no output after the ladder command", file)
	}
	if out != shown {
		t.Fatalf("%s shows\n%s\nthe command prints\n%s", file, shown, out)
	}
}
