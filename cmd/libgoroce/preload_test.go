package main

// These tests run Debian's own binaries (ibverbs-utils: ibv_devices,
// ibv_devinfo, ibv_rc_pingpong) with the library preloaded, as a user
// would. TestMain builds the library itself, with the flags the Makefile
// uses, into a temporary directory: the tests always exercise this
// source, and `go test ./cmd/libgoroce` needs no `make build` first. They
// skip only when the binaries are missing (ibverbs-utils not installed;
// make deps installs it), and say so.
//
// The devices are loopback addresses of their own (127.0.77.1 and .2;
// loopback answers all of 127/8), so that they meet no other test's
// port 4791, and the pingpongs' TCP port is a free one.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
)

const (
	addrA = "127.0.77.1"
	addrB = "127.0.77.2"
)

var (
	lib   string // the built libgoroce.so
	roced string // the built roced
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "libgoroce-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		lib = filepath.Join(dir, "libgoroce.so")
		roced = filepath.Join(dir, "roced")
		// The library as the Makefile builds it: libgoroce.so and, beside
		// it, the engine it loads.
		build := exec.Command("../../scripts/build-libgoroce.sh", dir)
		build.Env = append(os.Environ(), "GO="+goTool())
		for _, cmd := range []*exec.Cmd{build, exec.Command(goTool(), "build", "-o", roced, "../roced")} {
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", strings.Join(cmd.Args, " "), err)
				return 1
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

// goTool is the go command that runs the test (GOROOT/bin/go), else the
// one on PATH.
func goTool() string {
	if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
		p := filepath.Join(strings.TrimSpace(string(out)), "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "go"
}

// tool returns the path of a Debian binary, skipping the test without it.
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not installed (Debian's ibverbs-utils; make deps installs it): %v", name, err)
	}
	return p
}

// preloaded makes a command of a real binary run on goroce over netdevs.
func preloaded(ctx context.Context, netdevs string, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib, "GOROCE_NETDEV="+netdevs)
	return cmd
}

func TestDevices(t *testing.T) {
	devices, devinfo := tool(t, "ibv_devices"), tool(t, "ibv_devinfo")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	out, err := preloaded(ctx, addrA+",lo", devices).CombinedOutput()
	if err != nil {
		t.Fatalf("ibv_devices: %v\n%s", err, out)
	}
	for _, want := range []string{"goroce0", "goroce1"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("ibv_devices does not list %s:\n%s", want, out)
		}
	}

	out, err = preloaded(ctx, addrA, devinfo, "-v").CombinedOutput()
	if err != nil {
		t.Fatalf("ibv_devinfo -v: %v\n%s", err, out)
	}
	for _, want := range []string{
		"hca_id:\tgoroce0",
		"phys_port_cnt:\t\t\t1",
		"max_qp_wr:\t\t\t32768",
		"max_srq:\t\t\t1048576",
		"max_srq_wr:\t\t\t32768",
		"max_ah:\t\t\t\t1048576",
		"state:\t\t\tPORT_ACTIVE (4)",
		"link_layer:\t\tEthernet",
		"gid_tbl_len:\t\t1024", // rxe's table length (gidTableLen)
		"GID[  1]:\t\t::ffff:" + addrA + ", RoCE v2",
	} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("ibv_devinfo -v lacks %q:\n%s", want, out)
		}
	}
}

// TestBindings checks, through the dynamic linker's own account
// (LD_DEBUG=bindings), that the binary's versioned references bind to the
// preloaded library and not to libibverbs: what libibverbs.map is for.
func TestBindings(t *testing.T) {
	devinfo := tool(t, "ibv_devinfo")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := preloaded(ctx, addrA, devinfo)
	cmd.Env = append(cmd.Env, "LD_DEBUG=bindings")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ibv_devinfo: %v\n%s", err, out)
	}
	for _, sym := range []string{
		"ibv_get_device_list' [IBVERBS_1.1]", "ibv_open_device' [IBVERBS_1.1]",
		"ibv_query_device' [IBVERBS_1.1]", "ibv_query_port' [IBVERBS_1.1]",
		"ibv_query_gid' [IBVERBS_1.1]", "ibv_query_gid_type' [IBVERBS_PRIVATE_34]",
		"ibv_close_device' [IBVERBS_1.1]",
	} {
		want := fmt.Sprintf("binding file %s [0] to %s [0]: normal symbol `%s", devinfo, lib, sym)
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("no %q in LD_DEBUG=bindings", want)
		}
	}
}

// TestPingpongs runs Debian's ibv_rc_pingpong, ibv_ud_pingpong (UD QPs
// and address handles) and ibv_srq_pingpong (four QPs on one SRQ) on
// goroce against itself and against roced's in both roles, data checked
// (-c), polling and sleeping on completion events (-e).
func TestPingpongs(t *testing.T) {
	type side struct{ roced bool }
	for _, tc := range []struct {
		name           string
		tool           string // roced's command; the real one is ibv_ + it
		server, client side
		size           int
		events         bool
		extra          []string
		// poll is GOROCE_POLL_MODE for both sides: "" leaves each its
		// default (the library's poll mode, roced's receive goroutines),
		// "1" puts roced in poll mode too, "0" takes the library out of it.
		poll string
	}{
		{"rc/lib-lib/64", "rc_pingpong", side{}, side{}, 64, false, nil, ""},
		{"rc/lib-lib/4096", "rc_pingpong", side{}, side{}, 4096, true, nil, ""},
		{"rc/lib-lib/65536", "rc_pingpong", side{}, side{}, 65536, false, nil, ""},
		{"rc/lib-roced/4096", "rc_pingpong", side{}, side{roced: true}, 4096, false, nil, ""},
		{"rc/roced-lib/65536", "rc_pingpong", side{roced: true}, side{}, 65536, true, nil, ""},
		{"ud/lib-lib/1024", "ud_pingpong", side{}, side{}, 1024, false, nil, ""},
		{"ud/lib-roced/1", "ud_pingpong", side{}, side{roced: true}, 1, true, nil, ""},
		{"ud/roced-lib/4096", "ud_pingpong", side{roced: true}, side{}, 4096, false, nil, ""},
		{"srq/lib-lib/4096", "srq_pingpong", side{}, side{}, 4096, false, []string{"-q", "4"}, ""},
		{"srq/lib-roced/65536", "srq_pingpong", side{}, side{roced: true}, 65536, true, []string{"-q", "4"}, ""},
		{"srq/roced-lib/1", "srq_pingpong", side{roced: true}, side{}, 1, false, []string{"-q", "4"}, ""},
		{"rc/lib-lib/64/poll", "rc_pingpong", side{}, side{}, 64, false, nil, "1"},
		{"rc/lib-roced/65536/poll", "rc_pingpong", side{}, side{roced: true}, 65536, false, nil, "1"},
		{"rc/roced-lib/4096/poll", "rc_pingpong", side{roced: true}, side{}, 4096, true, nil, "1"},
		{"ud/lib-lib/1024/poll", "ud_pingpong", side{}, side{}, 1024, false, nil, "1"},
		{"srq/lib-roced/4096/poll", "srq_pingpong", side{}, side{roced: true}, 4096, false, []string{"-q", "4"}, "1"},
		{"rc/lib-lib/64/nopoll", "rc_pingpong", side{}, side{}, 64, false, nil, "0"},
		{"rc/lib-roced/4096/nopoll", "rc_pingpong", side{}, side{roced: true}, 4096, true, nil, "0"},
		{"ud/lib-lib/1024/nopoll", "ud_pingpong", side{}, side{}, 1024, false, nil, "0"},
		{"srq/lib-lib/4096/nopoll", "srq_pingpong", side{}, side{}, 4096, true, []string{"-q", "4"}, "0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			real := tool(t, "ibv_"+tc.tool)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			port := freePort(t)
			args := append([]string{"-g", "1", "-p", strconv.Itoa(port), "-s", strconv.Itoa(tc.size), "-n", "200", "-c"}, tc.extra...)
			if tc.events {
				args = append(args, "-e")
			}
			command := func(s side, addr string, peer ...string) *exec.Cmd {
				var cmd *exec.Cmd
				if s.roced {
					cmd = exec.CommandContext(ctx, roced, append(append([]string{tc.tool, "-d", addr}, args...), peer...)...)
					cmd.Env = os.Environ()
				} else {
					cmd = preloaded(ctx, addr, real, append(append([]string{"-d", "goroce0"}, args...), peer...)...)
				}
				if tc.poll != "" {
					cmd.Env = append(cmd.Env, "GOROCE_POLL_MODE="+tc.poll)
				}
				return cmd
			}
			srv := command(tc.server, addrA)
			var srvOut bytes.Buffer
			srv.Stdout, srv.Stderr = &srvOut, &srvOut
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			srvDone := make(chan error, 1)
			go func() { srvDone <- srv.Wait() }()
			if err := waitListening(ctx, srv.Process.Pid, port, srvDone); err != nil {
				t.Fatalf("server: %v\n%s", err, srvOut.String())
			}
			out, err := command(tc.client, addrB, addrA).CombinedOutput()
			check(t, "client", out, err)
			err = <-srvDone
			check(t, "server", srvOut.Bytes(), err)
		})
	}
}

// TestVerbsCheck builds testdata/verbs_check.c against the system's
// libibverbs (as any program is built) and runs it preloaded: RDMA WRITE,
// READ, fetch-and-add, compare-and-swap and SEND with immediate between
// two devices, every completion awaited with poll() on the completion
// channel's fd, and the errno of what the library refuses. The C compiler
// and libibverbs-dev are what this package is built with, so nothing here
// is skipped.
func TestVerbsCheck(t *testing.T) {
	bin := buildC(t, "verbs_check")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := preloaded(ctx, addrA+","+addrB, bin).CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("verbs_check: ok")) {
		t.Fatalf("verbs_check: %v\n%s", err, out)
	}
}

// TestMemoryWindows builds testdata/mw_check.c and runs it preloaded:
// type 1 windows bound with ibv_bind_mw, type 2 windows bound with
// IBV_WR_BIND_MW and ibv_wr_bind_mw, WRITE and READ through each from the
// other device, every byte checked; after ibv_dealloc_mw, IBV_WR_LOCAL_INV,
// ibv_wr_local_inv and the peer's IBV_WR_SEND_WITH_INV (its receive
// carrying IBV_WC_WITH_INV and the key) the peer's WRITE is
// IBV_WC_REM_ACCESS_ERR; a bind to a region without IBV_ACCESS_MW_BIND
// completes with IBV_WC_MW_BIND_ERR; ibv_query_device advertises windows.
func TestMemoryWindows(t *testing.T) {
	runC(t, "mw_check")
}

// TestWorkRequestAPI builds testdata/wr_check.c and runs it preloaded:
// SEND (inline, inline list, SGE, with immediate, with invalidate), RDMA
// WRITE (batched, with immediate), READ into an SGE list, both atomics
// and a UD SEND through ibv_wr_*, every byte and completion checked; and
// the batch's rules: ibv_wr_abort and a failed batch post nothing, and
// ibv_wr_complete returns the failing call's errno; then a CQ from
// ibv_create_cq_ex read with the ibv_cq_ex poll API and with ibv_poll_cq.
func TestWorkRequestAPI(t *testing.T) {
	runC(t, "wr_check")
}

// runC builds testdata/NAME.c and runs it on two devices, preloaded,
// expecting it to print "NAME: ok".
func runC(t *testing.T, name string) {
	bin := buildC(t, name)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := preloaded(ctx, addrA+","+addrB, bin).CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte(name+": ok")) {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
}

// buildC compiles testdata/NAME.c against the system's libibverbs, as any
// program is built, and returns the binary.
// libs are more libraries to link (-lrdmacm).
func buildC(t testing.TB, name string, libs ...string) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	bin := filepath.Join(t.TempDir(), name)
	args := append([]string{"-Wall", "-O2", "-o", bin, "testdata/" + name + ".c"}, libs...)
	if out, err := exec.Command(cc, append(args, "-libverbs")...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cc, err, out)
	}
	return bin
}

// check fails the test unless a pingpong finished cleanly: exit status 0,
// its closing line printed, no data check failure.
func check(t *testing.T, who string, out []byte, err error) {
	t.Helper()
	switch {
	case err != nil:
		t.Errorf("%s: %v\n%s", who, err, out)
	case !bytes.Contains(out, []byte("iters in")):
		t.Errorf("%s: no \"iters in\" line:\n%s", who, out)
	case bytes.Contains(bytes.ToLower(out), []byte("invalid data")):
		t.Errorf("%s: data check failed:\n%s", who, out)
	}
}

// freePort returns a TCP port nothing listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitListening waits until a TCP socket listens on port in the network
// namespace of process pid, as /proc/PID/net/tcp{,6} show it (connecting
// to find out would take the pingpong server's one accept), or the server
// exits, or ctx ends.
func waitListening(ctx context.Context, pid, port int, exited <-chan error) error {
	want := fmt.Sprintf(":%04X ", port)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, f := range []string{"tcp", "tcp6"} {
			f = fmt.Sprintf("/proc/%d/net/%s", pid, f)
			if listening(f, want) {
				return nil
			}
		}
		select {
		case err := <-exited:
			return fmt.Errorf("exited before listening: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("not listening on port %d: %w", port, ctx.Err())
		case <-tick.C:
		}
	}
}

// listening reports whether the table f has a socket in state LISTEN (0A)
// whose local address ends in want (":PORT ").
func listening(f, want string) bool {
	b, err := os.ReadFile(f)
	if err != nil {
		return false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 3 && strings.HasSuffix(fields[1]+" ", want) && fields[3] == "0A" {
			return true
		}
	}
	return false
}

// TestVethReadme runs the README's lines (and docs/libgoroce.md's, the
// same) as written, on two hosts: two
// network namespaces joined by a veth pair, each side's interface renamed
// eth0 and given the README's address only (192.0.2.2 the server,
// 192.0.2.1 the client). It needs root and is skipped by -short (make test runs it
// in its system stage).
func TestVethReadme(t *testing.T) {
	real := tool(t, "ibv_rc_pingpong")
	tool(t, "ibv_devices")
	tool(t, "ibv_devinfo")
	p := readmeVeth(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	port := freePort(t)

	var srvOut bytes.Buffer
	srv := preloaded(ctx, "eth0", real, "-d", "goroce0", "-g", "1", "-p", strconv.Itoa(port))
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := p.A.Do(srv.Start); err != nil {
		t.Fatal(err)
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Wait() }()
	if err := waitListening(ctx, srv.Process.Pid, port, srvDone); err != nil {
		t.Fatalf("server: %v\n%s", err, srvOut.String())
	}
	// The README's block, as a shell runs it, but for the library's path
	// and the port (readmeScript).
	script := readmeScript(t, strconv.Itoa(port))
	var out []byte
	err := p.B.Do(func() error {
		var err error
		out, err = exec.CommandContext(ctx, "sh", "-ec", script).CombinedOutput()
		return err
	})
	check(t, "client", out, err)
	for _, want := range []string{"goroce0", "GID[  1]:\t\t::ffff:192.0.2.1, RoCE v2", "GID ::ffff:192.0.2.2"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("client output lacks %q:\n%s", want, out)
		}
	}
	err = <-srvDone // before reading srvOut: the server writes it until it exits
	check(t, "server", srvOut.Bytes(), err)
}

// readmeVeth makes a veth pair whose ends are named eth0 in their
// namespaces and given the docs' addresses only: 192.0.2.2 (A, the
// server) and 192.0.2.1 (B, the client).
func readmeVeth(t *testing.T) *netns.Pair {
	t.Helper()
	p := netns.New(t, netns.Config{})
	for _, e := range []struct {
		end  *netns.End
		addr string
	}{{p.A, "192.0.2.2/24"}, {p.B, "192.0.2.1/24"}} {
		for _, args := range [][]string{
			{"link", "set", e.end.Link, "down"},
			{"link", "set", e.end.Link, "name", "eth0"},
			{"addr", "flush", "dev", "eth0"},
			{"addr", "add", e.addr, "dev", "eth0"},
			{"link", "set", "eth0", "up"},
		} {
			if out, err := e.end.Run("ip", args...); err != nil {
				t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
	}
	return p
}
