package main

import "testing"

// TestUcmatoseLoopback: roced ucmatose as server (-b 127.0.15.7) and as
// client (-s 127.0.15.7 -b 127.0.15.8), the whole command (flags, device,
// connection manager, transfers), over UDP on loopback with addresses no
// other test uses: four connections of ten messages each way, both print
// cmatose's lines and exit 0.
func TestUcmatoseLoopback(t *testing.T) {
	args := []string{"-p", "7192", "-c", "4", "-C", "10", "-S", "3000"}
	srv, cli := loopbackCMPair(t, append([]string{"ucmatose", "-b", "127.0.15.7"}, args...),
		append([]string{"ucmatose", "-s", "127.0.15.7", "-b", "127.0.15.8"}, args...))
	wantS := "cmatose: starting server\ninitiating data transfers\ncompleting sends\nreceiving data transfers\n" +
		"data transfers complete\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n"
	wantC := "cmatose: starting client\ncmatose: connecting\nreceiving data transfers\nsending replies\n" +
		"data transfers complete\ntest complete\nreturn status 0\n"
	if cli.code != 0 || srv.code != 0 || cli.out != wantC || srv.out != wantS {
		t.Fatalf("client %d:\n%s%s\nserver %d:\n%s%s", cli.code, cli.out, cli.stderr, srv.code, srv.out, srv.stderr)
	}
}

// TestUcmatoseBadFlags: a bad command line is one line on stderr and
// cmatose's usage status, 1; nothing is opened.
func TestUcmatoseBadFlags(t *testing.T) {
	checkBadFlags(t, "ucmatose", [][]string{
		{"-P", "udp"}, {"-P", "ib"}, {"-t", "32"}, {"-a", "14"}, {"-f", "gid"}, {"-c", "-2"},
		{"-s", "nohost"}, {"-p", "0"}, {"extra"}, {"--link", "tcp"},
	})
}
