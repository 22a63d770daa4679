package pingpong

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/bth/pcapfile"
	"github.com/goroce/goroce/internal/testharness"
	"github.com/goroce/goroce/ladder"
)

// readmeSrv and readmeCli are the addresses of the README's examples,
// which its tests run as written: unlike the package's own (ppSrv,
// ppCli), other packages' tests bind them too, so these tests need the
// packages run one at a time, as make does (flock).
const readmeSrv, readmeCli = "127.0.0.1", "127.0.0.2"

// readmePingpongPair reads the two-line sh block after heading in file
// (README.md or a page of docs/, from the repository's root):
// a roced rc_pingpong server and a client that ends with the server's
// address 127.0.0.1. It returns each line's arguments after the tool's
// name (the client's without the address, which ppPair adds) and the
// environment the lines set before roced (both must set the same).
func readmePingpongPair(t *testing.T, file, heading string) (srv, cli []string, env map[string]string) {
	t.Helper()
	block, _ := testharness.ReadmeShBlock(t, "../../"+file, heading)
	lines := strings.Split(strings.TrimSpace(block), "\n")
	if len(lines) != 2 {
		t.Fatalf("README's %q has no two-line sh block", heading)
	}
	var args [2][]string
	env = map[string]string{}
	for i, l := range lines {
		w := testharness.ShellWords(t, l)
		for len(w) > 0 && strings.Contains(w[0], "=") {
			k, v, _ := strings.Cut(w[0], "=")
			if old, ok := env[k]; ok && old != v {
				t.Fatalf("the two lines set %s differently", k)
			}
			env[k], w = v, w[1:]
		}
		if len(w) < 2 || w[0] != "roced" || w[1] != "rc_pingpong" {
			t.Fatalf("README line %q is not roced rc_pingpong", l)
		}
		args[i] = w[2:]
	}
	cli = args[1]
	if len(cli) == 0 || cli[len(cli)-1] != readmeSrv {
		t.Fatalf("the client line does not end with the server's address: %q", lines[1])
	}
	return args[0], cli[:len(cli)-1], env
}

// TestFaultsReadme runs the README's fault example as written (the
// harness adds its own TCP port; -d and the host stay the README's) and
// checks what the README says of it: both sides finish with checked data,
// the client's last line counts the rule's one drop, and the capture
// shows a retransmission.
func TestFaultsReadme(t *testing.T) {
	srvArgs, cli, env := readmePingpongPair(t, "docs/tools.md", "## Faults: a peer that misbehaves on purpose")
	if len(env) != 0 {
		t.Fatalf("the Faults example sets %v", env)
	}
	pcap := filepath.Join(t.TempDir(), "faults.pcapng")
	for i, w := range cli {
		if w == "faults.pcapng" {
			cli[i] = pcap
		}
	}
	srv, c := ppPairOn(t, RC, readmeSrv, readmeCli, srvArgs, cli)
	if srv.code != 0 || c.code != 0 {
		t.Fatalf("server:\n%v\nclient:\n%v", srv, c)
	}
	errLines := strings.Split(strings.TrimSpace(c.stderr), "\n")
	if last := errLines[len(errLines)-1]; !regexp.MustCompile(`^faults: tx_lost=\d+ rule1=1$`).MatchString(last) {
		t.Fatalf("client's last stderr line %q, want faults: tx_lost=N rule1=1\n%v", last, c)
	}
	if !strings.Contains(c.stderr, "fault: rule 1 (tx opcode=SEND_MIDDLE nth=3 drop) fired on tx RC SEND Middle") {
		t.Fatalf("the rule's firing is not logged:\n%s", c.stderr)
	}
	quiet := c
	quiet.stderr = ""                                                // checked above; ppCheck wants the rest as a plain run's
	ppCheckOn(t, RC, readmeSrv, readmeCli, 4096, 100, 1, srv, quiet) // the server, without faults, prints nothing on stderr
	// The capture holds a SEND Middle PSN twice: the lost one resent.
	f, err := os.Open(pcap)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapfile.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint32]int{}
	again := 0
	for {
		p, err := r.Next()
		if err != nil {
			break
		}
		fr, err := bth.DecodeLink(bth.LinkType(p.LinkType), p.Data)
		if err != nil {
			continue
		}
		b := fr.RoCE()
		if fr.SrcAddr().String() == readmeCli && len(b) >= 12 {
			psn := uint32(b[9])<<16 | uint32(b[10])<<8 | uint32(b[11])
			if seen[psn]++; seen[psn] == 2 {
				again++
			}
		}
	}
	if again == 0 {
		t.Fatal("the capture shows no retransmission")
	}
	// The ladder (roced decode --ladder's, package ladder) explains them:
	// the sequence NAK the lost packet caused, and the go-back-N it
	// started.
	var l ladder.Ladder
	var out strings.Builder
	if _, err = f.Seek(0, io.SeekStart); err == nil {
		if err = l.ReadPcap(f); err == nil {
			err = l.Diagram().WriteText(&out)
		}
	}
	for _, want := range []string{"* sequence error: the responder expects psn", "* retransmission of psn", "go back after the NAK #"} {
		if err != nil || !strings.Contains(out.String(), want) {
			t.Fatalf("ladder: %v, no %q in\n%s", err, want, out.String())
		}
	}
}

// TestFaultFlagErrors: a bad fault flag is answered with a line naming it
// and a non-zero exit, before anything is opened (tools/perftest's test of
// the same name runs the same flags through the perftest tools).
func TestFaultFlagErrors(t *testing.T) {
	for _, args := range [][]string{{"--loss", "2"}, {"--fault-rule", "tx opcode=WRITE drop"}, {"--delay", "tx:soon"}} {
		o := ppExec(context.Background(), RC, append(args, "127.0.19.1"))
		if o.code == 0 || !strings.Contains(o.stderr, args[0]) || strings.Contains(o.stderr, "goroutine") {
			t.Errorf("rc_pingpong %v: %v", args, o)
		}
	}
}

// TestTuningReadme runs the README's receive-queue example as written:
// each line's environment (two queues, busy polling) and flags; both
// sides exchange their checked messages as a plain run does. A bad value
// of either variable is a one-line error and exit status 1.
func TestTuningReadme(t *testing.T) {
	srvArgs, cli, env := readmePingpongPair(t, "docs/performance.md", "### Several cores: receive queues")
	if env["GOROCE_RX_QUEUES"] == "" || env["GOROCE_BUSY_POLL"] == "" {
		t.Fatalf("the example sets %v, not both variables", env)
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	srv, c := ppPairOn(t, RC, readmeSrv, readmeCli, srvArgs, cli)
	ppCheckOn(t, RC, readmeSrv, readmeCli, 64, 2000, 1, srv, c)

	for _, bad := range [][2]string{{"GOROCE_RX_QUEUES", "0"}, {"GOROCE_BUSY_POLL", "fast"}} {
		t.Setenv(bad[0], bad[1])
		o := ppExec(context.Background(), RC, []string{"-d", "127.0.19.1", "-g", "1"})
		if o.code != 1 || strings.Count(strings.TrimSpace(o.stderr), "\n") != 0 || !strings.Contains(o.stderr, bad[0]) {
			t.Errorf("%s=%s: exit %d, stderr %q; want 1 and one line naming it", bad[0], bad[1], o.code, o.stderr)
		}
		t.Setenv(bad[0], env[bad[0]])
	}
}

// TestTourReadme runs the ping-pong of the README's tour as written (the
// harness adds its own TCP port, and starts the client once the server
// listens, as the README tells a reader to) and checks both sides' data.
func TestTourReadme(t *testing.T) {
	srvArgs, cli, env := readmePingpongPair(t, "README.md", "### A ping-pong")
	if len(env) != 0 {
		t.Fatalf("the tour's lines set %v", env)
	}
	srv, c := ppPairOn(t, RC, readmeSrv, readmeCli, srvArgs, cli)
	ppCheckOn(t, RC, readmeSrv, readmeCli, 64, 2000, 1, srv, c)
}

// TestPollModeReadme runs the README's poll-mode example as written (the
// harness adds its own TCP port) and checks both sides' data, and that a
// bad value of the variable is a one-line error.
func TestPollModeReadme(t *testing.T) {
	srvArgs, cli, env := readmePingpongPair(t, "docs/performance.md", "### Poll mode: the polling thread handles its packets")
	if env["GOROCE_POLL_MODE"] != "1" {
		t.Fatalf("the example sets %v, not GOROCE_POLL_MODE=1", env)
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	srv, c := ppPairOn(t, RC, readmeSrv, readmeCli, srvArgs, cli)
	ppCheckOn(t, RC, readmeSrv, readmeCli, 64, 2000, 1, srv, c)

	t.Setenv("GOROCE_POLL_MODE", "on")
	o := ppExec(context.Background(), RC, []string{"-d", "127.0.19.1", "-g", "1"})
	if o.code != 1 || strings.Count(strings.TrimSpace(o.stderr), "\n") != 0 || !strings.Contains(o.stderr, "GOROCE_POLL_MODE") {
		t.Errorf("GOROCE_POLL_MODE=on: exit %d, stderr %q; want 1 and one line naming it", o.code, o.stderr)
	}
}
