package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// cmToolRun is one side of a loopback run: its exit status and output.
type cmToolRun struct {
	code        int
	out, stderr string
}

// loopbackCMPair runs the command server, and once it printed its first
// line (its device and connection manager are up: a REQ or SIDR_REQ sent
// before would find no socket and be lost until its retry, 6.4 s later)
// the command client, again while it exits with refusedCode and prints
// refused (nothing listens yet), for up to 20 s. It returns both runs
// once both ended.
func loopbackCMPair(t *testing.T, server []string, firstLine string, client []string, refusedCode int, refused string) (srv, cli cmToolRun) {
	t.Helper()
	var serr syncBuffer
	sout := &startWriter{line: firstLine, started: make(chan struct{})}
	done := make(chan int, 1)
	go func() { done <- run(server, sout, &serr) }()
	select {
	case <-sout.started:
	case scode := <-done:
		t.Fatalf("the server exited %d:\n%s%s", scode, sout.String(), serr.String())
	}
	var cout, cerr bytes.Buffer
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		cout.Reset()
		cerr.Reset()
		cli.code = run(client, &cout, &cerr)
		if cli.code != refusedCode || !strings.Contains(cout.String(), refused) || time.Now().After(deadline) {
			break
		}
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
