package main

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
)

// cmToolRun is one side of a loopback run: its exit status and output.
type cmToolRun struct {
	code        int
	out, stderr string
}

// loopbackCMPair runs the command server and, once it listens
// (cmListening), the command client; it returns both runs once both
// ended. A client that failed has its server stopped (as SIGINT would),
// which may be waiting for connections that will not come.
func loopbackCMPair(t *testing.T, server, client []string) (srv, cli cmToolRun) {
	t.Helper()
	listening := make(chan context.CancelFunc, 1)
	cmListening = func(_ netip.AddrPort, stop context.CancelFunc) { listening <- stop }
	defer func() { cmListening = func(netip.AddrPort, context.CancelFunc) {} }()
	var sout, serr syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(server, &sout, &serr) }()
	var stop context.CancelFunc
	select {
	case stop = <-listening:
	case scode := <-done:
		t.Fatalf("the server exited %d before it listened:\n%s%s", scode, sout.String(), serr.String())
	}
	var cout, cerr bytes.Buffer
	cli.code = run(client, &cout, &cerr)
	if cli.code != 0 {
		stop()
	}
	srv.code = <-done
	srv.out, srv.stderr, cli.out, cli.stderr = sout.String(), serr.String(), cout.String(), cerr.String()
	return srv, cli
}

// checkBadFlags checks that each bad command line of tool is one line on
// stderr, prefixed "roced TOOL: ", and the usage status 1, with nothing
// opened.
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

// TestCMToolListensInStats: once a CM tool's server listens, roced stats
// prints its cm_id as rdma(8) prints the kernel's (state LISTEN, the port
// space, the bound address and port), and none once the server ended:
// the harness waits for a roced server as for a real one.
func TestCMToolListensInStats(t *testing.T) {
	pid := os.Getpid()
	for _, c := range []struct {
		args   []string
		ps     string
		listen string
	}{
		{[]string{"ucmatose", "-b", "127.0.15.11", "-p", "7193"}, "TCP", "127.0.15.11:7193"},
		{[]string{"udaddy", "-b", "127.0.15.11"}, "UDP", "127.0.15.11:7174"},
		{[]string{"rdma_server", "-s", "127.0.15.11", "-p", "7194"}, "TCP", "127.0.15.11:7194"},
	} {
		listening := make(chan context.CancelFunc, 1)
		cmListening = func(_ netip.AddrPort, stop context.CancelFunc) { listening <- stop }
		var sout, serr syncBuffer
		done := make(chan int, 1)
		go func() { done <- run(c.args, &sout, &serr) }()
		var stop context.CancelFunc
		select {
		case stop = <-listening:
		case code := <-done:
			t.Fatalf("%s exited %d before it listened:\n%s%s", c.args[0], code, sout.String(), serr.String())
		}
		var out, errb bytes.Buffer
		if rc := run([]string{"stats", strconv.Itoa(pid)}, &out, &errb); rc != 0 {
			t.Fatalf("stats: rc %d: %s", rc, errb.String())
		}
		want := fmt.Sprintf("link goroce0/1 cm_id state LISTEN ps %s pid %d netdev lo src-addr %s\n", c.ps, pid, c.listen)
		if !strings.HasSuffix(out.String(), want) || strings.Count(out.String(), " cm_id ") != 1 {
			t.Errorf("%s: stats printed\n%s\nwant one cm_id line: %s", c.args[0], out.String(), want)
		}
		stop()
		<-done
		out.Reset()
		run([]string{"stats", strconv.Itoa(pid)}, &out, &errb)
		if strings.Contains(out.String(), " cm_id ") {
			t.Errorf("%s: a cm_id listed after the server ended:\n%s", c.args[0], out.String())
		}
	}
	cmListening = func(netip.AddrPort, context.CancelFunc) {}
}
