package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/bth/pcapfile"
	"github.com/goroce/goroce/oob/perftest"
	"github.com/goroce/goroce/oob/pingpong"
)

// shellWords splits a command line as sh would for the README's
// commands: words, 'single-quoted' strings, and a trailing &.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	for line = strings.TrimSpace(line); line != ""; line = strings.TrimSpace(line) {
		if line[0] == '\'' {
			end := strings.IndexByte(line[1:], '\'')
			if end < 0 {
				t.Fatalf("unclosed quote in %q", line)
			}
			words, line = append(words, line[1:end+1]), line[end+2:]
			continue
		}
		w, rest, _ := strings.Cut(line, " ")
		if w != "&" {
			words = append(words, w)
		}
		line = rest
	}
	return words
}

// readmeShBlock returns the first sh block of the README after heading,
// and the README's text after that block.
func readmeShBlock(t *testing.T, heading string) (block, after string) {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(readme), heading)
	_, block, ok2 := strings.Cut(sec, "```sh\n")
	block, after, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatalf("README has no sh block after %q", heading)
	}
	return block, after
}

// readmePingpongPair reads the README's two-line sh block after heading:
// a roced rc_pingpong server and a client that ends with the server's
// address 127.0.0.1. It returns each line's arguments after the tool's
// name (the client's without the address, which ppPair adds) and the
// environment the lines set before roced (both must set the same).
func readmePingpongPair(t *testing.T, heading string) (srv, cli []string, env map[string]string) {
	t.Helper()
	block, _ := readmeShBlock(t, heading)
	lines := strings.Split(strings.TrimSpace(block), "\n")
	if len(lines) != 2 {
		t.Fatalf("README's %q has no two-line sh block", heading)
	}
	var args [2][]string
	env = map[string]string{}
	for i, l := range lines {
		w := shellWords(t, l)
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
	if len(cli) == 0 || cli[len(cli)-1] != "127.0.0.1" {
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
	srvArgs, cli, env := readmePingpongPair(t, "### Faults: a peer that misbehaves on purpose")
	if len(env) != 0 {
		t.Fatalf("the Faults example sets %v", env)
	}
	pcap := filepath.Join(t.TempDir(), "faults.pcapng")
	for i, w := range cli {
		if w == "faults.pcapng" {
			cli[i] = pcap
		}
	}
	srv, c := ppPair(t, pingpong.RC, srvArgs, cli)
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
	quiet.stderr = ""                                 // checked above; ppCheck wants the rest as a plain run's
	ppCheck(t, pingpong.RC, 4096, 100, 1, srv, quiet) // the server, without faults, prints nothing on stderr
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
		if fr.SrcAddr().String() == "127.0.0.2" && len(b) >= 12 {
			psn := uint32(b[9])<<16 | uint32(b[10])<<8 | uint32(b[11])
			if seen[psn]++; seen[psn] == 2 {
				again++
			}
		}
	}
	if again == 0 {
		t.Fatal("the capture shows no retransmission")
	}
	// The ladder explains them: the sequence NAK the lost packet caused,
	// and the go-back-N it started.
	out, errOut, status := decodeOut(t, "--ladder", pcap)
	for _, want := range []string{"* sequence error: the responder expects psn", "* retransmission of psn", "go back after the NAK #"} {
		if status != 0 || !strings.Contains(out, want) {
			t.Fatalf("decode --ladder: exit status %d, no %q in\n%s\n%s", status, want, out, errOut)
		}
	}
}

// TestFaultsPerftest: the perftest tools take the same flags. The server
// duplicates and reorders what it receives and drops the client's 5th
// WRITE; the run still moves every byte, and each side's faults line
// says what it did (the client has none, so prints none).
func TestFaultsPerftest(t *testing.T) {
	srv, cli := pair(t, perftest.WriteBW,
		[]string{"--dup", "rx:0.05", "--reorder=rx:0.05", "--seed", "3", "--fault-rule", "rx opcode=RDMA_WRITE_ONLY nth=5 drop", "-s", "4096", "-n", "200"},
		[]string{"-s", "4096", "-n", "200"})
	if srv.code != 0 || cli.code != 0 {
		t.Fatalf("server:\n%v\nclient:\n%v", srv, cli)
	}
	re := regexp.MustCompile(`(?m)^faults: rx_lost=1 rx_duplicated=\d+ rx_reordered=\d+ rule1=1$`)
	if !re.MatchString(srv.errOut) || strings.Contains(cli.errOut, "faults:") {
		t.Fatalf("server:\n%v\nclient:\n%v", srv, cli)
	}
	if n := rows(srv.out, true); len(n) != 1 || n[0] != [2]uint64{4096, 200} {
		t.Fatalf("server rows %v", n)
	}
}

// TestFaultFlagErrors: a bad fault flag is answered with a line naming it
// (perftest adds its "Parser function exited with Error", as the real
// tool does) and a non-zero exit, before anything is opened.
func TestFaultFlagErrors(t *testing.T) {
	for _, args := range [][]string{{"--loss", "2"}, {"--fault-rule", "tx opcode=WRITE drop"}, {"--delay", "tx:soon"}} {
		var out, errb strings.Builder
		code := runPerftest(perftest.WriteBW, append(args, "127.0.0.1"), &out, &errb)
		first, _, _ := strings.Cut(errb.String(), "\n")
		if code == 0 || !strings.Contains(first, args[0]) || strings.Contains(errb.String(), "goroutine") {
			t.Errorf("write_bw %v: exit %d, stderr %q", args, code, errb.String())
		}
		o := ppExec(context.Background(), pingpong.RC, append(args, "127.0.0.1"))
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
	srvArgs, cli, env := readmePingpongPair(t, "### Several cores: receive queues")
	if env["GOROCE_RX_QUEUES"] == "" || env["GOROCE_BUSY_POLL"] == "" {
		t.Fatalf("the example sets %v, not both variables", env)
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	srv, c := ppPair(t, pingpong.RC, srvArgs, cli)
	ppCheck(t, pingpong.RC, 64, 2000, 1, srv, c)

	for _, bad := range [][2]string{{"GOROCE_RX_QUEUES", "0"}, {"GOROCE_BUSY_POLL", "fast"}} {
		t.Setenv(bad[0], bad[1])
		o := ppExec(context.Background(), pingpong.RC, []string{"-d", "127.0.0.1", "-g", "1"})
		if o.code != 1 || strings.Count(strings.TrimSpace(o.stderr), "\n") != 0 || !strings.Contains(o.stderr, bad[0]) {
			t.Errorf("%s=%s: exit %d, stderr %q; want 1 and one line naming it", bad[0], bad[1], o.code, o.stderr)
		}
		t.Setenv(bad[0], env[bad[0]])
	}
}
