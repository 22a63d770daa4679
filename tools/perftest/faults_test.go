package perftest

import (
	"context"
	"regexp"
	"strings"
	"testing"
)

// TestFaultsPerftest: the perftest tools take the same flags. The server
// duplicates and reorders what it receives and drops the client's 5th
// WRITE; the run still moves every byte, and each side's faults line
// says what it did (the client has none, so prints none).
func TestFaultsPerftest(t *testing.T) {
	srv, cli := pair(t, WriteBW,
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
// tool does) and a non-zero exit, before anything is opened (tools/pingpong's
// test of the same name runs the same flags through rc_pingpong).
func TestFaultFlagErrors(t *testing.T) {
	for _, args := range [][]string{{"--loss", "2"}, {"--fault-rule", "tx opcode=WRITE drop"}, {"--delay", "tx:soon"}} {
		var out, errb strings.Builder
		code := Main(context.Background(), WriteBW, append(args, "127.0.0.1"), &out, &errb)
		first, _, _ := strings.Cut(errb.String(), "\n")
		if code == 0 || !strings.Contains(first, args[0]) || strings.Contains(errb.String(), "goroutine") {
			t.Errorf("write_bw %v: exit %d, stderr %q", args, code, errb.String())
		}
	}
}
