package main

import (
	"bytes"
	"context"
	"net/netip"
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
