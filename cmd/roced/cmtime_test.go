package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/tools/cmtime"
)

// cmtimePair runs roced cmtime as server (sargs) and as client (cargs),
// the whole command (flags, device, connection manager, the out-of-band
// socket), on loopback with addresses no other test uses. The client is
// started again while it finds nothing listening yet (refused, which
// names the server's start-up, never a failure of the run); stop ends
// the server (44's never ends on its own) once the client is done.
func cmtimePair(t *testing.T, sargs, cargs []string, refused string, stop bool) (sout, cout string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sctx, sstop := context.WithCancel(ctx)
	defer sstop()
	var so, se syncBuffer
	done := make(chan int, 1)
	go func() { done <- runCmtime(sctx, sargs, &so, &se) }()
	var co, ce bytes.Buffer
	var code int
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		co.Reset()
		ce.Reset()
		code = runCmtime(ctx, cargs, &co, &ce)
		if code == 0 || !strings.Contains(co.String()+ce.String(), refused) || time.Now().After(deadline) {
			break
		}
		select {
		case scode := <-done:
			t.Fatalf("the server exited %d:\n%s%s", scode, so.String(), se.String())
		default:
		}
	}
	if stop {
		sstop()
	}
	scode := <-done
	if code != 0 || scode != 0 || ce.Len() != 0 || se.String() != "" {
		t.Fatalf("client %d:\n%s%s\nserver %d:\n%s%s", code, co.String(), ce.String(), scode, so.String(), se.String())
	}
	return so.String(), co.String()
}

func checkSkeleton(t *testing.T, who, out string, v cmtime.Version, server bool, n int, bound bool) {
	t.Helper()
	if got, want := cmtime.Skeleton(out), cmtime.WantSkeleton(v, server, n, bound); got != want {
		t.Errorf("%s:\n%s\nwant the skeleton:\n%s", who, out, want)
	}
}

// TestCmtimeLoopback56: rdma-core 56's exchange, an auto server and a
// client told to speak 56: each prints cmtime's lines and two tables.
func TestCmtimeLoopback56(t *testing.T) {
	sout, cout := cmtimePair(t, []string{"-b", "127.0.15.9", "-p", "7193", "-c", "4"},
		[]string{"-s", "127.0.15.9", "-b", "127.0.15.10", "-p", "7193", "-c", "4", "--rdma-core", "56"}, "connection refused", false)
	checkSkeleton(t, "server", sout, cmtime.V56, true, 4, false)
	checkSkeleton(t, "client", cout, cmtime.V56, false, 4, true)
}

// TestCmtimeLoopback44: rdma-core 44's exchange, a server told to speak
// 44 (no socket) and an auto client, which finds no socket and speaks 44.
func TestCmtimeLoopback44(t *testing.T) {
	sout, cout := cmtimePair(t, []string{"-b", "127.0.15.9", "-p", "7194", "--rdma-core", "44"},
		[]string{"-s", "127.0.15.9", "-b", "127.0.15.10", "-p", "7194", "-c", "5"}, "RDMA_CM_EVENT_REJECTED, error: 8", true)
	checkSkeleton(t, "server", sout, cmtime.V44, true, 5, false)
	checkSkeleton(t, "client", cout, cmtime.V44, false, 5, true)
}

// TestCmtimeSocket: -S times plain TCP connections on both sides.
func TestCmtimeSocket(t *testing.T) {
	sout, cout := cmtimePair(t, []string{"-S", "-b", "127.0.15.9", "-p", "7195", "-c", "6"},
		[]string{"-S", "-s", "127.0.15.9", "-p", "7195", "-c", "6", "-n", "2"}, "connection refused", false)
	for _, c := range []struct {
		out, first, last string
		lines            int
	}{
		{sout, "Server baseline socket setup\nAccept sockets\nClosing sockets\nServer baseline socket results:\ncm_conn                 6\n", "destroy qp              0          0          0          0          0          0\n", 4 + 3 + 17},
		{cout, "Client baseline socket setup\nCreating sockets\nConnecting sockets\nClosing sockets\nClient baseline socket results:\ncm_conn                 6\n", "destroy qp              0          0          0          0          0          0\n", 5 + 3 + 17},
	} {
		if !strings.HasPrefix(c.out, c.first) || !strings.HasSuffix(c.out, c.last) || strings.Count(c.out, "\n") != c.lines {
			t.Errorf("output:\n%s", c.out)
		}
	}
}

// TestCmtimeBadFlags: a bad command line is one line on stderr and
// cmtime's usage status, 1; nothing is opened. (getopt's complaints, -h
// among them, add the usage text: TestHelp.)
func TestCmtimeBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-L"}, {"-C", "1.2.3.4"}, {"-c", "0"}, {"-s", "nohost"}, {"-p", "0"}, {"extra"}, {"--rdma-core", "57"},
		{"--rdma-core", "44", "-S"}, {"--link", "tcp"},
	} {
		var out, errw bytes.Buffer
		code := runCmtime(context.Background(), args, &out, &errw)
		lines := strings.Split(strings.TrimSuffix(errw.String(), "\n"), "\n")
		if code != 1 || len(lines) != 1 || !strings.HasPrefix(lines[0], "roced cmtime: ") || out.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out.String(), errw.String())
		}
	}
}
