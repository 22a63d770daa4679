package interop

import (
	"context"
	"debug/elf"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestJudgeQperf judges real qperf clients' outputs (testdata/qperf:
// Debian's qperf 0.4.11 over libgoroce.so across a veth, 2026-12-05).
func TestJudgeQperf(t *testing.T) {
	test := func(id string) QperfTest { return byID(t, QperfTests, id) }
	for _, tc := range []struct {
		name, test, file string
		exit             int
		reason, figure   string
	}{
		{name: "rc_lat over the CM", test: "rc_lat-cm1", file: "goroce-cm1-rc_lat.txt", figure: "127.00 us (client)"},
		{name: "rc_bw over the CM", test: "rc_bw-cm1", file: "goroce-cm1-rc_bw.txt", figure: "356.00 MB/sec (client)"},
		{name: "compare and swap", test: "rc_compare_swap_mr-cm1", file: "goroce-cm1-rc_compare_swap_mr.txt", figure: "8.29 K/sec (client)"},
		{name: "rc_lat by LID refused", test: "rc_lat", file: "goroce-rc_lat.txt", exit: 1},
		{name: "uc_lat refused", test: "uc_lat", file: "goroce-uc_lat.txt", exit: 1},
		{name: "ud_lat refused", test: "ud_lat", file: "goroce-ud_lat.txt", exit: 1},
		{name: "a refusal that exits 0", test: "uc_lat", file: "goroce-uc_lat.txt", reason: "want the run refused"},
		{name: "the wrong refusal", test: "ud_lat", file: "goroce-uc_lat.txt", exit: 1, reason: `want rxe's refusal "failed to create address handle`},
		{name: "a measuring test refused", test: "rc_lat-cm1", file: "goroce-rc_lat.txt", exit: 1, reason: "client exit status 1: rc_lat: ... failed to modify QP to RTR"},
		{name: "the wrong result line", test: "rc_bw-cm1", file: "goroce-cm1-rc_lat.txt", reason: `no "bw" result line`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := Output{Exit: tc.exit, Stdout: golden(t, "qperf/"+tc.file)}
			reasons, figs, note := JudgeQperf(test(tc.test), out)
			checkJudged(t, reasons, figs, tc.reason, tc.figure)
			if note != "" {
				t.Errorf("a note: %s", note)
			}
		})
	}
	// A measuring run whose figure is no number.
	reasons, _, _ := JudgeQperf(test("rc_lat-cm1"), Output{Stdout: "rc_lat:\n    latency  =  inf us\n"})
	if len(reasons) != 1 || !strings.Contains(reasons[0], "want a positive number") {
		t.Errorf("inf latency: reasons %q", reasons)
	}
	// A refusal whose text qperf lost (the guest's client against its own
	// server, CI 2026-12-07): refused, with a note, not compared.
	lost := Output{Exit: 1, Stdout: "ud_bw:\n", Stderr: "server: \n"}
	if reasons, _, note := JudgeQperf(test("ud_bw"), lost); len(reasons) != 0 || !strings.Contains(note, "lost by qperf") {
		t.Errorf("lost message: reasons %q, note %q", reasons, note)
	}
	// Only a refusal: a measuring test so ended fails, and so does a
	// server's message that came and is another.
	if reasons, _, _ := JudgeQperf(test("rc_lat-cm1"), lost); len(reasons) == 0 {
		t.Error("a measuring test with the lost-message form passed")
	}
	other := Output{Exit: 1, Stdout: "ud_bw:\n", Stderr: "server: failed to create QP\n"}
	if reasons, _, _ := JudgeQperf(test("ud_bw"), other); len(reasons) == 0 {
		t.Error("a refusal with another message passed")
	}
}

// TestParseUnittest reads a real run of rdma-core's suite (testdata/
// rdma-core: python3-pyverbs 44 over libgoroce.so, -v) and its damaged
// forms.
func TestParseUnittest(t *testing.T) {
	log := golden(t, "rdma-core/goroce0-44.txt")
	r, err := ParseUnittest(Output{Stderr: log})
	if err != nil {
		t.Fatal(err)
	}
	if r.Ran != 273 || len(r.Results) != 273 || len(r.Crashes) > 0 {
		t.Fatalf("ran %d, %d results, crashes %q", r.Ran, len(r.Results), r.Crashes)
	}
	if p, s := r.Count(TestPass), r.Count(TestSkip); p != 86 || s != 187 || r.Count(TestFail)+r.Count(TestError) != 0 {
		t.Errorf("%s, want 86 passed and 187 skipped", r.Summary())
	}
	if got := r.Results["tests.test_cq.CQTest.test_resize_cq"]; got != TestPass {
		t.Errorf("test_resize_cq (a docstring on its own line) %q", got)
	}
	if got := r.Skips["tests.test_odp.OdpTestCase.test_odp_rc_traffic"]; got != "ODP is not supported - No ODP caps" {
		t.Errorf("an ODP skip's reason %q", got)
	}
	if got := r.Skips["tests.test_rdmacm.CMTestCase.test_rdmacm_sync_traffic"]; got != "Device goroce0 doesn't have net interface" {
		t.Errorf("a skip in double quotes: reason %q", got)
	}

	// The interpreter killed in a test: no summary.
	i := strings.Index(log, "test_resize_cq (")
	cut, err := ParseUnittest(Output{Exit: 139, Stderr: log[:i] + "test_resize_cq (tests.test_cq.CQTest.test_resize_cq)\n"})
	if err != nil || !slices.Equal(cut.Crashes, []string{"tests.test_cq.CQTest.test_resize_cq"}) {
		t.Errorf("crashed run: %v crashes %q", err, cut.Crashes)
	}

	// Module by module (RdmaCoreSuiteScript), the same tests.
	mods := golden(t, "rdma-core/goroce0-44-modules.txt")
	m, err := ParseUnittest(Output{Stdout: mods})
	if err != nil {
		t.Fatal(err)
	}
	if m.Ran != 273 || len(m.Crashes) > 0 || !maps.Equal(m.Results, r.Results) || !maps.Equal(m.Skips, r.Skips) {
		t.Errorf("module by module: ran %d, crashes %q, %s; whole: %s", m.Ran, m.Crashes, m.Summary(), r.Summary())
	}
	// A module whose interpreter died (rxe's trixie run: "Segmentation
	// fault", status 139) and one that died before its first test: each
	// a crash, the other modules' results kept.
	j := strings.Index(mods, "test_resize_cq (")
	k := strings.Index(mods[j:], "### module ") + j
	crashed := mods[:j] + "test_resize_cq (tests.test_cq.CQTest.test_resize_cq)\nSegmentation fault\n### exit 139\n" + mods[k:]
	crashed = strings.Replace(crashed, "### module test_device\n", "### module test_device\nSegmentation fault\n### exit 139\n### module test_device_rest\n", 1)
	c, err := ParseUnittest(Output{Exit: 1, Stdout: crashed})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Crashes, []string{"tests.test_cq.CQTest.test_resize_cq", "test_device"}) {
		t.Errorf("crashes %q", c.Crashes)
	}
	if c.Results["tests.test_cq.CQTest.test_resize_cq"] != "" || c.Results["tests.test_device.DeviceTest.test_query_gid_ex_bad_flow"] != TestPass {
		t.Errorf("the crashed test has an outcome, or a later module lost its own")
	}
	// A summary that disagrees with the lines, and no run at all.
	if _, err := ParseUnittest(Output{Stderr: strings.Replace(log, "Ran 273 tests", "Ran 274 tests", 1)}); err == nil {
		t.Error("274 ran, 273 outcomes: no error")
	}
	if _, err := ParseUnittest(Output{Exit: 1, Stderr: "python3: can't open file 'run_tests.py'\n"}); err == nil ||
		!strings.Contains(err.Error(), "can't open file") {
		t.Errorf("no run: %v", err)
	}
}

// TestCompareSuites holds a run of the suite to a reference: the real
// goroce run against itself passes; each way a run can fall short of
// rxe's is a reason.
func TestCompareSuites(t *testing.T) {
	g, err := ParseUnittest(Output{Stderr: golden(t, "rdma-core/goroce0-44.txt")})
	if err != nil {
		t.Fatal(err)
	}
	if reasons, notes := CompareSuites(g, g); len(reasons) > 0 || len(notes) != 2 {
		t.Errorf("the same run: reasons %q notes %q", reasons, notes)
	}
	edit := func(id, outcome string) UnittestRun {
		r := UnittestRun{Ran: g.Ran, Results: map[string]string{}, Skips: g.Skips}
		for k, v := range g.Results {
			r.Results[k] = v
		}
		r.Results[id] = outcome
		return r
	}
	const skipped = "tests.test_rdmacm.CMTestCase.test_rdmacm_sync_traffic"
	const passed = "tests.test_cq.CQTest.test_resize_cq"
	const gap = "tests.test_qpex.QpExTestCase.test_qp_ex_rc_atomic_write"
	for _, tc := range []struct {
		name        string
		rxe, goroce UnittestRun
		want        []string
	}{
		{"rxe runs what goroce skips", edit(skipped, TestPass), g,
			[]string{"goroce0 skips what rxe0 runs: " + skipped, "goroce0 passes 86 tests, rxe0 87 (of the tests both"}},
		{"a failure", g, edit(passed, TestFail), []string{"goroce0: " + passed + " FAIL", "goroce0 passes 85 tests, rxe0 86"}},
		{"an error", g, edit(passed, TestError), []string{"goroce0: " + passed + " ERROR", "goroce0 passes 85 tests, rxe0 86"}},
		{"a test only rxe's release has counts for neither", edit("tests.test_new.NewTest.test_new", TestPass), g, nil},
		{"a skip on the gap list", edit(gap, TestPass), edit(gap, TestSkip), nil},
		{"a crash", g, UnittestRun{Results: map[string]string{}, Crashes: []string{passed}},
			[]string{"goroce0: the interpreter crashed in " + passed, "goroce0 passes 0 tests, rxe0 86"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reasons, _ := CompareSuites(tc.rxe, tc.goroce)
			match(t, "reasons", reasons, tc.want)
		})
	}
}

// TestJudgeUCX judges real ucx_perftest runs (testdata/ucx: Debian's UCX
// 1.13 over libgoroce.so on the host against rxe0 in the bookworm guest,
// 2026-12-06) with rxe0's packet counters around them.
func TestJudgeUCX(t *testing.T) {
	test := func(id string) UCXTest { return byID(t, UCXTests, id) }
	out := func(file string, exit int) Output { return Output{Exit: exit, Stdout: golden(t, "ucx/"+file)} }
	tagLat, putBW := test("ucx/rc_verbs/tag_lat"), test("ucx/rc_verbs/ucp_put_bw")
	for _, tc := range []struct {
		name           string
		u              UCXTest
		client, server Output
		toRxe          bool
		rcvd, sent     uint64
		reason, figure string
	}{
		{name: "tag_lat, rxe0 the client", u: tagLat, client: out("rc_tag_lat-goroce-server-client.txt", 0), server: out("rc_tag_lat-goroce-server-server.txt", 0),
			rcvd: 1040, sent: 1045, figure: "675.00 usec (client)"},
		{name: "put_bw into rxe0", u: putBW, client: out("rc_ucp_put_bw-rxe-server-client.txt", 0), server: out("rc_ucp_put_bw-rxe-server-server.txt", 0),
			toRxe: true, rcvd: 6420, sent: 130, figure: "24.03 MB/s (client)"},
		// 100 messages of 64 KiB are 6400 packets at MTU 1024: fewer
		// received means the data did not all come over RoCE.
		{name: "put_bw, too few packets", u: putBW, client: out("rc_ucp_put_bw-rxe-server-client.txt", 0), server: out("rc_ucp_put_bw-rxe-server-server.txt", 0),
			toRxe: true, rcvd: 6399, sent: 130, reason: "rxe0 received 6399 RoCE packets during the run, want at least 6400"},
		{name: "the packets went the other way", u: putBW, client: out("rc_ucp_put_bw-rxe-server-client.txt", 0), server: out("rc_ucp_put_bw-rxe-server-server.txt", 0),
			rcvd: 6420, sent: 130, reason: "rxe0 sent 130 RoCE packets"},
		{name: "other iterations", u: UCXTest{TLS: tagLat.TLS, Name: "rc_verbs", Test: "tag_lat", Size: 4096, N: 500}, client: out("rc_tag_lat-goroce-server-client.txt", 0),
			server: out("rc_tag_lat-goroce-server-server.txt", 0), rcvd: 5000, sent: 5000, reason: "client: 200 iterations, want 500"},
		{name: "UD dropped by UCX's GID check", u: test("ucx/ud_verbs/tag_lat"), client: out("ud_tag_lat-dgid-check-client.txt", 134),
			server: Output{Exit: 143, Stopped: true}, rcvd: 40, sent: 20, reason: "client exit status 134: [vm:21302:0:21302]       ud_ep.c:276  Fatal: UD endpoint"},
		{name: "a server that failed", u: tagLat, client: out("rc_tag_lat-goroce-server-client.txt", 0), server: Output{Exit: 1, Stderr: "ucx_perftest: no device"},
			rcvd: 1040, sent: 1045, reason: "server exit status 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reasons, figs := JudgeUCX(tc.u, tc.client, tc.server, tc.toRxe, tc.rcvd, tc.sent)
			checkJudged(t, reasons, figs, tc.reason, tc.figure)
		})
	}
}

// byID is the test of list with that ID.
func byID[T interface{ ID() string }](t *testing.T, list []T, id string) T {
	t.Helper()
	for _, x := range list {
		if x.ID() == id {
			return x
		}
	}
	t.Fatalf("no test %s", id)
	var zero T
	return zero
}

// checkJudged holds a judge's verdict to the case's: no reason when
// reason is empty, else one containing it; the figure, when one is given.
func checkJudged(t *testing.T, reasons []string, figs []Figure, reason, figure string) {
	t.Helper()
	if reason == "" {
		if len(reasons) > 0 {
			t.Fatalf("reasons %q, want none", reasons)
		}
	} else if len(reasons) != 1 || !strings.Contains(reasons[0], reason) {
		t.Fatalf("reasons %q, want one with %q", reasons, reason)
	}
	if got := FigureText(figs); figure != "" && got != figure {
		t.Errorf("figure %q, want %q", got, figure)
	}
}

// TestQperfShimBuilds builds the guest's qperf shim as the stage does,
// warnings as errors, and checks that it defines the two calls it
// wraps: the stage builds it only once a lab is up.
func TestQperfShimBuilds(t *testing.T) {
	if _, err := exec.LookPath("cc"); err != nil {
		t.Skip("no C compiler (make deps installs one)")
	}
	dir := t.TempDir()
	so, err := buildQperfShim(context.Background(), dir, "-Wall", "-Wextra", "-Werror")
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(so)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF {
			defined[s.Name] = true
		}
	}
	for _, want := range []string{"rdma_bind_addr", "rdma_listen", "exit"} {
		if !defined[want] {
			t.Errorf("the shim does not define %s", want)
		}
	}

	// Exit once: an exit() under way, called again (here from an atexit
	// handler, where glibc lets it go on through the other handlers; in
	// qperf from its SIGURG handler, where glibc's lock can hang it),
	// ends the process at once with the second call's status.
	prog := filepath.Join(dir, "exit2")
	psrc := prog + ".c"
	os.WriteFile(psrc, []byte(`#include <stdlib.h>
#include <unistd.h>
static void last(void) { write(1, "last\n", 5); }
static void again(void) { exit(7); }
int main(void) { atexit(last); atexit(again); exit(3); }
`), 0o644)
	if out, err := exec.Command("cc", "-o", prog, psrc).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		preload, out string
	}{
		{"", "last\n"}, // glibc's own: the other handler still runs
		{so, ""},       // the shim's: none does
	} {
		cmd := exec.Command(prog)
		if tc.preload != "" {
			cmd.Env = append(os.Environ(), "LD_PRELOAD="+tc.preload)
		}
		out, err := cmd.Output()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 7 || string(out) != tc.out {
			t.Errorf("preload %q: %v, output %q; want exit status 7 and %q", tc.preload, err, out, tc.out)
		}
	}
}
