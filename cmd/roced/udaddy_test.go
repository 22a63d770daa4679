package main

import "testing"

// TestUdaddyLoopback: roced udaddy as server (-b 127.0.15.9) and as
// client (-s 127.0.15.9 -b 127.0.15.10), the whole command (flags,
// device, SIDR through the connection manager, datagrams), over UDP on
// loopback with addresses no other test uses: four UD services of ten
// messages each way, both print udaddy's lines and exit 0.
func TestUdaddyLoopback(t *testing.T) {
	args := []string{"-c", "4", "-C", "10", "-S", "1000"}
	srv, cli := loopbackCMPair(t, append([]string{"udaddy", "-b", "127.0.15.9"}, args...),
		append([]string{"udaddy", "-s", "127.0.15.9", "-b", "127.0.15.10"}, args...))
	wantS := "udaddy: starting server\nreceiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n"
	wantC := "udaddy: starting client\nudaddy: connecting\ninitiating data transfers\nreceiving data transfers\n" +
		"data transfers complete\ntest complete\nreturn status 0\n"
	if cli.code != 0 || srv.code != 0 || cli.out != wantC || srv.out != wantS {
		t.Fatalf("client %d:\n%s%s\nserver %d:\n%s%s", cli.code, cli.out, cli.stderr, srv.code, srv.out, srv.stderr)
	}
}

// TestUdaddyBadFlags: a bad command line is one line on stderr and
// udaddy's usage status, 1; nothing is opened.
func TestUdaddyBadFlags(t *testing.T) {
	checkBadFlags(t, "udaddy", [][]string{
		{"-P", "ipoib"}, {"-p", "2"}, {"-t", "32"}, {"-f", "gid"}, {"-c", "-2"},
		{"-s", "nohost"}, {"--port", "0"}, {"extra"}, {"--link", "tcp"},
	})
}
