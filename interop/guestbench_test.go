package interop

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// benchOutput reads a client's stdout captured by the bench in the lab
// (testdata/guestbench/SUITE/PAIR.TEST.client.txt).
func benchOutput(t *testing.T, suite, pair, test string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "guestbench", suite, pair+"."+test+".client.txt"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestBenchFigure(t *testing.T) {
	for _, c := range []struct {
		suite, pair, test string
		latency           bool
		want, p99         string // "" p99: none
	}{
		// ib_write_bw 6.06 prints MB/sec, roced (6.29's layout) MiB/sec:
		// the same 2^20-byte unit.
		{"bookworm", "rxe", "write_bw_s65536", false, "6.40", ""},
		{"bookworm", "roced", "write_bw_s65536", false, "7.49", ""},
		{"bookworm", "rxe", "send_lat_s2", true, "25.25", "41922.80"},
		{"bookworm", "roced1", "send_lat_s2", true, "2854.18", "30972.60"},
		{"bookworm", "roced", "send_lat_s64", true, "3590.75", "50913.79"},
		// perftest 6.24 prints MiB/sec
		{"trixie", "rxe", "write_bw_s65536", false, "5.64", ""},
		{"trixie", "rxe", "send_lat_s64", true, "2471.54", "97158.10"},
		{"trixie", "roced", "send_lat_s2", true, "5951.97", "118997.36"},
	} {
		v, p99, printed, err := BenchFigure(benchOutput(t, c.suite, c.pair, c.test), c.latency)
		if err != nil || v == nil || printed != c.want || formatFigure(*v) != c.want {
			t.Errorf("%s %s %s: %v %q %v, want %s", c.suite, c.pair, c.test, v, printed, err, c.want)
			continue
		}
		if got := ""; p99 != nil {
			got = formatFigure(*p99)
			if got != c.p99 {
				t.Errorf("%s %s %s: p99 %s, want %s", c.suite, c.pair, c.test, got, c.p99)
			}
		} else if c.p99 != "" {
			t.Errorf("%s %s %s: no p99, want %s", c.suite, c.pair, c.test, c.p99)
		}
	}
	// A client that failed (status 12 under load) printed the header only.
	if _, _, _, err := BenchFigure(benchOutput(t, "bookworm", "roced1", "send_lat_s64"), true); err == nil || !strings.Contains(err.Error(), "without a row") {
		t.Errorf("failed client: %v, want a missing row", err)
	}
	if _, _, _, err := BenchFigure(benchOutput(t, "bookworm", "rxe", "write_bw_s65536"), true); err == nil {
		t.Error("a bandwidth row read as a latency")
	}
	if _, _, _, err := BenchFigure("", false); err == nil {
		t.Error("empty output gave a figure")
	}
	gb := " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n 65536      5000             0.1              0.05   		     0.000120\n"
	if _, _, _, err := BenchFigure(gb, false); err == nil || !strings.Contains(err.Error(), "Gb/sec") {
		t.Errorf("Gb/sec: %v, want an error naming the unit", err)
	}
	nan := strings.Replace(benchOutput(t, "bookworm", "rxe", "send_lat_s2"), "25.25", "-nan", 1)
	if v, _, printed, err := BenchFigure(nan, true); err != nil || v != nil || printed != "NaN" {
		t.Errorf("-nan t_typical: %v %q %v, want no value, printed NaN", v, printed, err)
	}
}

// benchReport is a report of one round from the bookworm captures.
func benchReport(t *testing.T) *GuestBenchReport {
	rep := &GuestBenchReport{Suite: "bookworm", Rounds: 1, Info: map[string]string{"guest_kernel": "6.1.0-50-amd64", "perftest": "4.5+0.17-1"},
		HostLoad: [2]string{"18.79 14.69 9.46", "12.75 14.96 11.20"}, GuestLoad: [2]string{"0.90 0.97 0.53", "3.13 2.37 1.26"}}
	for _, test := range []struct {
		tool    string
		size    int
		latency bool
	}{{"write_bw", 65536, false}, {"send_lat", 2, true}, {"send_lat", 64, true}} {
		bt := BenchTest{Tool: test.tool, Size: test.size}
		row := &BenchRow{Test: bt.Name(), Tool: test.tool, Size: test.size, Iters: 1000, Latency: test.latency,
			Unit: benchUnit(test.latency), Runs: map[string][]*BenchRun{}}
		if !test.latency {
			row.Iters = 5000
		}
		for pair, file := range map[string]string{BenchRxe: "rxe", BenchRoced: "roced", BenchRocedOneCPU: "roced1"} {
			run := &BenchRun{}
			var err error
			run.Value, run.P99, run.Printed, err = BenchFigure(benchOutput(t, "bookworm", file, strings.ReplaceAll(bt.Name(), "/", "_")), test.latency)
			if err != nil {
				run.Errors = append(run.Errors, "client: "+err.Error())
			}
			row.Runs[pair] = []*BenchRun{run}
		}
		rep.Rows = append(rep.Rows, row)
	}
	return rep
}

func TestGuestBenchTable(t *testing.T) {
	rep := benchReport(t)
	var b strings.Builder
	rep.WriteTable(&b)
	out := b.String()
	for _, want := range []string{
		"guest bookworm (kernel 6.1.0-50-amd64, perftest 4.5+0.17-1)",
		"host load 18.79 14.69 9.46 -> 12.75 14.96 11.20, guest load 0.90 0.97 0.53 -> 3.13 2.37 1.26",
		"| test | size | iters | rxe | roced | roced GOMAXPROCS=1 | roced / rxe | roced GOMAXPROCS=1 / rxe |",
		"| write_bw | 64 KiB | 5000 | 6.40 MiB/s | 7.49 MiB/s | 7.52 MiB/s | 1.17x | 1.17x |",
		// latency: rxe's over roced's, so below 1 when roced is slower
		"| send_lat | 2 B | 1000 | 25.25 usec (41922.80) | 3092.44 usec (70485.49) | 2854.18 usec (30972.60) | 0.01x | 0.01x |",
		"| send_lat | 64 B | 1000 | 3964.53 usec (38365.13) | 3590.75 usec (50913.79) | FAIL | 1.10x | - |",
		"send_lat/s64 roced GOMAXPROCS=1 round 1: client: result header without a row",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if rep.OK() {
		t.Error("a report with a failed run is OK")
	}
	if strings.Contains(out, "every roced") {
		t.Errorf("a run with no roced settings names some:\n%s", out)
	}
	rep.RocedEnv, rep.RocedLink = []string{"GOROCE_POLL_MODE=1"}, "afxdp"
	b.Reset()
	rep.WriteTable(&b)
	if want := "every roced with GOROCE_POLL_MODE=1 --link afxdp\n"; !strings.Contains(b.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, b.String())
	}
	rep.RocedEnv, rep.RocedLink = nil, ""
	path := filepath.Join(t.TempDir(), "bench.json")
	if err := rep.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
}

func TestBenchRowMedian(t *testing.T) {
	f := func(v float64) *BenchRun { return &BenchRun{Value: &v, Printed: formatFigure(v)} }
	row := &BenchRow{Latency: true, Unit: "usec", Runs: map[string][]*BenchRun{
		BenchRxe:   {f(30), f(10), f(20)},
		BenchRoced: {f(5), {Printed: "inf"}, f(15)},
	}}
	if v, ok := row.Figure(BenchRxe); !ok || v != 20 {
		t.Errorf("median of 30 10 20: %v %v", v, ok)
	}
	if v, ok := row.Figure(BenchRoced); !ok || v != 10 {
		t.Errorf("median of 5 15 (inf left out): %v %v", v, ok)
	}
	if r, ok := row.Ratio(BenchRoced); !ok || r != 2 {
		t.Errorf("latency ratio 20/10: %v %v", r, ok)
	}
	if got := row.cell(BenchRoced); got != "10.00 usec !" {
		t.Errorf("cell %q: want the median marked for its inf run", got)
	}
	if _, ok := row.Ratio(BenchRocedOneCPU); ok {
		t.Error("a ratio for a pair that never ran")
	}
}

func TestParseRdmaLinks(t *testing.T) {
	out := "link rxe0/1 state ACTIVE physical_state LINK_UP netdev eth0 \nlink rxeA/1 state ACTIVE physical_state LINK_UP netdev vethA \n"
	got := parseRdmaLinks(out)
	if len(got) != 2 || got[0] != (rxeLink{"rxe0", "eth0"}) || got[1] != (rxeLink{"rxeA", "vethA"}) {
		t.Errorf("parseRdmaLinks: %v", got)
	}
}

func TestBenchTestCase(t *testing.T) {
	c, err := BenchTest{Tool: "write_bw", Size: 65536, Iters: 5000}.Case(1024, 0.001)
	if err != nil || c.Iters != 5 || c.Dir != PeerServer {
		t.Errorf("scaled case: %+v %v, want -n 5 (perftest's minimum), the server on the peer's Ref side", c, err)
	}
	if _, err := (BenchTest{Tool: "rc_pingpong", Size: 1}).Case(1024, 1); err == nil {
		t.Error("a pingpong as a bench test")
	}
	if err := CheckStatic("testdata/README.md"); err == nil {
		t.Error("a text file passed as a static roced")
	}
}

func TestGuestBenchList(t *testing.T) {
	var b strings.Builder
	o := GuestBenchOptions{Tests: []BenchTest{{Tool: "send_lat", Size: 64, Iters: 1000}}, RocedEnv: []string{"GOROCE_BUSY_POLL=5000"}, Link: "afxdp"}
	if err := GuestBenchList(&b, NewLab(t.TempDir()), o); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"server: ib_send_lat -d rxeB -x 1 -s 64 -n 1000 -m 1024 -F -u 17\n",
		"client: env GOROCE_BUSY_POLL=5000 " + benchGuestBin + " send_lat -d 198.51.100.1 -x 1 -s 64 -n 1000 -m 1024 -F -u 17 -p 18516 --link afxdp 198.51.100.2\n",
		"server: env GOROCE_BUSY_POLL=5000 GOMAXPROCS=1 " + benchGuestBin + " send_lat -d 198.51.100.2 ",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("list lacks %q:\n%s", want, b.String())
		}
	}
}
