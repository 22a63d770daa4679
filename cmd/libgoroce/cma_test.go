package main

// The librdmacm tools of Debian's rdmacm-utils (rping, ucmatose, udaddy)
// over the library, against roced's re-implementations of them and
// against themselves, each role both ways. They connect through the RDMA
// CM, not a TCP port, so a client started before its server listens is
// rejected (REJ 8, or SIDR status 1) and started again.

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cmSide is who runs one side of a CM tool: the real one over the
// library, or roced's.
type cmSide bool

const (
	libSide  cmSide = false
	rocedCmd cmSide = true
)

func (s cmSide) String() string {
	if s == rocedCmd {
		return "roced"
	}
	return "lib"
}

// cmPort is a port for the CM's service IDs, different for each case of
// a run (no socket holds it).
var cmPort = 7400 + int(time.Now().UnixNano()%500)

// runCM runs tool's server on addrA and its client on addrB (server
// args, then client args) and returns each one's stdout once both ended
// with status 0 (stderr apart: rping's unbuffered stderr would land in
// the middle of its buffered stdout).
func runCM(t *testing.T, tool string, server, client cmSide, sargs, cargs []string) (srvOut, cliOut string) {
	t.Helper()
	real := tool
	if server == libSide || client == libSide {
		real = toolCM(t, tool)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	command := func(s cmSide, addr string, args []string) *exec.Cmd {
		if s == rocedCmd {
			return exec.CommandContext(ctx, roced, append([]string{tool}, args...)...)
		}
		return preloaded(ctx, addr, real, args...)
	}
	srv := command(server, addrA, sargs)
	var sout, serr bytes.Buffer
	srv.Stdout, srv.Stderr = &sout, &serr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Wait() }()
	// A client refused because the server does not listen yet starts
	// again, until a deadline, not a count: under load the server may
	// take seconds to listen.
	listenBy := time.Now().Add(60 * time.Second)
	for {
		var cout, cerr bytes.Buffer
		cli := command(client, addrB, cargs)
		cli.Stdout, cli.Stderr = &cout, &cerr
		err := cli.Run()
		both := cout.String() + cerr.String()
		refused := strings.Contains(both, "REJECTED") || strings.Contains(both, "UNREACHABLE, error: 1")
		if err != nil && refused && time.Now().Before(listenBy) {
			select {
			case err := <-srvDone:
				t.Fatalf("server ended before the client connected: %v\n%s%s", err, sout.String(), serr.String())
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			t.Fatalf("client: %v\n%s\nstderr:\n%s", err, cout.String(), cerr.String())
		}
		cliOut = cout.String()
		break
	}
	if err := <-srvDone; err != nil {
		t.Fatalf("server: %v\n%s\nstderr:\n%s", err, sout.String(), serr.String())
	}
	return sout.String(), cliOut
}

func toolCM(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not installed (Debian's rdmacm-utils; .ci/run installs it): %v", name, err)
	}
	return p
}

// pingText is what rping.c puts in ping n of size bytes: its format,
// then letters from 'A'+n on, cut to size-1 bytes.
func pingText(n, size int) string {
	b := []byte(fmt.Sprintf("rdma-ping-%d: ", n))
	c := byte(65 + n%58)
	for len(b) < size-1 {
		b = append(b, c)
		if c++; c > 122 {
			c = 65
		}
	}
	return string(b[:size-1])
}

// checkPings checks that out has exactly count ping lines of prefix, each
// the text rping made of that ping.
func checkPings(t *testing.T, who, out, prefix string, count, size int) {
	t.Helper()
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			got = append(got, strings.TrimPrefix(l, prefix))
		}
	}
	if len(got) != count {
		t.Fatalf("%s: %d lines %q, want %d:\n%s", who, len(got), prefix, count, out)
	}
	for i, g := range got {
		if want := pingText(i, size); g != want {
			d := 0
			for d < len(g) && d < len(want) && g[d] == want[d] {
				d++
			}
			t.Fatalf("%s: ping %d (%d bytes) differs from rping's (%d bytes) at byte %d: %.40q", who, i, len(g), len(want), d, g[d:])
		}
	}
	if strings.Contains(out, "data mismatch") {
		t.Fatalf("%s: data mismatch:\n%s", who, out)
	}
}

// TestRping runs Debian's rping over the library against roced rping, in
// both roles, and against itself: -v prints each ping, whose text is
// checked on both sides, and the client's -V compares what came back;
// 64 bytes is one packet, 65535 (rping's largest) 64 packets at MTU
// 1024. Each side gets the RDMA CM through the library: rdma_listen and
// CONNECT_REQUEST, rdma_create_qp on the new cm_id, rdma_accept,
// ESTABLISHED and DISCONNECTED read by rping's cm thread off the event
// channel's fd (poll), the QP's flush ending its CQ thread.
func TestRping(t *testing.T) {
	for _, tc := range []struct {
		server, client cmSide
		size, count    int
	}{
		{libSide, rocedCmd, 64, 10},
		{rocedCmd, libSide, 64, 10},
		{libSide, rocedCmd, 65535, 10},
		{rocedCmd, libSide, 65535, 10},
		{libSide, libSide, 65535, 10},
	} {
		t.Run(fmt.Sprintf("%v-%v/%d", tc.server, tc.client, tc.size), func(t *testing.T) {
			cmPort++
			common := []string{"-a", addrA, "-p", strconv.Itoa(cmPort), "-v", "-C", strconv.Itoa(tc.count), "-S", strconv.Itoa(tc.size)}
			sout, cout := runCM(t, "rping", tc.server, tc.client, append([]string{"-s"}, common...),
				append([]string{"-c", "-I", addrB, "-V"}, common...))
			checkPings(t, "server", sout, "server ping data: ", tc.count, tc.size)
			checkPings(t, "client", cout, "ping data: ", tc.count, tc.size)
		})
	}
}

// TestUcmatose runs Debian's ucmatose over the library against roced's
// and itself: 5 connections at once on one event channel (ucmatose polls
// its fd), 3 messages each way on each, then disconnection.
func TestUcmatose(t *testing.T) {
	for _, tc := range []struct{ server, client cmSide }{{libSide, rocedCmd}, {rocedCmd, libSide}, {libSide, libSide}} {
		t.Run(fmt.Sprintf("%v-%v", tc.server, tc.client), func(t *testing.T) {
			cmPort++
			common := []string{"-p", strconv.Itoa(cmPort), "-c", "5", "-C", "3", "-S", "100"}
			sout, cout := runCM(t, "ucmatose", tc.server, tc.client, append([]string{"-b", addrA}, common...),
				append([]string{"-b", addrB, "-s", addrA}, common...))
			for who, out := range map[string]string{"server": sout, "client": cout} {
				if !strings.Contains(out, "data transfers complete") || !strings.Contains(out, "return status 0") {
					t.Errorf("%s:\n%s", who, out)
				}
			}
		})
	}
}

// TestUdaddy runs Debian's udaddy over the library against roced's and
// itself: UD services resolved with SIDR (RDMA_PS_UDP: the client's
// ESTABLISHED event carries the service's QPN, Q_Key and address vector),
// 3 clients' messages answered by the server through
// ibv_create_ah_from_wc with the QPN each sent as immediate data. udaddy
// has no port flag: its fixed port, 7174.
func TestUdaddy(t *testing.T) {
	for _, tc := range []struct{ server, client cmSide }{{libSide, rocedCmd}, {rocedCmd, libSide}, {libSide, libSide}} {
		t.Run(fmt.Sprintf("%v-%v", tc.server, tc.client), func(t *testing.T) {
			common := []string{"-c", "3", "-C", "3", "-S", "100"}
			sout, cout := runCM(t, "udaddy", tc.server, tc.client, append([]string{"-b", addrA}, common...),
				append([]string{"-b", addrB, "-s", addrA}, common...))
			for who, out := range map[string]string{"server": sout, "client": cout} {
				if !strings.Contains(out, "data transfers complete") || !strings.Contains(out, "return status 0") {
					t.Errorf("%s:\n%s", who, out)
				}
			}
		})
	}
}
