package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cmToolRun is one side of a loopback run: its exit status and output.
type cmToolRun struct {
	code        int
	out, stderr string
}

// cmServer is a CM tool's server running in this process.
type cmServer struct {
	out, stderr syncBuffer
	done        chan int // its exit status
	stop        context.CancelFunc
}

// startCMServer runs the command args, a server of ucmatose, udaddy or
// rdma_server, and returns once it listens (cmListening), with what stops
// it as SIGINT would.
func startCMServer(t *testing.T, args []string) *cmServer {
	t.Helper()
	listening := make(chan context.CancelFunc, 1)
	cmListening = func(_ netip.AddrPort, stop context.CancelFunc) { listening <- stop }
	t.Cleanup(func() { cmListening = func(netip.AddrPort, context.CancelFunc) {} })
	s := &cmServer{done: make(chan int, 1)}
	go func() { s.done <- run(args, &s.out, &s.stderr) }()
	select {
	case s.stop = <-listening:
	case code := <-s.done:
		t.Fatalf("%s exited %d before it listened:\n%s%s", args[0], code, s.out.String(), s.stderr.String())
	}
	return s
}

// loopbackCMPair runs the command server and, once it listens, the
// command client; it returns both runs once both ended. A client that
// failed has its server stopped, which may be waiting for connections
// that will not come.
func loopbackCMPair(t *testing.T, server, client []string) (srv, cli cmToolRun) {
	t.Helper()
	s := startCMServer(t, server)
	var cout, cerr bytes.Buffer
	cli.code = run(client, &cout, &cerr)
	if cli.code != 0 {
		s.stop()
	}
	srv.code = <-s.done
	srv.out, srv.stderr, cli.out, cli.stderr = s.out.String(), s.stderr.String(), cout.String(), cerr.String()
	return srv, cli
}

// checkBadFlags checks that each bad command line of tool is one line on
// stderr, prefixed "roced TOOL: ", and the usage status 1, with nothing
// opened. (getopt's complaints, -h among them, add the tool's usage text
// on stdout: TestHelp.)
func checkBadFlags(t *testing.T, tool string, bad [][]string) {
	t.Helper()
	for _, args := range bad {
		var out, errw bytes.Buffer
		code := run(append([]string{tool}, args...), &out, &errw)
		lines := strings.Split(strings.TrimSuffix(errw.String(), "\n"), "\n")
		if code != 1 || len(lines) != 1 || !strings.HasPrefix(lines[0], "roced "+tool+": ") || out.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out.String(), errw.String())
		}
	}
}

// TestCMToolListensInStats: while a CM tool's server listens, roced stats
// prints its cm_id as rdma(8) prints the kernel's (state LISTEN, the port
// space, the bound address and port), and none once the server ended:
// the harness waits for a roced server as for a real one. rping's and
// cmtime's servers, which have no listening hook, are looked for until
// they are listed.
func TestCMToolListensInStats(t *testing.T) {
	pid := os.Getpid()
	// cmIDs returns the cm_id lines roced stats prints of this process
	// (none, and no device, before a server opened one or after it ended).
	cmIDs := func() string {
		t.Helper()
		var out, errb bytes.Buffer
		if rc := run([]string{"stats"}, &out, &errb); rc != 0 {
			t.Fatalf("stats: rc %d: %s", rc, errb.String())
		}
		var ids []string
		for _, l := range strings.SplitAfter(out.String(), "\n") {
			if strings.Contains(l, " cm_id ") && strings.Contains(l, " pid "+strconv.Itoa(pid)+" ") {
				ids = append(ids, l)
			}
		}
		return strings.Join(ids, "")
	}
	for _, c := range []struct {
		args   []string
		ctx    func(context.Context, []string, io.Writer, io.Writer) int // nil: run with cmListening
		ps     string
		listen string
	}{
		{[]string{"ucmatose", "-b", "127.0.15.11", "-p", "7193"}, nil, "TCP", "127.0.15.11:7193"},
		{[]string{"udaddy", "-b", "127.0.15.11"}, nil, "UDP", "127.0.15.11:7174"},
		{[]string{"rdma_server", "-s", "127.0.15.11", "-p", "7194"}, nil, "TCP", "127.0.15.11:7194"},
		{[]string{"rping", "-s", "-a", "127.0.15.11", "-p", "7195"}, runRping, "TCP", "127.0.15.11:7195"},
		{[]string{"cmtime", "-b", "127.0.15.11", "-p", "7196", "--rdma-core", "44"}, runCmtime, "TCP", "127.0.15.11:7196"},
	} {
		want := fmt.Sprintf("link goroce0/1 cm_id state LISTEN ps %s pid %d netdev lo src-addr %s\n", c.ps, pid, c.listen)
		var s *cmServer
		if c.ctx == nil {
			s = startCMServer(t, c.args)
		} else {
			ctx, cancel := context.WithCancel(context.Background())
			s = &cmServer{done: make(chan int, 1), stop: cancel}
			go func() { s.done <- c.ctx(ctx, c.args[1:], &s.out, &s.stderr) }()
			// An upper bound on the wait for the listing, not a guess at
			// how long it takes.
			for deadline := time.Now().Add(20 * time.Second); cmIDs() == "" && time.Now().Before(deadline); {
				select {
				case code := <-s.done:
					t.Fatalf("%s exited %d before it listened:\n%s%s", c.args[0], code, s.out.String(), s.stderr.String())
				case <-time.After(5 * time.Millisecond):
				}
			}
		}
		if got := cmIDs(); got != want {
			t.Errorf("%s: stats printed the cm_ids\n%s\nwant\n%s", c.args[0], got, want)
		}
		s.stop()
		<-s.done
		if got := cmIDs(); got != "" {
			t.Errorf("%s: a cm_id listed after the server ended:\n%s", c.args[0], got)
		}
	}
}
