package main

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testharness"
)

// Addresses no other test binds: the late server and its early client.
const (
	lateServer = "127.0.21.1"
	earlyCli   = "127.0.21.2"
)

// TestClientBeforeServer: every two-sided command works when its client
// is started before its server, as a recipe's "roced X server &" then the
// client on the next line may do: the client waits for its server
// (GOROCE_SERVER_WAIT) instead of failing, and both exit 0. The server
// starts only after the client has started: after the client's first line
// where it prints one before it connects (the pingpongs' local address,
// cmatose's and udaddy's "connecting"), else once the client's goroutine
// runs. Nothing sleeps: each side is waited for,
// within a bound far beyond what it needs on a loaded machine.
func TestClientBeforeServer(t *testing.T) {
	t.Setenv("GOROCE_SERVER_WAIT", "2m")
	port := 18631 // each case its own, as a TCP port may linger in TIME_WAIT
	next := func() string { port++; return strconv.Itoa(port) }
	type pair struct {
		name           string
		server, client []string
		// started is a line the client prints before it connects ("" for
		// none).
		started string
	}
	var cases []pair
	for _, pp := range []string{"rc_pingpong", "uc_pingpong", "ud_pingpong", "srq_pingpong"} {
		p := next()
		extra := []string{"-g", "1", "-n", "5", "-s", "64", "-p", p}
		if pp == "srq_pingpong" {
			extra = append(extra, "-q", "2")
		}
		cases = append(cases, pair{pp,
			append([]string{pp, "-d", lateServer}, extra...),
			append(append([]string{pp, "-d", earlyCli}, extra...), lateServer), "local address"})
	}
	for _, pt := range []string{"send_bw", "send_lat", "write_bw", "write_lat", "read_bw", "read_lat", "atomic_bw", "atomic_lat"} {
		p := next()
		extra := []string{"-x", "1", "-n", "5", "-p", p}
		cases = append(cases, pair{pt,
			append([]string{pt, "-d", lateServer}, extra...),
			append(append([]string{pt, "-d", earlyCli}, extra...), lateServer), ""})
	}
	// -R: the parameters go over an RDMA CM connection too, no TCP.
	p := next()
	cases = append(cases, pair{"send_bw -R",
		[]string{"send_bw", "-R", "-d", lateServer, "-x", "1", "-n", "5", "-p", p},
		[]string{"send_bw", "-R", "-d", earlyCli, "-x", "1", "-n", "5", "-p", p, lateServer}, ""})
	p = next()
	cases = append(cases,
		pair{"rping", []string{"rping", "-s", "-a", lateServer, "-p", p, "-C", "2"},
			[]string{"rping", "-c", "-a", lateServer, "-I", earlyCli, "-p", p, "-C", "2"}, ""},
	)
	p = next()
	cases = append(cases,
		pair{"rdma_server", []string{"rdma_server", "-s", lateServer, "-p", p},
			[]string{"rdma_client", "-s", lateServer, "-p", p, "--dev", earlyCli}, ""})
	p = next()
	cases = append(cases,
		pair{"ucmatose", []string{"ucmatose", "-b", lateServer, "-p", p, "-c", "3", "-C", "2"},
			[]string{"ucmatose", "-s", lateServer, "-b", earlyCli, "-p", p, "-c", "3", "-C", "2"}, "connecting"})
	p = next()
	cases = append(cases,
		pair{"udaddy", []string{"udaddy", "-b", lateServer, "--port", p, "-c", "3", "-C", "2"},
			[]string{"udaddy", "-s", lateServer, "-b", earlyCli, "--port", p, "-c", "3", "-C", "2"}, "connecting"})
	p = next()
	cases = append(cases,
		pair{"cmtime", []string{"cmtime", "-b", lateServer, "-p", p, "-c", "2"},
			[]string{"cmtime", "-s", lateServer, "-b", earlyCli, "-p", p, "-c", "2", "--rdma-core", "56"}, ""})

	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.server[0]], covered[c.client[0]] = true, true
	}
	for _, name := range twoSided {
		if !covered[name] {
			t.Errorf("roced %s: no case in TestClientBeforeServer", name)
		}
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cout := &startWriter{line: c.started, started: make(chan struct{})}
			var cerr, sout, serr syncBuffer
			cdone, sdone := make(chan int, 1), make(chan int, 1)
			running := make(chan struct{})
			go func() { close(running); cdone <- run(c.client, cout, &cerr) }()
			<-running
			bound := time.NewTimer(2 * time.Minute)
			defer bound.Stop()
			if c.started != "" {
				select {
				case <-cout.started:
				case code := <-cdone:
					t.Fatalf("the client exited %d before it connected:\n%s%s", code, cout.String(), cerr.String())
				case <-bound.C:
					t.Fatalf("the client printed no %q:\n%s%s", c.started, cout.String(), cerr.String())
				}
			}
			go func() { sdone <- run(c.server, &sout, &serr) }()
			// A side that fails ends the case at once: the other may be a
			// server waiting for a client that gave up, which only a
			// signal would end (its goroutine is left behind).
			codes := map[string]int{}
			for len(codes) < 2 {
				select {
				case codes["client"] = <-cdone:
				case codes["server"] = <-sdone:
				case <-bound.C:
					t.Fatalf("still running after 2m: exits %v\nclient:\n%s%s\nserver:\n%s%s", codes,
						cout.String(), cerr.String(), sout.String(), serr.String())
				}
				if codes["client"] != 0 || codes["server"] != 0 {
					t.Fatalf("exits %v\nclient:\n%s%s\nserver:\n%s%s", codes, cout.String(), cerr.String(),
						sout.String(), serr.String())
				}
			}
			if strings.Contains(cerr.String(), "REJECTED") || strings.Contains(cerr.String(), "refused") {
				t.Errorf("the client reported its server's absence although it reached it:\n%s", cerr.String())
			}
		})
	}
}

// TestServerWaitLine runs docs/tools.md's GOROCE_SERVER_WAIT line as
// written (a client for a server on 127.0.0.1), and its server once the
// client has started: the client waited, and both finish.
func TestServerWaitLine(t *testing.T) {
	if testing.Short() {
		t.Skip("roced's tools as real processes: make system runs it, without -race")
	}
	block, _ := testharness.ReadmeShBlock(t, "../../docs/tools.md", "A roced client waits for its server")
	if !strings.HasPrefix(block, "GOROCE_SERVER_WAIT=1m roced rc_pingpong") {
		t.Fatalf("docs/tools.md's line is %q", block)
	}
	rocedOnPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli := &proc{cmd: exec.CommandContext(ctx, "sh", "-c", block), done: make(chan error, 1)}
	var out testharness.SyncBuffer
	cli.cmd.Stdout, cli.cmd.Stderr = &out, &out
	if err := cli.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cli.done <- cli.cmd.Wait() }()
	pollUntil(t, ctx, "the client's local address", cli, func() bool { return strings.Contains(out.String(), "local address") })
	srv := startRoced(t, ctx, "", "rc_pingpong", "-d", "127.0.0.1", "-g", "1")
	if err := cli.wait(t); err != nil || !strings.Contains(out.String(), "iters in") {
		t.Fatalf("the client: %v\n%s", err, out.String())
	}
	if err := srv.wait(t); err != nil {
		t.Fatalf("the server: %v\n%s", err, srv.out.String())
	}
}
