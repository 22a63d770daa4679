package main

// The librdmacm tools of Debian's rdmacm-utils (rping, ucmatose, udaddy)
// over the library, against roced's re-implementations of them and
// against themselves, each role both ways. They connect through the RDMA
// CM, not a TCP port, so a client started before its server listens is
// rejected (REJ 8, or SIDR status 1) and started again.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/interop"
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
	return runCMPair(t, tool, tool, server, client, sargs, cargs)
}

// runCMPair is runCM for a tool whose client is another program
// (rdma_server and rdma_client; roced's commands have the same names).
func runCMPair(t *testing.T, srvTool, cliTool string, server, client cmSide, sargs, cargs []string) (srvOut, cliOut string) {
	t.Helper()
	reals := map[string]string{}
	for _, x := range []struct {
		side cmSide
		tool string
	}{{server, srvTool}, {client, cliTool}} {
		if x.side == libSide {
			reals[x.tool] = toolCM(t, x.tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	command := func(s cmSide, tool, addr string, args []string) *exec.Cmd {
		if s == rocedCmd {
			return exec.CommandContext(ctx, roced, append([]string{tool}, args...)...)
		}
		return preloaded(ctx, addr, reals[tool], args...)
	}
	srv := command(server, srvTool, addrA, sargs)
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
		cli := command(client, cliTool, addrB, cargs)
		cli.Stdout, cli.Stderr = &cout, &cerr
		err := cli.Run()
		both := cout.String() + cerr.String()
		refused := strings.Contains(both, "REJECTED") || strings.Contains(both, "UNREACHABLE, error: 1") ||
			strings.Contains(both, "rdma_connect: Connection refused") // rdma_client's only word
		if err != nil && refused && time.Now().Before(listenBy) {
			select {
			case err := <-srvDone:
				t.Fatalf("server ended before the client connected: %v\n%s%s", err, sout.String(), serr.String())
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if err != nil && !teardownRace(t, client, cliTool, "client", err, cerr.String()) {
			t.Fatalf("client: %v\n%s\nstderr:\n%s", err, cout.String(), cerr.String())
		}
		cliOut = cout.String()
		break
	}
	if err := <-srvDone; err != nil && !teardownRace(t, server, srvTool, "server", err, serr.String()) {
		t.Fatalf("server: %v\n%s\nstderr:\n%s", err, sout.String(), serr.String())
	}
	return sout.String(), cliOut
}

// teardownRace reports whether a real rping's failure err is its own
// teardown race (interop.RpingTeardownRace: its CM thread reading the
// event channel its main thread had destroyed, after the connection was
// over), which the tests judge as exit 0, as the matrix does. The pings
// are still checked.
func teardownRace(t *testing.T, side cmSide, tool, role string, err error, stderr string) bool {
	var ee *exec.ExitError
	if side != libSide || tool != "rping" || !errors.As(err, &ee) || !interop.RpingTeardownRace(role, ee.ExitCode(), stderr) {
		return false
	}
	t.Logf("%s: rping's teardown race (exit 255 after its DISCONNECT EVENT), judged as exit 0", role)
	return true
}

func toolCM(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not installed (Debian's rdmacm-utils; make deps installs it): %v", name, err)
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

// TestRdmaServer runs Debian's rdma_server and rdma_client over the
// library, against roced's and each other: synchronous ids from
// rdma_create_ep (rdma_getaddrinfo's address, the QP and its CQs made
// with it), rdma_get_request, an inline SEND each way with lkey 0
// (rdma_post_send without a region), rdma_get_send_comp and
// rdma_get_recv_comp on the library's completion channels, and
// rdma_disconnect waiting for DISCONNECTED.
func TestRdmaServer(t *testing.T) {
	for _, tc := range []struct{ server, client cmSide }{{libSide, rocedCmd}, {rocedCmd, libSide}, {libSide, libSide}} {
		t.Run(fmt.Sprintf("%v-%v", tc.server, tc.client), func(t *testing.T) {
			cmPort++
			port := strconv.Itoa(cmPort)
			cargs := []string{"-s", addrA, "-p", port}
			if tc.client == rocedCmd {
				cargs = append(cargs, "--dev", addrB)
			}
			sout, cout := runCMPair(t, "rdma_server", "rdma_client", tc.server, tc.client, []string{"-s", addrA, "-p", port}, cargs)
			if !strings.Contains(sout, "rdma_server: end 0") {
				t.Errorf("server:\n%s", sout)
			}
			if !strings.Contains(cout, "rdma_client: end 0") {
				t.Errorf("client:\n%s", cout)
			}
		})
	}
}

// TestCMACheck builds testdata/cma_check.c against the system's
// librdmacm and runs it preloaded in a network namespace of its own
// (loopback for the two devices, a veth pair whose end 198.51.100.1/24
// no device is on, no default route): an RC connection between two
// devices of one process with the QPs and CQs the library makes,
// rdma_init_qp_attr before, during and after it (each side's path the
// other's QP and PSNs), rdma_establish's and rdma_get_request's EINVAL,
// a connection of external QPs both sides (ibv_create_qp on id->pd,
// moved by rdma_init_qp_attr, CONNECT_RESPONSE and rdma_establish, a
// SEND each way, the QPs left in RTS by the disconnection),
// RDMA_CM_EVENT_ADDR_ERROR (-ENODEV) for a destination off the devices,
// ENETUNREACH for one with no route, and the same errors, and a REJ's
// ECONNREFUSED, through synchronous ids (rdma_create_ep).
func TestCMACheck(t *testing.T) {
	netns.Privileged(t)
	bin := buildC(t, "cma_check", "-lrdmacm")
	ns := fmt.Sprintf("goroce-cma-%d", os.Getpid())
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	ip("-n", ns, "link", "set", "lo", "up")
	ip("-n", ns, "link", "add", "d0", "type", "veth", "peer", "name", "d1")
	ip("-n", ns, "addr", "add", "198.51.100.1/24", "dev", "d0")
	ip("-n", ns, "addr", "add", "2001:db8:42::1/64", "dev", "d0", "nodad")
	ip("-n", ns, "link", "set", "d0", "up")
	ip("-n", ns, "link", "set", "d1", "up")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmPort += 3 // the connections, the synchronous ids, the external QPs
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "env", "LD_PRELOAD="+lib, "GOROCE_NETDEV="+addrA+","+addrB,
		bin, addrA, addrB, "198.51.100.2", "203.0.113.1", strconv.Itoa(cmPort)).CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("cma_check: ok")) {
		t.Fatalf("cma_check: %v\n%s", err, out)
	}
	// 127.0.0.1 and ::1 with the device on d0, off loopback, as a host's
	// rxe is on its Ethernet interface.
	cmPort += 2
	out, err = exec.CommandContext(ctx, "ip", "netns", "exec", ns, "env", "LD_PRELOAD="+lib, "GOROCE_NETDEV=d0",
		bin, "loopback", strconv.Itoa(cmPort)).CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("cma_check: ok")) {
		t.Fatalf("cma_check loopback: %v\n%s", err, out)
	}
}

// TestTeardownRace checks what the rping tests forgive: a real rping that
// exited 255 with exactly its teardown race on stderr, and nothing else
// (another status, another line, roced's rping, another tool).
func TestTeardownRace(t *testing.T) {
	run := func(exit int, stderr string) error {
		cmd := exec.Command("sh", "-c", `printf '%s' "$1" >&2; exit "$2"`, "sh", stderr, strconv.Itoa(exit))
		var e bytes.Buffer
		cmd.Stderr = &e
		err := cmd.Run()
		if e.String() != stderr {
			t.Fatalf("sh wrote %q, want %q", e.String(), stderr)
		}
		return err
	}
	race := "client DISCONNECT EVENT...\nrdma_get_cm_event: Bad file descriptor\n"
	for _, c := range []struct {
		side       cmSide
		tool, role string
		exit       int
		stderr     string
		want       bool
	}{
		{libSide, "rping", "client", 255, race, true},
		{libSide, "rping", "server", 255, race, false}, // the server's line names the server
		{libSide, "rping", "client", 1, race, false},
		{libSide, "rping", "client", 255, "cq completion failed status 5\n" + race, false},
		{rocedCmd, "rping", "client", 255, race, false},
		{libSide, "ucmatose", "client", 255, race, false},
	} {
		err := run(c.exit, c.stderr)
		if got := teardownRace(t, c.side, c.tool, c.role, err, c.stderr); got != c.want {
			t.Errorf("%v %s %s, exit %d, stderr %q: forgiven %v, want %v", c.side, c.tool, c.role, c.exit, c.stderr, got, c.want)
		}
	}
}
