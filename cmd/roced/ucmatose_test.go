package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestUcmatoseLoopback: roced ucmatose as server (-b 127.0.15.7) and as
// client (-s 127.0.15.7 -b 127.0.15.8), the whole command (flags, device,
// connection manager, transfers), over UDP on loopback with addresses no
// other test uses: four connections of ten messages each way, both print
// cmatose's lines and exit 0.
func TestUcmatoseLoopback(t *testing.T) {
	var serr syncBuffer
	sout := &startWriter{line: "cmatose: starting server\n", started: make(chan struct{})}
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"ucmatose", "-b", "127.0.15.7", "-p", "7192", "-c", "4", "-C", "10", "-S", "3000"}, sout, &serr)
	}()
	// The server prints its first line once its device and connection
	// manager are up: a REQ sent before would find no socket and be lost
	// until its retry, 6.4 s later.
	select {
	case <-sout.started:
	case scode := <-done:
		t.Fatalf("the server exited %d:\n%s%s", scode, sout.String(), serr.String())
	}
	var cout, cerr bytes.Buffer
	var code int
	// A REQ that comes before the server listens is rejected (REJ 8):
	// try again until it is not.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		cout.Reset()
		cerr.Reset()
		code = run([]string{"ucmatose", "-s", "127.0.15.7", "-b", "127.0.15.8", "-p", "7192", "-c", "4", "-C", "10", "-S", "3000"}, &cout, &cerr)
		if code != 8 || !strings.Contains(cout.String(), "RDMA_CM_EVENT_REJECTED, error: 8") || time.Now().After(deadline) {
			break
		}
	}
	scode := <-done
	wantS := "cmatose: starting server\ninitiating data transfers\ncompleting sends\nreceiving data transfers\n" +
		"data transfers complete\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n"
	wantC := "cmatose: starting client\ncmatose: connecting\nreceiving data transfers\nsending replies\n" +
		"data transfers complete\ntest complete\nreturn status 0\n"
	if code != 0 || scode != 0 || cout.String() != wantC || sout.String() != wantS {
		t.Fatalf("client %d:\n%s%s\nserver %d:\n%s%s", code, cout.String(), cerr.String(), scode, sout.String(), serr.String())
	}
}

// TestUcmatoseBadFlags: a bad command line is one line on stderr and
// cmatose's usage status, 1; nothing is opened.
func TestUcmatoseBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-P", "udp"}, {"-P", "ib"}, {"-t", "32"}, {"-a", "14"}, {"-f", "gid"}, {"-c", "-2"},
		{"-s", "nohost"}, {"-p", "0"}, {"extra"}, {"--link", "tcp"}, {"-q"},
	} {
		var out, errw bytes.Buffer
		code := run(append([]string{"ucmatose"}, args...), &out, &errw)
		lines := strings.Split(strings.TrimSuffix(errw.String(), "\n"), "\n")
		if code != 1 || len(lines) != 1 || !strings.HasPrefix(lines[0], "roced ucmatose: ") || out.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out.String(), errw.String())
		}
	}
}
