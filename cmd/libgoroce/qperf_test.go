package main

import (
	"bytes"
	"context"
	"os"
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
	port := freePort(t)

	var srvOut bytes.Buffer
	srv := preloaded(ctx, p.A.Link, qperf, "-lp", strconv.Itoa(port))
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := p.A.Do(srv.Start); err != nil {
		t.Fatal(err)
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Wait() }()
	defer func() {
		srv.Process.Kill()
		<-srvDone
	}()
	if err := waitListening(ctx, srv.Process.Pid, port, srvDone); err != nil {
		t.Fatalf("server: %v\n%s", err, srvOut.String())
	}
	run := func(args ...string) (string, error) {
		// -to: qperf's 5 s for each exchange with the server is short for
		// a loaded machine.
		args = append([]string{"-lp", strconv.Itoa(port), "-to", "60", "-t", "1", p.A.IPv4.String()}, args...)
		var out []byte
		err := p.B.Do(func() error {
			var err error
			out, err = preloaded(ctx, p.B.Link, qperf, args...).CombinedOutput()
			return err
		})
		return string(out), err
	}
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
	maps, err := os.ReadFile("/proc/" + strconv.Itoa(srv.Process.Pid) + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(maps, []byte("/libgoroce.so")) || bytes.Contains(maps, []byte("libgoroce-engine")) {
		t.Errorf("qperf's server: want libgoroce.so mapped and not the engine:\n%s", maps)
	}
}
