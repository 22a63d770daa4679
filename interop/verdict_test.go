package interop

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/goroce/goroce/tools/cmtime"
)

func scenario(t *testing.T, tool string, tr Transport, size, iters int) Scenario {
	t.Helper()
	tl, ok := ToolByName(tool)
	if !ok {
		t.Fatalf("no tool %s", tool)
	}
	return Scenario{Tool: tl, Transport: tr, Size: size, Iters: iters, MTU: 1024}
}

func out(stdout string) Output { return Output{Stdout: stdout} }

// bwRow is a perftest 6.24 bandwidth result as roced prints it.
func bwRow(size, iters int, peak, avg, rate string) string {
	return " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n" +
		fmt.Sprintf(" %-10d %-16d %-18s %s\t\t     %s\n", size, iters, peak, avg, rate)
}

func TestJudge(t *testing.T) {
	rcCli := golden(t, "bookworm/rc_pingpong_s64.client.txt")
	rcSrv := golden(t, "bookworm/rc_pingpong_s64.server.txt")
	wbCli := golden(t, "trixie/write_bw_s64.client.txt")
	wbSrv := golden(t, "trixie/write_bw_s64.server.txt")
	wlInf := golden(t, "bookworm/write_lat_s8192.client.txt")
	wlSrv := golden(t, "bookworm/write_lat_s8192.server.txt")
	rlCli := golden(t, "pt629/pt629_read_lat_s64.client.txt")
	rlSrv := golden(t, "pt629/pt629_read_lat_s64.server.txt")
	acCli := golden(t, "bookworm/atomic_bw_cas.client.txt")
	acSrv := golden(t, "bookworm/atomic_bw_cas.server.txt")
	mmCli := golden(t, "pt629/pt629_write_bw_mismatch.client.txt")
	mmSrv := golden(t, "pt629/pt629_write_bw_mismatch.server.txt")
	rpCli := golden(t, "bookworm/rping_c5.client.txt")
	rpSrv := golden(t, "bookworm/rping_c5.server.txt")
	rp64 := scenario(t, "rping", RC, 64, 5)

	rc64 := scenario(t, "rc_pingpong", RC, 64, 5)
	wb64 := scenario(t, "write_bw", RC, 64, 100)
	wb64R := wb64
	wb64R.Flags = []string{"-R"}
	viaCM := func(s string) string {
		return strings.Replace(s, " Data ex. method : Ethernet", " Data ex. method : rdma_cm", 1)
	}
	wb64b := wb64
	wb64b.Flags = []string{"-b"}
	wb64kb := scenario(t, "write_bw", RC, 65536, 16)
	wb64kb.Flags = []string{"-b"}
	bidir := func(s string) string {
		return strings.Replace(s, "RDMA_Write BW Test", "RDMA_Write Bidirectional BW Test", 1)
	}
	const bidirTitle = "                    RDMA_Write Bidirectional BW Test\n"
	wl8k := scenario(t, "write_lat", RC, 8192, 20)
	rl64 := scenario(t, "read_lat", RC, 64, 20)
	acas := scenario(t, "atomic_bw", RC, AtomicSize, 100)

	for _, tc := range []struct {
		name           string
		sc             Scenario
		srv, cli       Output
		srvStrict      bool
		cliStrict      bool
		cliRoced       bool     // the client is roced's own tool
		reasons, notes []string // substrings, in order
		figure         string   // FigureText
	}{
		{name: "pingpong pass", sc: rc64, srv: out(rcSrv), cli: out(rcCli),
			figure: "0.49 Mbit/s, 2086.60 usec/iter (client)"},
		{name: "pingpong strict pass", sc: rc64, srv: out(rcSrv), cli: out(rcCli), srvStrict: true, cliStrict: true},
		{name: "pingpong wrong iterations", sc: scenario(t, "rc_pingpong", RC, 64, 10), srv: out(rcSrv), cli: out(rcCli),
			reasons: []string{"server (S): 640 bytes, want 1280", "server (S): 5 iters, want 10", "client (C): 640 bytes", "client (C): 5 iters"}},
		{name: "pingpong wrong size", sc: scenario(t, "rc_pingpong", RC, 65, 5), srv: out(rcSrv), cli: out(rcCli),
			reasons: []string{"server (S): 640 bytes, want 650", "client (C): 640 bytes, want 650"}},
		{name: "pingpong data check", sc: rc64, srv: out(rcSrv + "invalid data in page 0\n"), cli: out(rcCli),
			reasons: []string{"server (S): data check (-c) failed: invalid data in page(s) [0]"}},
		{name: "pingpong no exchange", sc: rc64, srv: out(rcSrv), cli: out(strings.Replace(rcCli, "remote address", "remote", 1)),
			reasons: []string{`client (C): no "remote address:" line`}},
		{name: "client failed", sc: rc64, srv: out(rcSrv),
			cli:     Output{Exit: 1, Stdout: "  local address: ...\n", Stderr: "Failed status transport retry counter exceeded (12) for wr_id 1\nparse WC failed 1\n"},
			reasons: []string{"client (C) exit status 1: Failed status transport retry counter exceeded (12) for wr_id 1 ... parse WC failed 1"}},
		{name: "server timed out", sc: rc64, srv: Output{Exit: 124, TimedOut: true, Seconds: 60}, cli: out(rcCli),
			reasons: []string{"server (S) timed out after 60s"}},
		{name: "server stopped", sc: rc64, srv: Output{Exit: -1, Stopped: true}, cli: out(rcCli),
			reasons: []string{"server (S) was stopped by the harness"}},
		{name: "client never started", sc: rc64, srv: Output{Exit: 2, Stderr: "roced: unknown command \"rc_pingpong\"\n"},
			cli:     Output{Exit: -1, StartErr: "not started: the server exited before listening"},
			reasons: []string{`server (S) exit status 2: roced: unknown command "rc_pingpong"`, "client (C) did not run: not started"}},
		{name: "strict side with zero time", sc: rc64, srv: out(rcSrv),
			cli:       out(strings.Replace(rcCli, "0.49 Mbit/sec", "inf Mbit/sec", 1)),
			cliStrict: true, reasons: []string{"client (C): figures not finite and positive"}},
		{name: "strict side with no time per iteration", sc: rc64, srv: out(rcSrv),
			cli:       out(strings.Replace(rcCli, "2086.60 usec/iter", "0.00 usec/iter", 1)),
			cliStrict: true, reasons: []string{"client (C): figures not finite and positive"}},
		{name: "1-byte messages print 0.00 Mbit/sec", sc: scenario(t, "rc_pingpong", RC, 1, 50), srvStrict: true, cliStrict: true,
			srv: out("  remote address: x\n100 bytes in 0.77 seconds = 0.00 Mbit/sec\n50 iters in 0.77 seconds = 15420.98 usec/iter\n"),
			cli: out("  remote address: x\n100 bytes in 0.69 seconds = 0.00 Mbit/sec\n50 iters in 0.69 seconds = 13898.02 usec/iter\n")},
		{name: "figures that disagree", sc: rc64, srv: out(rcSrv),
			cli:     out(strings.Replace(rcCli, "0.49 Mbit/sec", "4.90 Mbit/sec", 1)),
			reasons: []string{"client (C): 4.9 Mbit/sec disagrees with 640 bytes at 2086.6 usec/iter x 5 (0.49 Mbit/sec)"}},

		{name: "perftest bw pass", sc: wb64, srv: out(wbSrv), cli: out(wbCli), srvStrict: true, cliStrict: true,
			figure: "0.61 MiB/sec BW average, 0.009939 Mpps (client)"},
		{name: "perftest -R pass", sc: wb64R, srv: out(viaCM(wbSrv)), cli: out(viaCM(wbCli)), srvStrict: true, cliStrict: true,
			figure: "0.61 MiB/sec BW average, 0.009939 Mpps (client)"},
		{name: "perftest -R over TCP", sc: wb64R, srv: out(viaCM(wbSrv)), cli: out(wbCli), srvStrict: true, cliStrict: true,
			reasons: []string{`client (C): no " Data ex. method : rdma_cm" line`}},
		{name: "perftest -R no banner nor row", sc: wb64R, srv: out(viaCM(wbSrv)), cli: out("---\n"),
			reasons: []string{`client (C): no " Data ex. method : rdma_cm" line`, "client (C): no result row"}},
		// rxe's own -b outputs (interop artifacts, both ends the real tool's
		// side of a case against roced): bookworm's perftest 6.06, trixie's 6.24.
		{name: "perftest -b pass, bookworm", sc: wb64kb, srv: out(golden(t, "bookworm/write_bw_b_s65536.server.txt")),
			cli: out(golden(t, "bookworm/write_bw_b_s65536.client.txt")), figure: "20.02 MB/sec BW average, 0.000320 Mpps (client)"},
		{name: "perftest -b pass, trixie", sc: wb64kb, srv: out(golden(t, "trixie/write_bw_b_s65536.server.txt")),
			cli: out(golden(t, "trixie/write_bw_b_s65536.client.txt")), figure: "18.44 MiB/sec BW average, 0.000295 Mpps (client)"},
		{name: "perftest -b pass, strict", sc: wb64b, srv: out(bidir(wbSrv)), cli: out(bidir(wbCli)), srvStrict: true, cliStrict: true,
			figure: "0.61 MiB/sec BW average, 0.009939 Mpps (client)"},
		{name: "perftest -b server one way", sc: wb64b, srv: out(wbSrv), cli: out(bidir(wbCli)), srvStrict: true, cliStrict: true,
			reasons: []string{`server (S): no "Bidirectional" in the test's title`}},
		{name: "perftest -b server measures", sc: wb64b, srvStrict: true, cliStrict: true,
			srv: out(bidirTitle + bwRow(64, 100, "0.00", "0.00", "0.000000")), cli: out(bidir(wbCli)),
			reasons: []string{"server (S): MsgRate[Mpps] is 0, want a positive number"}},
		{name: "perftest bw wrong iterations", sc: scenario(t, "write_bw", RC, 64, 50), srv: out(wbSrv), cli: out(wbCli),
			reasons: []string{"server (S): #iterations 100, want 50", "client (C): #iterations 100, want 50"}},
		{name: "perftest bw client row missing", sc: wb64, srv: out(wbSrv), cli: out("---\n"),
			reasons: []string{"client (C): no result row"}},
		{name: "perftest bw server row missing", sc: wb64, srv: out("\n* Waiting for client to connect... *\n"), cli: out(wbCli),
			reasons: []string{"server (S): no result row"}},
		{name: "perftest latency row for a bw test", sc: wb64, srv: out(wbSrv), cli: out(strings.Replace(rlCli, " 64 ", " 64 ", 1)),
			reasons: []string{"client (C): a latency row, want bandwidth", "client (C): #iterations 20, want 100"}},
		{name: "roced 1-byte bandwidth rounds to 0.00", sc: scenario(t, "write_bw", RC, 1, 100), srvStrict: true, cliStrict: true,
			srv: out(bwRow(1, 100, "0.00", "0.00", "0.000000")), cli: out(bwRow(1, 100, "0.00", "0.00", "0.001247")),
			figure: "0.00 MiB/sec BW average, 0.001247 Mpps (client)"},
		{name: "roced message rate zero", sc: scenario(t, "write_bw", RC, 1, 100), cliStrict: true,
			srv: out(bwRow(1, 100, "0.00", "0.00", "0.000000")), cli: out(bwRow(1, 100, "0.00", "0.00", "0.000000")),
			reasons: []string{"client (C): MsgRate[Mpps] is 0, want a positive number"}},
		{name: "roced bandwidth disagrees with the message rate", sc: scenario(t, "send_bw", UC, 65536, 16), cliStrict: true,
			srv: out(bwRow(65536, 16, "0.00", "52.35", "0.000838")), cli: out(bwRow(65536, 16, "314.82", "5.35", "0.000838")),
			reasons: []string{"client (C): BW average 5.35 MiB/sec disagrees with MsgRate 0.000838 Mpps x 65536 bytes (52.38)"}},
		{name: "roced bandwidth within the message rate's rounding", sc: scenario(t, "write_bw", RC, 65536, 16), cliStrict: true,
			srv: out(bwRow(65536, 16, "0.00", "2.22", "0.000036")), cli: out(bwRow(65536, 16, "0.00", "2.22", "0.000036")),
			figure: "2.22 MiB/sec BW average, 0.000036 Mpps (client)"},
		{name: "reference zeros are a note", sc: wb64, srv: out(golden(t, "bookworm/write_bw_s64.server.txt")),
			cli:   out(golden(t, "bookworm/write_bw_s64.client.txt")),
			notes: []string{"client (C) prints MsgRate[Mpps] 0"}},
		{name: "reference inf latency is a note", sc: wl8k, srv: out(wlSrv), cli: out(wlInf),
			notes:  []string{"server (S) prints usec t_typical +Inf", "client (C) prints usec t_typical +Inf"},
			figure: "+Inf usec t_typical (client)"},
		{name: "roced inf latency fails", sc: wl8k, srv: out(wlSrv), cli: out(wlInf), cliStrict: true, cliRoced: true,
			reasons: []string{"client (C): usec t_typical is +Inf, want a positive number"},
			notes:   []string{"server (S) prints usec t_typical +Inf"}},
		// perftest's own clock failing (issue 44): real outputs of the
		// tool whose CPU-frequency fit gave r^2 < 0.9, on a strict side
		// (the host's perftest over libgoroce). Accepted only with the
		// tool's own warning, the right counts and a row of the failed
		// clock's shape.
		{name: "perftest's clock warning excuses its inf latency", sc: wl8k, srv: out(wlSrv), cli: out(wlInf), srvStrict: true, cliStrict: true,
			notes: []string{"server (S) prints usec t_typical +Inf: perftest's own CPU-frequency estimate failed (\"Correlation coefficient r^2: 0.873728 < 0.9\")",
				"client (C) prints usec t_typical +Inf: perftest's own CPU-frequency estimate failed (\"Correlation coefficient r^2: 0.833276 < 0.9\")"}},
		{name: "perftest's clock warning on stderr", sc: wl8k, srv: out(wlSrv), cliStrict: true,
			cli:   Output{Stdout: noClockWarning(wlInf), Stderr: "Correlation coefficient r^2: 0.833276 < 0.9\n"},
			notes: []string{"server (S) prints usec t_typical +Inf", "client (C) prints usec t_typical +Inf: perftest's own"}},
		{name: "inf latency without the clock warning fails", sc: wl8k, srv: out(wlSrv), cli: out(noClockWarning(wlInf)), cliStrict: true,
			reasons: []string{"client (C): usec t_typical is +Inf, want a positive number"},
			notes:   []string{"server (S) prints usec t_typical +Inf"}},
		{name: "the clock warning does not excuse wrong iterations", sc: scenario(t, "write_lat", RC, 8192, 100), srv: out(wlSrv), cli: out(wlInf), cliStrict: true,
			reasons: []string{"server (S): #iterations 20, want 100", "client (C): #iterations 20, want 100", "client (C): usec t_typical is +Inf, want a positive number"},
			notes:   []string{"server (S) prints usec t_typical +Inf"}},
		{name: "the clock warning does not excuse wrong bytes", sc: scenario(t, "write_lat", RC, 4096, 20), srv: out(wlSrv), cli: out(wlInf), cliStrict: true,
			reasons: []string{"server (S): #bytes 8192, want 4096", "client (C): #bytes 8192, want 4096", "client (C): usec t_typical is +Inf, want a positive number"},
			notes:   []string{"server (S) prints usec t_typical +Inf"}},
		{name: "perftest's clock warning excuses its zero bandwidth", sc: wb64, srvStrict: true, cliStrict: true,
			srv: out(golden(t, "bookworm/write_bw_s64.server.txt")), cli: out(golden(t, "bookworm/write_bw_s64.client.txt")),
			notes: []string{"client (C) prints MsgRate[Mpps] 0: perftest's own"}},
		{name: "the clock warning does not excuse a row with a real figure", sc: wb64, cliStrict: true, srv: out(wbSrv),
			cli:     out("Correlation coefficient r^2: 0.832069 < 0.9\n" + bwRow(64, 100, "3.10", "0.00", "0.000000")),
			reasons: []string{"client (C): MsgRate[Mpps] is 0, want a positive number"}},
		{name: "the clock warning never excuses roced", sc: wl8k, srv: out(wlSrv), cli: out(wlInf), cliStrict: true, cliRoced: true,
			reasons: []string{"client (C): usec t_typical is +Inf, want a positive number"},
			notes:   []string{"server (S) prints usec t_typical +Inf"}},
		{name: "roced t_typical outside min..max", sc: wl8k, srv: out(wlSrv), cliStrict: true,
			cli:     out(strings.Replace(wlInf, "inf            inf          inf      \t", "5.0 9.0 12.0 \t", 1)),
			reasons: []string{"client (C): t_typical 12 outside [t_min 5, t_max 9]"},
			notes:   []string{"server (S) prints usec t_typical +Inf"}},
		{name: "read_lat server prints no row", sc: rl64, srv: out(rlSrv), cli: out(rlCli), srvStrict: true, cliStrict: true,
			figure: "71.23 usec t_typical (client)"},
		{name: "atomic moves 8 bytes", sc: acas, srv: out(acSrv), cli: out(acCli), figure: "0.05 MB/sec BW average, 0.006028 Mpps (client)"},
		{name: "rping pass", sc: rp64, srv: out(rpSrv), cli: out(rpCli), srvStrict: true, cliStrict: true,
			figure: "5 pings (client)"},
		{name: "rping wrong count", sc: scenario(t, "rping", RC, 64, 10), srv: out(rpSrv), cli: out(rpCli),
			reasons: []string{`server (S): 5 "server ping data:" lines, want 10 (-C 10)`, `client (C): 5 "ping data:" lines, want 10`}},
		{name: "rping wrong size", sc: scenario(t, "rping", RC, 65, 5), srv: out(rpSrv), cli: out(rpCli),
			reasons: []string{`server (S): ping 0 is "rdma-ping-0: ABC`, `client (C): ping 0 is`}},
		{name: "rping ping garbled", sc: rp64, srv: out(rpSrv), cli: out(strings.Replace(rpCli, "rdma-ping-3: DEF", "rdma-ping-3: XEF", 1)),
			reasons: []string{`client (C): ping 3 is "rdma-ping-3: XEF`}},
		{name: "rping validation failed", sc: rp64, srv: out(rpSrv),
			cli:     Output{Exit: 255, Stdout: rpCli, Stderr: "data mismatch!\n"},
			reasons: []string{"client (C) exit status 255: data mismatch!"}},
		{name: "rping mismatch reported though exit 0", sc: rp64, srv: out(rpSrv), cli: Output{Stdout: rpCli, Stderr: "data mismatch!\n"},
			reasons: []string{"client (C): -V found a data mismatch"}},
		{name: "rping's own teardown race", sc: rp64, srv: out(rpSrv),
			cli:   Output{Exit: 255, Stdout: rpCli, Stderr: "client DISCONNECT EVENT...\nrdma_get_cm_event: Bad file descriptor\n"},
			notes: []string{"client (C) exited 255 after its DISCONNECT EVENT"}, figure: "5 pings (client)"},
		{name: "rping's own teardown race, on the server", sc: rp64, cli: out(rpCli),
			srv:   Output{Exit: 255, Stdout: rpSrv, Stderr: "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\nrdma_get_cm_event: Bad file descriptor\n"},
			notes: []string{"server (S) exited 255 after its DISCONNECT EVENT"}, figure: "5 pings (client)"},
		{name: "rping server EBADF in another state is a failure", sc: rp64, cli: out(rpCli),
			srv:     Output{Exit: 255, Stdout: rpSrv, Stderr: "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 11\nrdma_get_cm_event: Bad file descriptor\n"},
			reasons: []string{"server (S) exit status 255"}},
		{name: "rping EBADF without the disconnect is a failure", sc: rp64, srv: out(rpSrv),
			cli:     Output{Exit: 255, Stdout: rpCli, Stderr: "rdma_get_cm_event: Bad file descriptor\n"},
			reasons: []string{"client (C) exit status 255"}},
		{name: "rping EBADF with another error is a failure", sc: rp64, srv: out(rpSrv),
			cli:     Output{Exit: 255, Stdout: rpCli, Stderr: "cq completion failed status 5\nclient DISCONNECT EVENT...\nrdma_get_cm_event: Bad file descriptor\n"},
			reasons: []string{"client (C) exit status 255"}},
		{name: "negotiation mismatch", sc: wb64, srv: Output{Exit: 1, Stdout: mmSrv}, cli: Output{Exit: 1, Stdout: mmCli},
			reasons: []string{"server (S) exit status 1", "client (C) exit status 1"}},
		{name: "printed side is a note", sc: rc64, srv: out(rcSrv), cli: Output{NotCaptured: true},
			notes: []string{"client (C) was run by hand"}, figure: "0.14 Mbit/s, 7273.60 usec/iter (server)"},
		{name: "nothing captured", sc: rc64, srv: Output{NotCaptured: true}, cli: Output{NotCaptured: true},
			reasons: []string{"neither side's output was captured"},
			notes:   []string{"server (S) was run by hand", "client (C) was run by hand"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Judge(tc.sc,
				SideRun{Role: "server", Who: "S", Strict: tc.srvStrict, Out: tc.srv},
				SideRun{Role: "client", Who: "C", Strict: tc.cliStrict, Roced: tc.cliRoced, Out: tc.cli})
			if v.Pass != (len(tc.reasons) == 0) {
				t.Errorf("pass %v, reasons %q", v.Pass, v.Reasons)
			}
			match(t, "reasons", v.Reasons, tc.reasons)
			match(t, "notes", v.Notes, tc.notes)
			if tc.figure != "" {
				if got := FigureText(v.Figures); got != tc.figure {
					t.Errorf("figure %q, want %q", got, tc.figure)
				}
			}
		})
	}
}

// noClockWarning is a perftest output without its clock warning lines.
func noClockWarning(s string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "Correlation coefficient r^2:") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// match checks that got has one entry per wanted substring, in order.
func match(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s %q, want %d matching %q", what, got, len(want), want)
		return
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Errorf("%s[%d] = %q, want it to contain %q", what, i, got[i], want[i])
		}
	}
}

func TestFigureJSON(t *testing.T) {
	for _, tc := range []struct {
		f    Figure
		want string
	}{
		{Figure{Value: 20.48, Unit: "Mbit/s", Side: "client"}, `{"value":20.48,"unit":"Mbit/s","side":"client"}`},
		{Figure{Value: math.Inf(1), Unit: "usec t_typical", Side: "server"}, `{"value":"+Inf","unit":"usec t_typical","side":"server"}`},
		{Figure{Value: math.NaN(), Unit: "x", Side: "client"}, `{"value":"NaN","unit":"x","side":"client"}`},
	} {
		b, err := json.Marshal(tc.f)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tc.want {
			t.Errorf("got %s, want %s", b, tc.want)
		}
		var back map[string]any
		if err := json.Unmarshal(b, &back); err != nil {
			t.Errorf("%s is not JSON: %v", b, err)
		}
	}
}

// TestJudgeExample: an rdma_server/rdma_client side passes on exactly its
// two lines, each with its own program's name, and on nothing else.
func TestJudgeExample(t *testing.T) {
	sc := scenario(t, "rdma_server", RC, 16, 1)
	side := func(role, stdout string) SideRun { return SideRun{Role: role, Who: "rxe0", Out: out(stdout)} }
	good := Judge(sc, side("server", "rdma_server: start\nrdma_server: end 0\n"), side("client", "rdma_client: start\nrdma_client: end 0\n"))
	if !good.Pass {
		t.Fatalf("good run failed: %v", good.Reasons)
	}
	for _, bad := range [][2]string{
		{"rdma_server: start\nrdma_server: end -1\n", "rdma_client: start\nrdma_client: end 0\n"},
		{"rdma_server: start\nrdma_server: end 0\n", "rdma_client: start\n"},
		{"rdma_client: start\nrdma_client: end 0\n", "rdma_client: start\nrdma_client: end 0\n"}, // the server's lines name the server
		{"rdma_server: start\nrdma_server: device doesn't support IBV_SEND_INLINE, using sge sends\nrdma_server: end 0\n", "rdma_client: start\nrdma_client: end 0\n"},
	} {
		if v := Judge(sc, side("server", bad[0]), side("client", bad[1])); v.Pass {
			t.Errorf("passed %q / %q", bad[0], bad[1])
		}
	}
}

// TestJudgeCmatose: a ucmatose side passes on exactly cmatose's lines for
// its role, and fails on a missing phase, another status or the other
// role's lines.
func TestJudgeCmatose(t *testing.T) {
	sc := scenario(t, "ucmatose", RC, 100, 10)
	sc.Flags = []string{"-c", "50"}
	srv := "cmatose: starting server\ninitiating data transfers\ncompleting sends\nreceiving data transfers\ndata transfers complete\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n"
	cli := "cmatose: starting client\ncmatose: connecting\nreceiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n"
	side := func(role, stdout string) SideRun { return SideRun{Role: role, Who: "rxe0", Out: out(stdout)} }
	v := Judge(sc, side("server", srv), side("client", cli))
	if !v.Pass {
		t.Fatalf("good run failed: %v", v.Reasons)
	}
	if len(v.Figures) == 0 || v.Figures[0].Value != 50 {
		t.Errorf("figures %+v, want 50 connections", v.Figures)
	}
	for _, bad := range [][2]string{
		{strings.Replace(srv, "return status 0", "return status 8", 1), cli},
		{srv, strings.Replace(cli, "sending replies\n", "", 1)},
		{cli, cli},
	} {
		if v := Judge(sc, side("server", bad[0]), side("client", bad[1])); v.Pass {
			t.Errorf("passed %q / %q", bad[0], bad[1])
		}
	}
}

// TestJudgeUdaddy: a udaddy side passes on exactly udaddy's lines for its
// role, and fails on a missing phase, another status or the other role's
// lines.
func TestJudgeUdaddy(t *testing.T) {
	sc := scenario(t, "udaddy", UD, 100, 10)
	sc.Flags = []string{"-c", "10"}
	srv := "udaddy: starting server\nreceiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n"
	cli := "udaddy: starting client\nudaddy: connecting\ninitiating data transfers\nreceiving data transfers\ndata transfers complete\ntest complete\nreturn status 0\n"
	side := func(role, stdout string) SideRun { return SideRun{Role: role, Who: "rxe0", Out: out(stdout)} }
	v := Judge(sc, side("server", srv), side("client", cli))
	if !v.Pass {
		t.Fatalf("good run failed: %v", v.Reasons)
	}
	if len(v.Figures) == 0 || v.Figures[0].Value != 10 || v.Figures[0].Unit != "services" {
		t.Errorf("figures %+v, want 10 services", v.Figures)
	}
	for _, bad := range [][2]string{
		{strings.Replace(srv, "return status 0", "return status 1", 1), cli},
		{srv, strings.Replace(cli, "receiving data transfers\n", "", 1)},
		{cli, cli},
	} {
		if v := Judge(sc, side("server", bad[0]), side("client", bad[1])); v.Pass {
			t.Errorf("passed %q / %q", bad[0], bad[1])
		}
	}
}

// TestJudgeCmtime: a cmtime side passes on cmtime's lines for its role
// and release, whatever its figures; 44's server passes stopped by the
// harness and silent; the client's figure is its connections per second.
func TestJudgeCmtime(t *testing.T) {
	sc := scenario(t, "cmtime", RC, 0, 1)
	sc.Flags = []string{"-c", "2"}
	fill := func(skel string, row func(name string) string) string {
		var b strings.Builder
		for _, l := range strings.SplitAfter(skel, "\n") {
			if name, ok := strings.CutSuffix(l, ": #\n"); ok {
				b.WriteString(fmt.Sprintf("%-13s: %11.2f%11.2f%11.2f%11.2f\n", name, 4.0, 3.0, 1000.0, 2000.0))
				continue
			}
			if name, ok := strings.CutSuffix(l, " #\n"); ok {
				b.WriteString(row(name))
				continue
			}
			b.WriteString(l)
		}
		return b.String()
	}
	row56 := func(name string) string {
		return fmt.Sprintf("%-13s  %10d %10d %10d %10d %10d %10d\n", name, 500, 1000, 400, 800, 450, 350)
	}
	srv56 := fill(cmtime.WantSkeleton(cmtime.V56, true, 2, true), row56)
	cli56 := fill(cmtime.WantSkeleton(cmtime.V56, false, 2, true), row56)
	cli44 := fill(cmtime.WantSkeleton(cmtime.V44, false, 2, true), nil)
	side := func(role, rc string, o Output) SideRun {
		o.Argv = []string{"cmtime", "-b", "192.0.2.2"}
		return SideRun{Role: role, Who: "rxe0", Out: o, RdmaCore: rc}
	}
	v := Judge(sc, side("server", "56", out(srv56)), side("client", "56", out(cli56)))
	if !v.Pass {
		t.Fatalf("good 56 run failed: %v", v.Reasons)
	}
	if len(v.Figures) == 0 || v.Figures[0].Value != 2000 || v.Figures[0].Unit != "conn/s" {
		t.Errorf("figures %+v, want 2000 conn/s (2 in 1000 us)", v.Figures)
	}
	stopped := Output{Stopped: true}
	v = Judge(sc, side("server", "44", stopped), side("client", "44", out(cli44)))
	if !v.Pass {
		t.Fatalf("good 44 run failed: %v", v.Reasons)
	}
	if len(v.Figures) == 0 || v.Figures[0].Value != 500 {
		t.Errorf("figures %+v, want 500 conn/s (2 in 4 ms)", v.Figures)
	}
	for _, bad := range []struct {
		rc       string
		srv, cli Output
	}{
		{"56", out(srv56), out(strings.Replace(cli56, "\tConnecting\n", "", 1))},
		{"56", out(srv56), out(strings.Replace(cli56, "qp_conn                 2", "qp_conn                 3", 1))},
		{"56", stopped, out(cli56)},                // 56's server ends on its own
		{"56", out(srv56), out(cli44)},             // the other release
		{"44", out("Server warmup\n"), out(cli44)}, // 44's server prints nothing
		{"44", Output{Stopped: true, Stdout: "x\n"}, out(cli44)},
		{"44", stopped, Output{Stdout: cli44, Exit: 1}},
	} {
		if v := Judge(sc, side("server", bad.rc, bad.srv), side("client", bad.rc, bad.cli)); v.Pass {
			t.Errorf("passed %+v", bad)
		}
	}
}
