package pingpong

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests run Main, a server and a client, each as the tool would run
// in its own process: server on 127.0.19.1, client on 127.0.19.2 (both UDP
// port 4791, kernel UDP link), one TCP port per pair.

// ppOut is what one run printed and returned.
type ppOut struct {
	stdout, stderr string
	code           int
}

func (o ppOut) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", o.code, o.stdout, o.stderr)
}

func ppExec(ctx context.Context, tool Tool, args []string) ppOut {
	var out, errb bytes.Buffer
	code := Main(ctx, tool, args, &out, &errb)
	return ppOut{out.String(), errb.String(), code}
}

var (
	ppListenMu sync.Mutex
	ppListenCh = map[int]chan struct{}{}
)

func init() {
	ppListening = func(port int) {
		ppListenMu.Lock()
		defer ppListenMu.Unlock()
		if ch, ok := ppListenCh[port]; ok {
			close(ch)
			delete(ppListenCh, port)
		}
	}
}

// ppOnListen returns a channel closed once a server of this process
// listens on port.
func ppOnListen(t *testing.T, port string) <-chan struct{} {
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{})
	ppListenMu.Lock()
	ppListenCh[p] = ch
	ppListenMu.Unlock()
	return ch
}

// ppFreePort returns a TCP port nobody listens on just now.
func ppFreePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.19.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// ppPair runs a server with srvArgs and a client with cliArgs (both get
// -p; the server gets -d ppSrv, the client -d ppCli and the host ppSrv).
func ppPair(t *testing.T, tool Tool, srvArgs, cliArgs []string) (srv, cli ppOut) {
	t.Helper()
	return ppPairOn(t, tool, ppSrv, ppCli, srvArgs, cliArgs)
}

// ppSrv and ppCli are the package's own addresses: no other package's
// test binds them, so packages may run side by side.
const ppSrv, ppCli = "127.0.19.1", "127.0.19.2"

// ppPairOn is ppPair between the addresses srvAddr and cliAddr.
func ppPairOn(t *testing.T, tool Tool, srvAddr, cliAddr string, srvArgs, cliArgs []string) (srv, cli ppOut) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	port := ppFreePort(t)
	listening := ppOnListen(t, port)
	done := make(chan ppOut, 1)
	go func() {
		done <- ppExec(ctx, tool, append(append([]string{}, srvArgs...), "-p", port, "-d", srvAddr))
	}()
	select {
	case <-listening:
	case srv = <-done: // the server ended before it listened
		return srv, ppOut{code: -1, stderr: "(client not started: the server ended before it listened)\n"}
	}
	cli = ppExec(ctx, tool, append(append([]string{}, cliArgs...), "-p", port, "-d", cliAddr, srvAddr))
	if cli.code != 0 {
		// A failed client may leave the server waiting for traffic that
		// will never come (as the real server would): bound the wait.
		select {
		case srv = <-done:
			return srv, cli
		case <-time.After(5 * time.Second):
			cancel()
		}
	}
	return <-done, cli
}

var (
	ppLocalRE  = regexp.MustCompile(`^  local address:  LID 0x0000, QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6})([,:]) GID (\S+)$`)
	ppRemoteRE = regexp.MustCompile(`^  remote address: LID 0x0000, QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6}), GID (\S+)$`)
	ppBytesRE  = regexp.MustCompile(`^(\d+) bytes in \d+\.\d\d seconds = (\d+\.\d\d|inf) Mbit/sec$`)
	ppItersRE  = regexp.MustCompile(`^(\d+) iters in \d+\.\d\d seconds = \d+\.\d\d usec/iter$`)
)

// ppAddrs checks the address lines of one side's stdout and returns them
// as "QPN PSN GID" strings, local and remote.
func ppAddrs(t *testing.T, tool Tool, who string, lines []string, numQP int, myGID, peerGID string) (local, remote []string) {
	t.Helper()
	if len(lines) < 2*numQP {
		t.Fatalf("%s: %d lines, want at least %d address lines", who, len(lines), 2*numQP)
	}
	sep := ","
	if tool == UD {
		sep = ":" // ud_pingpong's quirk, on its local line only
	}
	for i, l := range lines[:numQP] {
		m := ppLocalRE.FindStringSubmatch(l)
		if m == nil || m[3] != sep || m[4] != myGID {
			t.Fatalf("%s line %d: %q is not a local address line with GID %s", who, i+1, l, myGID)
		}
		local = append(local, m[1]+" "+m[2]+" "+m[4])
	}
	for i, l := range lines[numQP : 2*numQP] {
		m := ppRemoteRE.FindStringSubmatch(l)
		if m == nil || m[3] != peerGID {
			t.Fatalf("%s line %d: %q is not a remote address line with GID %s", who, numQP+i+1, l, peerGID)
		}
		remote = append(remote, m[1]+" "+m[2]+" "+m[3])
	}
	return local, remote
}

// ppCheck checks a successful pair: exit 0, nothing on stderr, address
// lines that agree with each other, the result lines with the byte count
// the tool computes, and nothing else (so -c found every page intact).
func ppCheck(t *testing.T, tool Tool, size, iters, numQP int, srv, cli ppOut) {
	t.Helper()
	ppCheckOn(t, tool, ppSrv, ppCli, size, iters, numQP, srv, cli)
}

// ppCheckOn is ppCheck for a pair between srvAddr and cliAddr.
func ppCheckOn(t *testing.T, tool Tool, srvAddr, cliAddr string, size, iters, numQP int, srv, cli ppOut) {
	t.Helper()
	if srv.code != 0 || cli.code != 0 || srv.stderr != "" || cli.stderr != "" {
		t.Fatalf("server:\n%v\nclient:\n%v", srv, cli)
	}
	sl := strings.Split(strings.TrimSuffix(srv.stdout, "\n"), "\n")
	cl := strings.Split(strings.TrimSuffix(cli.stdout, "\n"), "\n")
	sLocal, sRemote := ppAddrs(t, tool, "server", sl, numQP, "::ffff:"+srvAddr, "::ffff:"+cliAddr)
	cLocal, cRemote := ppAddrs(t, tool, "client", cl, numQP, "::ffff:"+cliAddr, "::ffff:"+srvAddr)
	for i := range numQP {
		if sRemote[i] != cLocal[i] || cRemote[i] != sLocal[i] {
			t.Fatalf("QP %d: the sides disagree on the addresses\nserver:\n%s\nclient:\n%s", i, srv.stdout, cli.stdout)
		}
	}
	for _, side := range []struct {
		who   string
		lines []string
	}{{"server", sl}, {"client", cl}} {
		rest := side.lines[2*numQP:]
		if len(rest) != 2 {
			t.Fatalf("%s: %d lines after the addresses, want the 2 result lines:\n%s", side.who, len(rest), strings.Join(rest, "\n"))
		}
		m := ppBytesRE.FindStringSubmatch(rest[0])
		if m == nil || m[1] != strconv.Itoa(size*iters*2) {
			t.Fatalf("%s: %q, want %d bytes", side.who, rest[0], size*iters*2)
		}
		m = ppItersRE.FindStringSubmatch(rest[1])
		if m == nil || m[1] != strconv.Itoa(iters) {
			t.Fatalf("%s: %q, want %d iters", side.who, rest[1], iters)
		}
	}
}

// TestPingpongSizes runs every tool over the UDP link at the sizes around
// one MTU and a large one, with -c, as the lab's matrix does.
func TestPingpongSizes(t *testing.T) {
	const iters = 5
	for _, tc := range []struct {
		tool  Tool
		sizes []int
		extra []string
		numQP int
	}{
		{RC, []int{1, 1024, 1025, 65536}, nil, 1},
		{UC, []int{1, 1024, 1025, 65536}, nil, 1},
		// UD messages must fit the port MTU: 4096 on loopback.
		{UD, []int{1, 1024, 1025, 4096}, nil, 1},
		{SRQ, []int{1, 1024, 1025, 65536}, []string{"-q", "4"}, 4},
	} {
		for _, size := range tc.sizes {
			t.Run(fmt.Sprintf("%v/%d", tc.tool, size), func(t *testing.T) {
				args := append([]string{"-g", "1", "-n", strconv.Itoa(iters), "-s", strconv.Itoa(size), "-c"}, tc.extra...)
				srv, cli := ppPair(t, tc.tool, args, args)
				ppCheck(t, tc.tool, size, iters, tc.numQP, srv, cli)
			})
		}
	}
}

// TestPingpongEvents runs every tool sleeping on completion events (-e),
// on one side or both, and srq with its default 16 QPs.
func TestPingpongEvents(t *testing.T) {
	for _, tc := range []struct {
		tool     Tool
		srv, cli string
		numQP    int
	}{
		{RC, "-e", "-e", 1},
		{RC, "-e", "", 1},
		{UC, "", "-e", 1},
		{UD, "-e", "-e", 1},
		{SRQ, "-e", "-e", 16},
	} {
		t.Run(fmt.Sprintf("%v/%q-%q", tc.tool, tc.srv, tc.cli), func(t *testing.T) {
			base := []string{"-g", "1", "-n", "20", "-s", "512"}
			srv, cli := ppPair(t, tc.tool, append(strings.Fields(tc.srv), base...), append(strings.Fields(tc.cli), base...))
			ppCheck(t, tc.tool, 512, 20, tc.numQP, srv, cli)
		})
	}
}

// TestPingpongLongOptions spells the flags as getopt_long allows and takes
// ud's default size (1024, whatever its usage text says).
func TestPingpongLongOptions(t *testing.T) {
	srv, cli := ppPair(t, UD, []string{"--gid-idx=1", "--iters", "3", "--chk", "--events", "--link=udp"},
		[]string{"--gid-idx", "1", "--it=3", "--rx-depth=2", "--chk"})
	ppCheck(t, UD, 1024, 3, 1, srv, cli)
}

// TestPingpongCheckWithoutPattern: -c on the server only. The client does
// not write the pattern, so the pages the server gets still start with the
// client's 0x7b fill and the server reports them, as the real one does
// (on stdout, exit status 0).
func TestPingpongCheckWithoutPattern(t *testing.T) {
	srv, cli := ppPair(t, RC, []string{"-g", "1", "-n", "3", "-s", "8192", "-c"}, []string{"-g", "1", "-n", "3", "-s", "8192"})
	want := "invalid data in page 0\ninvalid data in page 1\n"
	if srv.code != 0 || !strings.HasSuffix(srv.stdout, " usec/iter\n"+want) {
		t.Fatalf("server:\n%v", srv)
	}
	srv.stdout = strings.TrimSuffix(srv.stdout, want)
	ppCheck(t, RC, 8192, 3, 1, srv, cli)
}

// TestPingpongNoGID: without -g the tools exchange a zero GID, and RoCE
// cannot route to it; both sides fail as the real ones do on rxe.
func TestPingpongNoGID(t *testing.T) {
	for _, tc := range []struct {
		tool Tool
		srv  []string // the server's stderr
	}{
		{RC, []string{"Failed to modify QP to RTR", "Couldn't connect to remote QP"}},
		{UD, []string{"Failed to create AH", "Couldn't connect to remote QP"}},
	} {
		t.Run(tc.tool.String(), func(t *testing.T) {
			srv, cli := ppPair(t, tc.tool, []string{"-n", "2"}, []string{"-n", "2"})
			if srv.code != 1 || srv.stderr != strings.Join(tc.srv, "\n")+"\n" {
				t.Errorf("server:\n%v", srv)
			}
			if !strings.HasSuffix(srv.stdout, ", GID ::\n") && !strings.HasSuffix(srv.stdout, ": GID ::\n") {
				t.Errorf("server printed %q, want its local line with GID ::", srv.stdout)
			}
			if cli.code != 1 || !strings.HasPrefix(cli.stderr, "client read/write: ") ||
				!strings.HasSuffix(cli.stderr, "\nCouldn't read/write remote address\n") {
				t.Errorf("client:\n%v", cli)
			}
		})
	}
}

// ppFakeServer accepts one connection and plays the server's side of the
// exchange with answer (nil: close without answering) after reading n
// bytes. It returns what the client sent.
func ppFakeServer(t *testing.T, n int, answer []byte) (port string, got <-chan []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.19.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan []byte, 1)
	go func() {
		defer ln.Close()
		c, err := ln.Accept()
		if err != nil {
			ch <- nil
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		buf := make([]byte, n)
		k, _ := io.ReadFull(c, buf)
		if answer != nil {
			c.Write(answer)
			if len(answer)%RecordSize == 0 {
				// Wait for "done" so that the client's write does not fail.
				c.Read(make([]byte, 16))
			}
		}
		ch <- buf[:k]
	}()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port), ch
}

// TestPingpongBadServer: a peer that answers the client with a garbled or
// short record, or with the address of a QP that never answers. The client
// says so and exits 1, without hanging.
func TestPingpongBadServer(t *testing.T) {
	good := Dest{QPN: 0x123456, PSN: 0x42, GID: [16]byte{10: 0xff, 11: 0xff, 12: 127, 15: 1}}.Marshal()
	garbled := bytes.Repeat([]byte("z"), RecordSize)
	for _, tc := range []struct {
		name   string
		tool   Tool
		answer []byte
		stderr []string // lines, in order; a prefix each
	}{
		{"garbled", RC, garbled, []string{"client read/write: pingpong: garbled address record 0", "Couldn't read/write remote address"}},
		{"short", UC, []byte("0000:000011"), []string{"client read/write: ", "Couldn't read/write remote address"}},
		{"closes", UD, nil, []string{"client read/write: ", "Couldn't read/write remote address"}},
		{"srq garbled", SRQ, garbled, []string{"client read/write: pingpong: garbled address record 0", "Couldn't read/write remote address"}},
		// A well-formed record for a QP nobody has: RC retries 7 times
		// (timeout 14: 67 ms each) and fails the send, as an HCA does.
		{"no such QP", RC, good, []string{"Failed status transport retry counter exceeded (12) for wr_id 2", "parse WC failed "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := RecordSize
			if tc.tool == SRQ {
				n *= MaxQP
			}
			port, got := ppFakeServer(t, n, tc.answer)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			args := []string{"-g", "1", "-n", "2", "-s", "64", "-d", "127.0.19.2", "-p", port, "127.0.19.1"}
			if tc.tool == SRQ {
				args = append(args, "-q", "1")
			}
			out := ppExec(ctx, tc.tool, args)
			lines := strings.Split(strings.TrimSuffix(out.stderr, "\n"), "\n")
			if out.code != 1 || len(lines) != len(tc.stderr) || ctx.Err() != nil {
				t.Fatalf("%v", out)
			}
			for i, want := range tc.stderr {
				if !strings.HasPrefix(lines[i], want) {
					t.Fatalf("stderr line %d %q, want %q...\n%v", i+1, lines[i], want, out)
				}
			}
			if rec := <-got; len(rec) != n || mustDest(t, rec[:RecordSize]).QPN == 0 {
				t.Fatalf("the client sent %d bytes %q", len(rec), rec)
			}
		})
	}
}

func mustDest(t *testing.T, b []byte) Dest {
	t.Helper()
	d, err := ParseDest(b)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// ppFakeClient connects to a roced server, sends msg and returns what the
// server answered before it closed, or, if the server exits before it
// listens, its output.
func ppFakeClient(t *testing.T, listening <-chan struct{}, port string, msg []byte, done <-chan ppOut) (answer []byte, srv ppOut, exited bool) {
	t.Helper()
	select {
	case <-listening:
	case srv = <-done: // it ended before it listened (a port in use, say)
		return nil, srv, true
	}
	c, err := net.Dial("tcp", ppSrv+":"+port)
	if err != nil {
		t.Fatalf("the server listens, but: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	c.Write(msg)
	if tc, ok := c.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	var got bytes.Buffer
	got.ReadFrom(c)
	return got.Bytes(), ppOut{}, false
}

// TestPingpongBadClient: a peer that sends the server a garbled record or
// one of the wrong size. The server refuses it and exits 1.
func TestPingpongBadClient(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tool   Tool
		msg    []byte
		stderr string // first line's prefix
	}{
		{"garbled", RC, bytes.Repeat([]byte("0"), RecordSize), "server read: pingpong: garbled address record 0"},
		{"wrong size", UD, []byte("0000:000011:000001:00000000000000000000ffff7f000002"), "server read: "},
		{"srq short", SRQ, bytes.Repeat([]byte("0"), 3*RecordSize), "server read: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			port := ppFreePort(t)
			listening := ppOnListen(t, port)
			done := make(chan ppOut, 1)
			go func() { done <- ppExec(ctx, tc.tool, []string{"-g", "1", "-n", "2", "-p", port, "-d", ppSrv}) }()
			answer, out, exited := ppFakeClient(t, listening, port, tc.msg, done)
			if !exited {
				out = <-done
			}
			timedOut := ctx.Err() != nil
			cancel()
			lines := strings.Split(strings.TrimSuffix(out.stderr, "\n"), "\n")
			if out.code != 1 || len(lines) != 2 || !strings.HasPrefix(lines[0], tc.stderr) ||
				lines[1] != "Couldn't read remote address" || timedOut {
				t.Fatalf("%v", out)
			}
			if len(answer) != 0 {
				t.Fatalf("the server answered a bad record with %q", answer)
			}
		})
	}
}

// TestPingpongRefusals: command lines the real tools refuse, with their
// words and exit status 1, before any traffic.
func TestPingpongRefusals(t *testing.T) {
	for _, tc := range []struct {
		tool   Tool
		args   string
		stderr string
		usage  bool // the usage text on stdout
	}{
		{RC, "-h", "roced rc_pingpong: invalid option -- 'h'\n", true},
		{UD, "-m 1024", "roced ud_pingpong: invalid option -- 'm'\n", true},
		{RC, "-m 300", "roced rc_pingpong: invalid MTU 300 (256, 512, 1024, 2048 or 4096)\n", true},
		{RC, "a b", "roced rc_pingpong: more than one host: a b\n", true},
		// Sizes refused before a server waits: beyond an unsigned int,
		// beyond the largest message.
		{RC, "-s 99999999999", "roced rc_pingpong: -s 99999999999 out of range (0 to 4294967295)\n", true},
		{SRQ, "-s 3000000000", "roced srq_pingpong: -s 3000000000: larger than the largest message (2147483648 bytes)\n", false},
		{RC, "-o -d 127.0.19.1", "The device isn't ODP capable or does not support RC send and receive with ODP\n", false},
		{RC, "-O -d 127.0.19.1", "The device isn't ODP capable or does not support RC send and receive with ODP\n", false},
		{RC, "-t -d 127.0.19.1", "The device isn't completion timestamp capable\n", false},
		{RC, "-j -d 127.0.19.1", "Device doesn't support dm allocation\n", false},
		{RC, "-o -j", "DM memory region can't be on demand\n", false},
		{RC, "-P", "prefetch is valid only with on-demand memory region\n", false},
		{SRQ, "-o -d 127.0.19.1", "The device isn't ODP capable or does not support RC send, receive and srq with ODP\n", false},
		{SRQ, "-q 300", "num_qp 300 must be less than 255\n", false},
		{SRQ, "-q 20 -r 10", "rx_depth 10 is too small for 20 QPs -- must have at least one receive per QP.\n", false},
		{UD, "-s 65536 -d 127.0.19.1", "Requested size larger than port MTU (4096)\n", false},
		{RC, "-i 2 -d 127.0.19.1", "Failed to modify QP to INIT\n", false},
	} {
		t.Run(tc.tool.String()+" "+tc.args, func(t *testing.T) {
			out := ppExec(context.Background(), tc.tool, strings.Fields(tc.args))
			if out.code != 1 || out.stderr != tc.stderr || strings.HasPrefix(out.stdout, "Usage:\n") != tc.usage {
				t.Fatalf("%v\nwant stderr %q", out, tc.stderr)
			}
			if !tc.usage && out.stdout != "" {
				t.Fatalf("stdout %q", out.stdout)
			}
		})
	}
	// -g beyond the GID table: the tools' own words.
	out := ppExec(context.Background(), RC, []string{"-g", "9", "-d", "127.0.19.1"})
	if out.code != 1 || !strings.HasPrefix(out.stderr, "can't read sgid of index 9 (") {
		t.Fatalf("-g 9: %v", out)
	}
}

// TestPingpongUsage checks each tool's usage text lists its own flags.
func TestPingpongUsage(t *testing.T) {
	for _, tc := range []struct {
		tool        Tool
		has, hasnot []string
	}{
		{RC, []string{"-m, --mtu", "-N, --new_send", "-t, --ts", "(default 4096)"}, []string{"-q, --num-qp"}},
		{UC, []string{"-m, --mtu", "-c, --chk"}, []string{"-o, --odp", "-t, --ts"}},
		{UD, []string{"(default 2048)", "<SL>"}, []string{"-m, --mtu"}},
		{SRQ, []string{"-q, --num-qp", "per QP(default 1000)", "-o, --odp"}, []string{"-t, --ts"}},
	} {
		var b bytes.Buffer
		ppUsage(&b, tc.tool, "roced "+tc.tool.String())
		for _, s := range tc.has {
			if !strings.Contains(b.String(), s) {
				t.Errorf("%v usage lacks %q", tc.tool, s)
			}
		}
		for _, s := range tc.hasnot {
			if strings.Contains(b.String(), s) {
				t.Errorf("%v usage has %q", tc.tool, s)
			}
		}
	}
}

// TestLrand48 compares with glibc's srand48/lrand48 (values from a C
// program on glibc 2.36).
func TestLrand48(t *testing.T) {
	for _, tc := range []struct {
		seed int64
		want [3]uint32
	}{
		{0, [3]uint32{0xddb16e, 0xfcc9c0, 0x55e80a}},
		{12345, [3]uint32{0xd79090, 0xa7ca71, 0x79c631}},
		{-7, [3]uint32{0xa08af0, 0xaca551, 0xb03791}},
		{0x123456789abc, [3]uint32{0xb51674, 0xfe314e, 0xe09380}},
	} {
		var r lrand48
		r.seed(tc.seed)
		for i, w := range tc.want {
			if got := uint32(r.next()) & 0xffffff; got != w {
				t.Errorf("seed %d draw %d: 0x%06x, want 0x%06x", tc.seed, i, got, w)
			}
		}
	}
}

// TestPingpongCheckBuffer: -c's check reports each page whose first byte
// is not the client's pattern, at the tool's offset (ud: after the GRH).
func TestPingpongCheckBuffer(t *testing.T) {
	page := os.Getpagesize()
	for _, tc := range []struct {
		tool  Tool
		size  int
		spoil []int // pages to spoil
		want  []string
	}{
		{RC, 3 * page, nil, nil},
		{RC, 3 * page, []int{1}, []string{"invalid data in page 1"}},
		{UD, 1024, []int{0}, []string{"invalid data in page 0"}},
		{SRQ, 2*page + 1, []int{0, 2}, []string{"invalid data in page 0", "invalid data in page 2"}},
	} {
		r := &ppRun{cfg: Config{Tool: tc.tool, Size: uint32(tc.size)}}
		r.buf = bytes.Repeat([]byte{0x7b}, tc.size+max(r.dataOff(), r.sendOff()))
		r.markPages()
		// The message received is the one the client sent.
		copy(r.buf[r.dataOff():r.dataOff()+tc.size], r.buf[r.sendOff():])
		for _, p := range tc.spoil {
			r.buf[r.dataOff()+p*page] = 0x7b
		}
		if got := r.checkBuffer(); strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("%v size %d spoiled %v: %q, want %q", tc.tool, tc.size, tc.spoil, got, tc.want)
		}
	}
}

// TestPingpongProcesses builds roced (cmd/roced, which runs Main) and runs
// an RC ping-pong between two processes, as make run does.
func TestPingpongProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "roced")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/goroce/goroce/cmd/roced").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	port := ppFreePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	var srvOut, srvErr bytes.Buffer
	srv := exec.CommandContext(ctx, bin, "rc_pingpong", "-g", "1", "-n", "50", "-s", "4096", "-p", port, "-d", "127.0.19.1")
	srv.Stdout, srv.Stderr = &srvOut, &srvErr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var srvExit error
	go func() { defer wg.Done(); srvExit = srv.Wait() }()
	var cliOut, cliErr []byte
	var cliExit error
	for ctx.Err() == nil {
		var o, e bytes.Buffer
		cli := exec.CommandContext(ctx, bin, "rc_pingpong", "-g", "1", "-n", "50", "-s", "4096", "-p", port, "-d", "127.0.19.2", "127.0.19.1")
		cli.Stdout, cli.Stderr = &o, &e
		cliExit = cli.Run()
		cliOut, cliErr = o.Bytes(), e.Bytes()
		if !bytes.Contains(cliErr, []byte("Couldn't connect")) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if cliExit != nil {
		time.AfterFunc(5*time.Second, cancel)
	}
	wg.Wait()
	cancel()
	code := func(err error) int {
		if err == nil {
			return 0
		}
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		return -1
	}
	s := ppOut{srvOut.String(), srvErr.String(), code(srvExit)}
	c := ppOut{string(cliOut), string(cliErr), code(cliExit)}
	ppCheck(t, RC, 4096, 50, 1, s, c)
}
