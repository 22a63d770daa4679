package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestUdaddyLoopback: roced udaddy as server (-b 127.0.15.9) and as
// client (-s 127.0.15.9 -b 127.0.15.10), the whole command (flags,
// device, SIDR through the connection manager, datagrams), over UDP on
// loopback with addresses no other test uses: four UD services of ten
// messages each way, both print udaddy's lines and exit 0.
func TestUdaddyLoopback(t *testing.T) {
	var serr syncBuffer
	sout := &startWriter{line: "udaddy: starting server\n", started: make(chan struct{})}
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"udaddy", "-b", "127.0.15.9", "-c", "4", "-C", "10", "-S", "1000"}, sout, &serr)
	}()
	// The server prints its first line once its device and connection
	// manager are up: a SIDR_REQ sent before would find no socket and be
	// lost until its retry, 6.4 s later.
	select {
	case <-sout.started:
	case scode := <-done:
		t.Fatalf("the server exited %d:\n%s%s", scode, sout.String(), serr.String())
	}
	var cout, cerr bytes.Buffer
	var code int
	// A SIDR_REQ that comes before the server listens is answered
	// "unsupported" (1): try again until it is not.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		cout.Reset()
		cerr.Reset()
		code = run([]string{"udaddy", "-s", "127.0.15.9", "-b", "127.0.15.10", "-c", "4", "-C", "10", "-S", "1000"}, &cout, &cerr)
		if code != 1 || !strings.Contains(cout.String(), "RDMA_CM_EVENT_UNREACHABLE, error: 1") || time.Now().After(deadline) {
			break
		}
	}
	scode := <-done
	wantS := "udaddy: starting server\nreceiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n"
	wantC := "udaddy: starting client\nudaddy: connecting\ninitiating data transfers\nreceiving data transfers\n" +
		"data transfers complete\ntest complete\nreturn status 0\n"
	if code != 0 || scode != 0 || cout.String() != wantC || sout.String() != wantS {
		t.Fatalf("client %d:\n%s%s\nserver %d:\n%s%s", code, cout.String(), cerr.String(), scode, sout.String(), serr.String())
	}
}

// TestUdaddyBadFlags: a bad command line is one line on stderr and
// udaddy's usage status, 1; nothing is opened.
func TestUdaddyBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-P", "ipoib"}, {"-p", "2"}, {"-t", "32"}, {"-f", "gid"}, {"-c", "-2"},
		{"-s", "nohost"}, {"--port", "0"}, {"extra"}, {"--link", "tcp"}, {"-q"},
	} {
		var out, errw bytes.Buffer
		code := run(append([]string{"udaddy"}, args...), &out, &errw)
		lines := strings.Split(strings.TrimSuffix(errw.String(), "\n"), "\n")
		if code != 1 || len(lines) != 1 || !strings.HasPrefix(lines[0], "roced udaddy: ") || out.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out.String(), errw.String())
		}
	}
}
