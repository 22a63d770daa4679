package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
)

// TestQperf runs Debian's qperf on goroce across a veth pair, the server
// in one network namespace and the client in the other, both preloaded.
// qperf's server forks a child per test, which opens the device: the
// server itself must never load the engine (its maps say so), and each
// child must. Every RC test runs over rdma_cm (-cm1), among them the
// verifying atomics (ver_rc_compare_swap checks every value returned).
//
// qperf connects UC and UD QPs, and RC ones without -cm1, by LID: its
// address vectors have no GRH (is_global 0), which a RoCE device refuses
// (the kernel's rdma_check_ah_attr, for rxe and mlx5 alike: EINVAL), as
// goroce does; those runs must fail in exactly that way, and the server
// must go on serving. Needs root (skipped by -short; make test runs it in
// its system stage) and qperf (.ci/run installs it).
func TestQperf(t *testing.T) {
	qperf := tool(t, "qperf")
	p := netns.New(t, netns.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	q := startQperf(ctx, t, p, qperf)
	run := func(args ...string) (string, error) { return q.run(ctx, "1", args...) }
	for _, tc := range []struct{ test, want string }{
		{"rc_lat", "latency"},
		{"rc_bw", "bw"},
		{"rc_bi_bw", "bw"},
		{"rc_rdma_write_bw", "bw"},
		{"rc_rdma_write_lat", "latency"},
		{"rc_rdma_read_bw", "bw"},
		{"rc_rdma_read_lat", "latency"},
		{"rc_compare_swap_mr", "msg_rate"},
		{"rc_fetch_add_mr", "msg_rate"},
		{"ver_rc_compare_swap", "msg_rate"},
		{"ver_rc_fetch_add", "msg_rate"},
	} {
		out, err := run("-cm1", tc.test)
		if err != nil || !strings.Contains(out, tc.want+" ") || strings.Contains(out, "failed") {
			t.Errorf("qperf -cm1 %s: %v\n%s", tc.test, err, out)
		} else {
			t.Logf("-cm1 %s", strings.Join(strings.Fields(out), " "))
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rc_lat"}, "failed to modify QP to RTR"},
		{[]string{"uc_lat"}, "failed to modify QP to RTR"},
		{[]string{"uc_bw"}, "failed to modify QP to RTR"},
		{[]string{"ud_lat"}, "failed to create address handle: Invalid argument"},
		{[]string{"ud_bw"}, "failed to create address handle: Invalid argument"},
	} {
		out, err := run(tc.args...)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("qperf %s: %v, want it to fail with %q as on rxe\n%s", tc.args, err, tc.want, out)
		}
	}
	// The children served every test; the server that forked them never
	// started the Go runtime.
	maps, err := os.ReadFile("/proc/" + strconv.Itoa(q.srv.Process.Pid) + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(maps, []byte("/libgoroce.so")) || bytes.Contains(maps, []byte("libgoroce-engine")) {
		t.Errorf("qperf's server: want libgoroce.so mapped and not the engine:\n%s", maps)
	}
}

// qperfServer is Debian's qperf server over the library in a pair's
// namespace A, for clients in B (TestQperf, BenchmarkApps).
type qperfServer struct {
	p     *netns.Pair
	qperf string
	port  int
	srv   *exec.Cmd
}

// startQperf starts the server and waits for its listener; the test's
// cleanup stops it.
func startQperf(ctx context.Context, tb testing.TB, p *netns.Pair, qperf string) *qperfServer {
	tb.Helper()
	q := &qperfServer{p: p, qperf: qperf, port: freePort(tb)}
	var srvOut bytes.Buffer
	q.srv = preloaded(ctx, p.A.Link, qperf, "-lp", strconv.Itoa(q.port))
	q.srv.Stdout, q.srv.Stderr = &srvOut, &srvOut
	if err := p.A.Do(q.srv.Start); err != nil {
		tb.Fatal(err)
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- q.srv.Wait() }()
	tb.Cleanup(func() {
		q.srv.Process.Kill()
		<-srvDone
	})
	if err := waitListening(ctx, q.srv.Process.Pid, q.port, srvDone); err != nil {
		tb.Fatalf("qperf server: %v\n%s", err, srvOut.String())
	}
	return q
}

// run runs a qperf client in B for secs seconds a test: its output, and
// its error.
func (q *qperfServer) run(ctx context.Context, secs string, args ...string) (string, error) {
	// -to: qperf's 5 s for each exchange with the server is short for
	// a loaded machine.
	args = append([]string{"-lp", strconv.Itoa(q.port), "-to", "60", "-t", secs, q.p.A.IPv4.String()}, args...)
	var out []byte
	err := q.p.B.Do(func() error {
		var err error
		out, err = preloaded(ctx, q.p.B.Link, q.qperf, args...).CombinedOutput()
		return err
	})
	return string(out), err
}
