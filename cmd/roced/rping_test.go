package main

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRpingBadFlags: a command line rping refuses is one line on stderr
// and rping's exit status for it, EINVAL; nothing is opened. (getopt's
// complaints, -h among them, are rping's usage alone: TestHelp.)
func TestRpingBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-s", "-S", "10"}, {"-s", "-S", "65536"}, {"-c"}, {"-s", "-C", "-1"},
		{"-s", "-p", "70000"}, {"-c", "-a", "nohost"}, {"-s", "-P"}, {"-v"}, {"-s", "extra"},
		{"-s", "--link", "tcp"},
	} {
		var out, errw bytes.Buffer
		code := run(append([]string{"rping"}, args...), &out, &errw)
		lines := strings.Split(strings.TrimSuffix(errw.String(), "\n"), "\n")
		if code != 22 || len(lines) != 1 || !strings.HasPrefix(lines[0], "roced rping: ") || out.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out.String(), errw.String())
		}
	}
}

// TestRpingLoopback: roced rping -s and roced rping -c, the whole command
// (flags, device, connection manager, loop), over UDP on loopback
// (127.0.15.3 and .4, addresses no other test uses): ten pings checked
// (-V) and printed (-v) on both sides, both exit 0.
func TestRpingLoopback(t *testing.T) {
	var sout, serr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"rping", "-s", "-a", "127.0.15.3", "-p", "7190", "-v", "-C", "10", "-S", "3000"}, &sout, &serr)
	}()
	var cout, cerr bytes.Buffer
	var code int
	// The client's REQ, should it come before the server listens, is
	// rejected (REJ 8): try again until it is not.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		cout.Reset()
		cerr.Reset()
		code = run([]string{"rping", "-c", "-a", "127.0.15.3", "-I", "127.0.15.4", "-p", "7190", "-v", "-V", "-C", "10", "-S", "3000"}, &cout, &cerr)
		if !strings.Contains(cerr.String(), "REJECTED, error 8") || time.Now().After(deadline) {
			break
		}
	}
	scode := <-done
	if code != 0 || scode != 0 || strings.Count(cout.String(), "ping data: rdma-ping-") != 10 ||
		strings.Count(sout.String(), "server ping data: rdma-ping-") != 10 ||
		!strings.Contains(cerr.String(), "client DISCONNECT EVENT...") || !strings.Contains(serr.String(), "server DISCONNECT EVENT...") {
		t.Fatalf("client %d:\n%s%s\nserver %d:\n%s%s", code, cout.String(), cerr.String(), scode, sout.String(), serr.String())
	}
}

// syncBuffer is a bytes.Buffer for a goroutine's output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRdmaServerLoopback: roced rdma_server and roced rdma_client, the
// whole commands, over UDP on loopback (127.0.15.5 and .6, addresses no
// other test uses): both print the examples' two lines and exit 0.
func TestRdmaServerLoopback(t *testing.T) {
	srv, cli := loopbackCMPair(t, []string{"rdma_server", "-s", "127.0.15.5", "-p", "7191"},
		[]string{"rdma_client", "-s", "127.0.15.5", "--dev", "127.0.15.6", "-p", "7191"})
	if cli.code != 0 || srv.code != 0 || cli.out != "rdma_client: start\nrdma_client: end 0\n" ||
		srv.out != "rdma_server: start\nrdma_server: end 0\n" {
		t.Fatalf("client %d:\n%s%s\nserver %d:\n%s%s", cli.code, cli.out, cli.stderr, srv.code, srv.out, srv.stderr)
	}
}

// TestRdmaServerBadFlags: a bad command line is one line on stderr and
// the examples' exit status 1; nothing is opened.
func TestRdmaServerBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"rdma_server", "-s", "nohost"}, {"rdma_server", "-p", "0"}, {"rdma_client", "-s", "nohost"},
		{"rdma_client", "extra"}, {"rdma_client", "--link", "tcp"},
	} {
		var out, errw bytes.Buffer
		code := run(args, &out, &errw)
		lines := strings.Split(strings.TrimSuffix(errw.String(), "\n"), "\n")
		if code != 1 || len(lines) != 1 || !strings.HasPrefix(lines[0], "roced "+args[0]+": ") || out.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out.String(), errw.String())
		}
	}
}

// startWriter is a syncBuffer that closes started once line has been
// written: a server's first line, printed once its device is open.
type startWriter struct {
	syncBuffer
	line    string
	started chan struct{}
	once    sync.Once
}

func (w *startWriter) Write(p []byte) (int, error) {
	n, err := w.syncBuffer.Write(p)
	if strings.Contains(w.String(), w.line) {
		w.once.Do(func() { close(w.started) })
	}
	return n, err
}
