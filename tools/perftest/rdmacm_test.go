package perftest

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/endpoint"
)

// -R runs, server and client in-process over the UDP link on loopback,
// on addresses no other test uses (127.0.16.5 serves, 127.0.16.6 dials)
// and ports of their own. The client starts once the server's exchange
// listener is up (ptListening).

// cmPair runs one -R server and one -R client of test on port.
func cmPair(t *testing.T, test Test, port int, args ...string) (srv, cli ptSide) {
	t.Helper()
	common := append([]string{"-R", "-x", "1", "-p", strconv.Itoa(port)}, args...)
	done := serveLine(t, test, port, append([]string{"-d", "127.0.16.5"}, common...))
	cli = runMain(test, append(append([]string{"-d", "127.0.16.6"}, common...), "127.0.16.5"))
	return awaitServer(t, done, cli), cli
}

// TestPerftestRDMACM: write_bw and send_bw (one and two QPs) and send_lat
// with -R, each side claiming a version of its own: the banner says
// rdma_cm, the server prints the note perftest prints, both sides print
// the addresses of the QPs the CM connected and their rows.
func TestPerftestRDMACM(t *testing.T) {
	tests := []struct {
		test  Test
		port  int
		claim Version
		args  []string
	}{
		{WriteBW, 18861, V606, []string{"-n", "50", "-s", "4096"}},
		{SendBW, 18862, V624, []string{"-n", "50", "-s", "2000"}},
		{SendBW, 18863, V629, []string{"-n", "40", "-s", "64", "-q", "2"}},
		{SendLat, 18864, V624, []string{"-n", "50", "-s", "64"}},
		// UD: SIDR gives the client the server's QPN and Q_Key; send_lat
		// and send_bw -b send the client's QPN back in a SEND with
		// immediate, as perftest does; -q 2 resolves two services.
		{SendBW, 18865, V606, []string{"-n", "50", "-s", "1", "-c", "UD"}},
		{SendBW, 18866, V629, []string{"-n", "40", "-s", "1024", "-c", "UD", "-q", "2"}},
		{SendBW, 18867, V624, []string{"-n", "40", "-s", "512", "-c", "UD", "-b"}},
		{SendLat, 18868, V624, []string{"-n", "50", "-s", "1024", "-c", "UD"}},
	}
	for _, tt := range tests {
		t.Run(tt.test.String()+"/"+strings.Join(tt.args, ""), func(t *testing.T) {
			srv, cli := cmPair(t, tt.test, tt.port, append([]string{"--perftest_version", string(tt.claim)}, tt.args...)...)
			iters, _ := strconv.ParseUint(tt.args[1], 10, 64)
			size, _ := strconv.ParseUint(tt.args[3], 10, 64)
			qps := 1
			if slices.Contains(tt.args, "-q") {
				qps = 2
				iters *= 2 // -q 2: the rows count every QP's messages
			}
			for _, side := range []struct {
				who    string
				s      ptSide
				server bool
			}{{"server", srv, true}, {"client", cli, false}} {
				checkOutput(t, side.who, side.s, tt.test, side.server, tt.claim, size, iters)
				if !strings.Contains(side.s.out, " rdma_cm QPs\t : ON\n Data ex. method : rdma_cm\n") {
					t.Errorf("%s: banner without rdma_cm:\n%s", side.who, side.s.out)
				}
				if got := strings.Contains(side.s.out, " Waiting for client rdma_cm QP to connect\n"); got != side.server {
					t.Errorf("%s: rdma_cm note %v", side.who, got)
				}
				if n := strings.Count(side.s.out, " local address: "); n != qps {
					t.Errorf("%s: %d local addresses", side.who, n)
				}
			}
		})
	}
}

// TestPerftestRDMACMRefused: -R with UC is refused up front with
// perftest's line (librdmacm has no UC), and so is -z alone.
func TestPerftestRDMACMRefused(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"-R -c UC", "UC is not supported in librdmacm"},
		{"-z", "-R has both"},
	} {
		var out, errOut bytes.Buffer
		if code := Main(context.Background(), SendBW, strings.Fields(tc.args), &out, &errOut); code != 1 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%s: exit %d, stderr %q", tc.args, code, errOut.String())
		}
	}
}

// TestRDMACMListenerInStats: a -R server's exchange listener is listed
// on the process's stats socket (roced stats) as a cm_id in state LISTEN
// on its port, as rdma(8) lists a real perftest's, once it listens; the
// run then goes on as any other.
func TestRDMACMListenerInStats(t *testing.T) {
	const port = 18869
	common := []string{"-R", "-x", "1", "-p", strconv.Itoa(port), "-n", "5", "-s", "64"}
	done := serveLine(t, SendBW, port, append([]string{"-d", "127.0.16.5"}, common...))
	all, err := endpoint.AllStats(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var found []endpoint.CMID
	for _, r := range all {
		found = append(found, r.CMIDs...)
	}
	want := endpoint.CMID{Dev: "goroce0", Netdev: "lo", PS: "TCP", State: "LISTEN", Src: "0.0.0.0:" + strconv.Itoa(port)}
	if len(found) != 1 || found[0] != want {
		t.Errorf("cm_ids %+v, want %+v", found, want)
	}
	cli := runMain(SendBW, append(append([]string{"-d", "127.0.16.6"}, common...), "127.0.16.5"))
	if srv := awaitServer(t, done, cli); srv.code != 0 || cli.code != 0 {
		t.Fatalf("server %+v\nclient %+v", srv, cli)
	}
}
