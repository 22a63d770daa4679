package interop

import (
	"strings"
	"testing"
)

// TestJudgeLibfabric judges fi_pingpong runs recorded against the
// bookworm guest's rxe0 (testdata/libfabric): a good one, the same with
// too few packets on rxe0, other iterations, and ofi_rxm without
// FI_UNIVERSE_SIZE (its CQs past rxe's and goroce's max_cqe).
func TestJudgeLibfabric(t *testing.T) {
	out := func(file string, exit int) Output { return Output{Exit: exit, Stdout: golden(t, "libfabric/"+file)} }
	msg := byID(t, LibfabricTests, "libfabric/msg")
	goodC, goodS := out("msg-rxe-server-client.txt", 0), out("msg-rxe-server-server.txt", 0)
	for _, tc := range []struct {
		name           string
		f              LibfabricTest
		client, server Output
		rcvd, sent     uint64
		reasons        []string
		figure         string
	}{
		{name: "msg", f: msg, client: goodC, server: goodS, rcvd: 820, sent: 818, figure: "1616.54 usec (client)"},
		// 200 messages of 4 KiB each way are 800 packets at MTU 1024.
		{name: "too few packets received", f: msg, client: goodC, server: goodS, rcvd: 799, sent: 818,
			reasons: []string{"rxe0 received 799 and sent 818 RoCE packets during the run, want at least 800 each way"}},
		{name: "too few packets sent", f: msg, client: goodC, server: goodS, rcvd: 820, sent: 10,
			reasons: []string{"want at least 800 each way"}},
		{name: "other iterations", f: LibfabricTest{Endpoint: "msg", Provider: "verbs", Size: 4096, N: 500}, client: goodC, server: goodS,
			rcvd: 2000, sent: 2000, reasons: []string{"client: 200 sent and 200 acknowledged, want 500", "server: 200 sent"}},
		{name: "rdm without FI_UNIVERSE_SIZE", f: byID(t, LibfabricTests, "libfabric/rdm"),
			client:  Output{Exit: 103, Stdout: golden(t, "libfabric/rdm-no-universe-client.txt")},
			server:  Output{Exit: 22, Stdout: golden(t, "libfabric/rdm-no-universe-server.txt")},
			reasons: []string{"client exit status 103: [error] util/pingpong.c:568 : ctrl/read", "server exit status 22: fi_enable(): util/pingpong.c:1551, ret=-22", "rxe0 received 0"}},
		{name: "no result line", f: msg, client: Output{Stdout: "bytes   #sent   #ack\n"}, server: goodS, rcvd: 820, sent: 818,
			reasons: []string{"client: no result line"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reasons, figs := JudgeLibfabric(tc.f, tc.client, tc.server, tc.rcvd, tc.sent)
			if len(reasons) != len(tc.reasons) {
				t.Fatalf("reasons %q, want %d: %q", reasons, len(tc.reasons), tc.reasons)
			}
			for i, r := range tc.reasons {
				if !strings.Contains(reasons[i], r) {
					t.Errorf("reason %d: %q, want one with %q", i, reasons[i], r)
				}
			}
			if got := FigureText(figs); tc.figure != "" && got != tc.figure {
				t.Errorf("figure %q, want %q", got, tc.figure)
			}
		})
	}
}

// TestLibfabricArgv checks the command lines the stage runs: the server
// listens on the stage's port, the client goes to it, both check the data.
func TestLibfabricArgv(t *testing.T) {
	f := byID(t, LibfabricTests, "libfabric/rdm")
	srv, cli := strings.Join(f.Argv(""), " "), strings.Join(f.Argv("192.0.2.1"), " ")
	for _, c := range []struct{ got, want string }{
		{srv, "env FI_UNIVERSE_SIZE=16 fi_pingpong -p verbs;ofi_rxm -e rdm -S 4096 -I 200 -c -B 19768"},
		{cli, "env FI_UNIVERSE_SIZE=16 fi_pingpong -p verbs;ofi_rxm -e rdm -S 4096 -I 200 -c -P 19768 192.0.2.1"},
	} {
		if c.got != c.want {
			t.Errorf("argv %q, want %q", c.got, c.want)
		}
	}
}
