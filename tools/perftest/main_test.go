package perftest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testharness"
	"github.com/goroce/goroce/transport"
)

// The tests run Main in-process, server and client, over the UDP link on
// loopback: the server on 127.0.17.1, the client on 127.0.17.2 (addresses
// no other package's tests bind: tools/pingpong's run the README's lines on
// 127.0.0.1 and .2, and go test runs the packages side by side), each test
// on a TCP port of its own.

const (
	ptServerAddr = "127.0.17.1"
	ptClientAddr = "127.0.17.2"
)

// ptGID is the IPv4 GID of a loopback address of the tests.
func ptGID(addr string) [16]byte { return netip.MustParseAddr("::ffff:" + addr).As16() }

var (
	ptPortMu   sync.Mutex
	ptNextPort = 19300
	ptListenMu sync.Mutex
	ptListenCh = map[int]chan struct{}{}
)

func init() {
	ptListening = func(port int) {
		ptListenMu.Lock()
		defer ptListenMu.Unlock()
		if ch, ok := ptListenCh[port]; ok {
			close(ch)
			delete(ptListenCh, port)
		}
	}
}

func ptPort() int {
	ptPortMu.Lock()
	defer ptPortMu.Unlock()
	ptNextPort++
	return ptNextPort
}

// ptSide is what one side of a run printed and returned.
type ptSide struct {
	code        int
	out, errOut string
}

func (s ptSide) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", s.code, s.out, s.errOut)
}

// serve starts a server with args on port and returns once it listens.
func serve(t *testing.T, test Test, port int, args ...string) <-chan ptSide {
	t.Helper()
	return serveLine(t, test, port, append([]string{"-d", ptServerAddr, "-x", "1", "-p", strconv.Itoa(port)}, args...))
}

// serveLine starts a server with the whole command line all, whose -p is
// port, and returns once it listens.
func serveLine(t *testing.T, test Test, port int, all []string) <-chan ptSide {
	t.Helper()
	listening := make(chan struct{})
	ptListenMu.Lock()
	ptListenCh[port] = listening
	ptListenMu.Unlock()
	done := make(chan ptSide, 1)
	go func() { done <- runMain(test, all) }()
	select {
	case <-listening:
	case s := <-done:
		t.Fatalf("server ended before listening: %v", s)
	case <-time.After(10 * time.Second):
		t.Fatal("server not listening after 10 s")
	}
	return done
}

// runMain runs test with the whole command line all.
func runMain(test Test, all []string) ptSide {
	var out, errOut bytes.Buffer
	code := Main(context.Background(), test, all, &out, &errOut)
	return ptSide{code, out.String(), errOut.String()}
}

// connect runs a client with args against the server on port.
func connect(test Test, port int, args ...string) ptSide {
	all := append([]string{"-d", ptClientAddr, "-x", "1", "-p", strconv.Itoa(port)}, args...)
	return runMain(test, append(all, ptServerAddr))
}

// pair runs one server and one client.
func pair(t *testing.T, test Test, srvArgs, cliArgs []string) (srv, cli ptSide) {
	t.Helper()
	port := ptPort()
	done := serve(t, test, port, srvArgs...)
	cli = connect(test, port, cliArgs...)
	return awaitServer(t, done, cli), cli
}

// awaitServer returns the result of the server of a pair whose client
// ended with cli.
func awaitServer(t *testing.T, done <-chan ptSide, cli ptSide) ptSide {
	t.Helper()
	select {
	case srv := <-done:
		return srv
	case <-time.After(60 * time.Second):
		t.Fatalf("server still running 60 s after the client ended; client: %v", cli)
		return ptSide{}
	}
}

var (
	bwRow  = regexp.MustCompile(`^ (\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)$`)
	latRow = regexp.MustCompile(`^ (\d+)\s+(\d+)\s+((?:\S+\s+){6}\S+)\s*$`)
)

// rows returns the result rows of an output, as [size, iterations].
func rows(out string, bw bool) [][2]uint64 {
	var got [][2]uint64
	inTable := false
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, " #bytes"):
			inTable = true
		case l == ResultLine():
			inTable = false
		case inTable:
			re := latRow
			if bw {
				re = bwRow
			}
			if m := re.FindStringSubmatch(l); m != nil {
				size, _ := strconv.ParseUint(m[1], 10, 64)
				iters, _ := strconv.ParseUint(m[2], 10, 64)
				got = append(got, [2]uint64{size, iters})
			}
		}
	}
	return got
}

// checkOutput checks a side's output: the dialect's first line, the
// banner, the address lines, and the rows a side of this test prints.
func checkOutput(t *testing.T, who string, s ptSide, test Test, server bool, claim Version, size, iters uint64) {
	t.Helper()
	if s.code != 0 {
		t.Errorf("%s: %v", who, s)
		return
	}
	// 6.29 prints its polling notice first, after any warnings.
	lines := strings.Split(s.out, "\n")
	first := 0
	for strings.HasPrefix(lines[first], " WARNING") {
		first++
	}
	if hasNotice := lines[first] == DisablingDynamicPolling; hasNotice != (claim == V629) {
		t.Errorf("%s: %s output starts %q", who, claim, lines[first])
	}
	for _, want := range []string{" local address: LID 0000 QPN ", " remote address: LID 0000 QPN ", " GID index       : 1",
		" Mtu             : "} {
		if !strings.Contains(s.out, want) {
			t.Errorf("%s: no %q in\n%s", who, want, s.out)
		}
	}
	if server && !strings.Contains(s.out, "* Waiting for client to connect... *") {
		t.Errorf("%s: no waiting banner", who)
	}
	unit := "MiB"
	if claim == V606 {
		unit = "MB"
	}
	if test.BW() && !strings.Contains(s.out, "BW peak["+unit+"/sec]") {
		t.Errorf("%s: no %s header in\n%s", who, unit, s.out)
	}
	got := rows(s.out, test.BW())
	if server && (test == ReadLat || test == AtomicLat) {
		if len(got) != 0 || !strings.HasSuffix(s.out, ResultLine()+"\n") {
			t.Errorf("%s: a read/atomic latency server prints no row:\n%s", who, s.out)
		}
		return
	}
	if len(got) != 1 || got[0] != [2]uint64{size, iters} {
		t.Errorf("%s: rows %v, want [[%d %d]] in\n%s", who, got, size, iters, s.out)
	}
	if !strings.HasSuffix(s.out, ResultLine()+"\n") {
		t.Errorf("%s: output does not end with the dashed line:\n%s", who, s.out)
	}
}

// TestPerftestPairs runs every test, RC and the other transports the
// test allows, at 1 byte, one MTU, one byte more, and 64 KiB (the atomics
// at their 8 bytes), with the two sides claiming different versions.
func TestPerftestPairs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every test over loopback")
	}
	type transport struct {
		test  Test
		conns []string
	}
	all := []transport{
		{WriteBW, []string{"RC", "UC"}},
		{WriteLat, []string{"RC", "UC"}},
		{ReadBW, []string{"RC"}},
		{ReadLat, []string{"RC"}},
		{SendBW, []string{"RC", "UC", "UD"}},
		{SendLat, []string{"RC", "UC", "UD"}},
		{AtomicBW, []string{"RC"}},
		{AtomicLat, []string{"RC"}},
	}
	// Client and server claims rotate through the three dialects.
	claims := []Version{V606, V624, V629}
	const iters = 20
	run := 0
	for _, tr := range all {
		for _, conn := range tr.conns {
			sizes := []uint64{1, 1024, 1025, 65536}
			if tr.test.Verb() == VerbAtomic {
				sizes = []uint64{8}
			}
			for _, size := range sizes {
				if conn == "UD" && size > 1024 {
					continue // TestPerftestUDSize
				}
				cliClaim, srvClaim := claims[run%3], claims[(run+1)%3]
				run++
				name := fmt.Sprintf("%v/%s/%d/%s-%s", tr.test, conn, size, cliClaim, srvClaim)
				t.Run(name, func(t *testing.T) {
					args := []string{"-n", strconv.Itoa(iters), "-c", conn}
					if tr.test.Verb() != VerbAtomic {
						args = append(args, "-s", strconv.FormatUint(size, 10))
					}
					srv, cli := pair(t, tr.test,
						append(slices.Clip(args), "--perftest_version", string(srvClaim)),
						append(slices.Clip(args), "--perftest_version", string(cliClaim)))
					checkOutput(t, "server", srv, tr.test, true, srvClaim, size, iters)
					checkOutput(t, "client", cli, tr.test, false, cliClaim, size, iters)
				})
			}
		}
	}
}

// TestPerftestAll runs -a: every size from 2 to 2^23 on send_bw over RC,
// and, over UD, up to the MTU.
func TestPerftestAll(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 23 sizes")
	}
	// UD -a stops at the active MTU, which the UDP link takes from the
	// loopback interface's MTU as rxe would (65536 gives 4096; 1500, 1024).
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	udMTU := transport.MTUFor(lo.MTU, false).Bytes()
	for _, tt := range []struct {
		conn string
		top  int
	}{{"RC", 23}, {"UD", bits.Len(uint(udMTU)) - 1}} {
		t.Run(tt.conn, func(t *testing.T) {
			args := []string{"-a", "-n", "5", "-c", tt.conn}
			srv, cli := pair(t, SendBW, args, args)
			for _, s := range []struct {
				who  string
				side ptSide
			}{{"server", srv}, {"client", cli}} {
				if s.side.code != 0 {
					t.Fatalf("%s: %v", s.who, s.side)
				}
				got := rows(s.side.out, true)
				if len(got) != tt.top {
					t.Fatalf("%s: %d rows, want %d:\n%s", s.who, len(got), tt.top, s.side.out)
				}
				for i, r := range got {
					if r != [2]uint64{1 << (i + 1), 5} {
						t.Errorf("%s: row %d is %v", s.who, i, r)
					}
				}
			}
			if tt.conn == "UD" && !strings.Contains(cli.errOut, fmt.Sprintf(" Max msg size in UD is MTU %d", udMTU)) {
				t.Errorf("UD -a: no MTU notice on stderr:\n%s", cli.errOut)
			}
		})
	}
}

// TestPerftestUDSize: a UD message larger than the negotiated MTU given
// with -s is refused by both sides after the MTU step, as perftest 6.06
// and 6.24 do; without -s the default shrinks to the MTU.
func TestPerftestUDSize(t *testing.T) {
	for _, size := range []string{"1025", "65536"} {
		srv, cli := pair(t, SendBW, []string{"-c", "UD", "-s", size, "-m", "1024"}, []string{"-c", "UD", "-s", size, "-m", "1024"})
		for _, s := range []ptSide{srv, cli} {
			if s.code != 1 || !strings.Contains(s.errOut, "Max message size in UD cannot be greater than MTU") {
				t.Errorf("-s %s: %v", size, s)
			}
		}
	}
	srv, cli := pair(t, SendLat, []string{"-c", "UD", "-n", "10", "-m", "1024"}, []string{"-c", "UD", "-n", "10", "-m", "1024"})
	checkOutput(t, "server", srv, SendLat, true, V629, 2, 10)
	checkOutput(t, "client", cli, SendLat, false, V629, 2, 10)
	srv, cli = pair(t, SendBW, []string{"-c", "UD", "-n", "10", "-m", "1024"}, []string{"-c", "UD", "-n", "10", "-m", "1024"})
	checkOutput(t, "server", srv, SendBW, true, V629, 1024, 10)
	checkOutput(t, "client", cli, SendBW, false, V629, 1024, 10)
	if !strings.Contains(cli.errOut, " Max msg size in UD is MTU 1024\n Changing to this MTU") {
		t.Errorf("no shrink notice: %q", cli.errOut)
	}
}

// TestPerftestVariants covers the flags that change the traffic: QPs,
// bidirectional, post lists, CQ moderation, duration, SRQ, events, write
// with immediate, warm-up, latency extras.
func TestPerftestVariants(t *testing.T) {
	if testing.Short() {
		t.Skip("loopback runs")
	}
	tests := []struct {
		test  Test
		args  string
		size  uint64
		iters uint64 // the rows' #iterations
	}{
		{WriteBW, "-q 3 -n 30 -s 4096", 4096, 90},
		{ReadBW, "-q 2 -n 30 -s 100 -o 4", 100, 60},
		{SendBW, "-q 2 -n 30 -s 300 --use-srq", 300, 60},
		{SendBW, "-b -n 40 -s 2000", 2000, 40},
		{WriteBW, "-b -n 40 -s 2000 --report-both", 2000, 40},
		{WriteBW, "-l 4 -n 40 -s 64", 64, 40},
		{SendBW, "-Q 7 -t 20 -n 50 -s 64 -e", 64, 50},
		{WriteBW, "--write_with_imm -n 30 -s 700", 700, 30},
		{WriteLat, "--write_with_imm -n 30 -s 700", 700, 30},
		{ReadBW, "--perform_warm_up -n 30 -s 512", 512, 30},
		{AtomicBW, "-A CMP_AND_SWAP -n 30 --report_gbits", 8, 30},
		{SendLat, "-n 30 -s 64 --latency_gap 20 -I 0", 64, 30},
	}
	for _, tt := range tests {
		t.Run(tt.test.String()+" "+tt.args, func(t *testing.T) {
			args := strings.Fields(tt.args)
			srv, cli := pair(t, tt.test, args, args)
			bi := strings.Contains(tt.args, "-b")
			for _, s := range []struct {
				who    string
				side   ptSide
				server bool
			}{{"server", srv, true}, {"client", cli, false}} {
				if s.side.code != 0 {
					t.Fatalf("%s: %v", s.who, s.side)
				}
				got := rows(s.side.out, tt.test.BW())
				want := 1
				if strings.Contains(tt.args, "--report-both") {
					want = 3
				}
				if len(got) != want || got[0] != [2]uint64{tt.size, tt.iters} {
					t.Errorf("%s: rows %v, want %d of [%d %d]:\n%s", s.who, got, want, tt.size, tt.iters, s.side.out)
				}
				if bi && !strings.Contains(s.side.out, "Bidirectional BW Test") {
					t.Errorf("%s: title", s.who)
				}
			}
		})
	}
}

// TestPerftestDuration runs -D on a bandwidth and a latency test: rows
// count the messages of the sample window, whatever they are.
func TestPerftestDuration(t *testing.T) {
	if testing.Short() {
		t.Skip("two-second runs")
	}
	for _, test := range []Test{WriteBW, SendBW, SendLat, ReadLat} {
		t.Run(test.String(), func(t *testing.T) {
			args := []string{"-D", "2", "-s", "64"}
			srv, cli := pair(t, test, args, args)
			for _, s := range []ptSide{srv, cli} {
				if s.code != 0 {
					t.Fatalf("%v", s)
				}
			}
			out := cli.out
			if test.BW() {
				if r := rows(out, true); len(r) != 1 || r[0][0] != 64 || r[0][1] == 0 {
					t.Errorf("rows %v:\n%s", r, out)
				}
				if !strings.Contains(out, " WARNING: BW peak won't be measured in this run.") {
					t.Errorf("no warning:\n%s", out)
				}
				return
			}
			if !strings.Contains(out, "t_avg[usec]    tps average") {
				t.Errorf("no duration header:\n%s", out)
			}
		})
	}
}

// TestPerftestMismatch: two 6.29 sides negotiate and refuse a mismatched
// command line before any traffic, as the real tools do.
func TestPerftestMismatch(t *testing.T) {
	srv, cli := pair(t, WriteBW, []string{"-n", "20", "-s", "64"}, []string{"-n", "30", "-s", "128"})
	if srv.code != 1 || !strings.Contains(srv.errOut, " size mismatch: local=64, remote=128\n Failed to negotiate parameters") {
		t.Errorf("server: %v", srv)
	}
	if cli.code != 1 || !strings.Contains(cli.errOut, " size mismatch: local=128, remote=64") {
		t.Errorf("client: %v", cli)
	}
	// A 6.24 side does not negotiate: the same command lines run.
	srv, cli = pair(t, WriteBW, []string{"-n", "20", "-s", "64", "--perftest_version", "6.24"}, []string{"-n", "20", "-s", "128"})
	if srv.code != 0 || cli.code != 0 {
		t.Errorf("6.24 server:\n%v\n%v", srv, cli)
	}
}

// fakePeer is a perftest peer that misbehaves at a chosen step; it serves
// one connection on a port of its own and returns the port.
func fakePeer(t *testing.T, script func(c net.Conn)) int {
	t.Helper()
	port := ptPort()
	ln, err := net.Listen("tcp", net.JoinHostPort(ptServerAddr, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		script(c)
	}()
	return port
}

// readN reads one message of n bytes.
func readN(c net.Conn, n int) []byte {
	b := make([]byte, n)
	_, _ = io.ReadFull(c, b)
	return b
}

func versionMsg(v string) []byte {
	b, _ := Version(v).Marshal()
	return b
}

// TestPerftestBadPeer: garbage from the peer ends a run with perftest's
// error and a non-zero status, never a hang.
func TestPerftestBadPeer(t *testing.T) {
	upToMTU := func(c net.Conn) {
		readN(c, 16)
		c.Write(versionMsg("6.24"))
		for range 2 {
			readN(c, 4)
			c.Write([]byte{0, 0, 0x10, 0})
		}
		readN(c, 2)
		c.Write([]byte("3\x00"))
	}
	tests := []struct {
		name   string
		script func(c net.Conn)
		want   string
	}{
		{"old version", func(c net.Conn) { readN(c, 16); c.Write(versionMsg("5.60")) }, "not compatible with versions older than 5.70"},
		{"garbage version", func(c net.Conn) { readN(c, 16); c.Write(bytes.Repeat([]byte{'x'}, 16)) }, "not compatible"},
		{"closed at sys data", func(c net.Conn) { readN(c, 16); c.Write(versionMsg("6.24")) }, "Failed to exchange data"},
		{"garbled record", func(c net.Conn) {
			upToMTU(c)
			readN(c, RecordSize)
			c.Write(bytes.Repeat([]byte{'z'}, RecordSize))
		}, "garbled address record"},
		{"short record", func(c net.Conn) {
			upToMTU(c)
			readN(c, RecordSize)
			c.Write([]byte("0000:0001"))
		}, "Failed to exchange data between server and clients"},
		{"unroutable GID", func(c net.Conn) {
			upToMTU(c)
			readN(c, RecordSize)
			c.Write(Record{QPN: 0x20, PSN: 1}.Marshal(true)) // GID ::
		}, "Unable to Connect the HCA's through the link"},
		{"QP that does not exist", func(c net.Conn) {
			upToMTU(c)
			// Records naming QP 0xabcdef at the server's address: the
			// client's writes go unanswered until its retries run out.
			rec := Record{OutReads: 1, QPN: 0xabcdef, PSN: 1, RKey: 0x100, VAddr: 0x1000,
				GID: ptGID(ptServerAddr)}
			for {
				if _, err := io.ReadFull(c, make([]byte, RecordSize)); err != nil {
					return
				}
				c.Write(rec.Marshal(true))
			}
		}, "Completion with error at client"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			port := fakePeer(t, tt.script)
			done := make(chan ptSide, 1)
			go func() {
				done <- connect(WriteBW, port, "-n", "10", "-s", "64", "-u", "5", "--perftest_version", "6.24")
			}()
			select {
			case s := <-done:
				if s.code == 0 || !strings.Contains(s.errOut, tt.want) {
					t.Errorf("want a failure with %q: %v", tt.want, s)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("client still running after 30 s")
			}
		})
	}
}

// TestPerftestStalledPeer: a peer that completes the exchange but never
// sends leaves a UD receiver without messages; the watchdog ends the run
// with check_alive's message instead of a hang.
func TestPerftestStalledPeer(t *testing.T) {
	defer func(d time.Duration) { ptStall = d }(ptStall)
	ptStall = time.Second
	port := ptPort()
	done := serve(t, SendBW, port, "-c", "UD", "-n", "10", "-s", "64", "--perftest_version", "6.24")
	c, err := net.Dial("tcp", net.JoinHostPort(ptServerAddr, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(versionMsg("6.24"))
	readN(c, 16)
	for range 2 {
		c.Write([]byte{0, 0, 0x10, 0})
		readN(c, 4)
	}
	c.Write([]byte("3\x00"))
	readN(c, 2)
	rec := Record{QPN: 0x77, PSN: 5, GID: ptGID(ptClientAddr)}
	for range 4 { // send_bw's records before the traffic
		c.Write(rec.Marshal(true))
		readN(c, RecordSize)
	}
	select {
	case s := <-done:
		if s.code != 17 || !strings.Contains(s.errOut, "Did not get Message for 1 Seconds") ||
			!strings.Contains(s.errOut, "Total Received=0, Total Iters Required=10") {
			t.Errorf("%v", s)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("server still waiting 20 s later")
	}
}

// TestPerftestCommandLine covers what ends a run before any connection.
func TestPerftestCommandLine(t *testing.T) {
	tests := []struct {
		test Test
		args string
		code int
		out  string // in stdout or stderr
	}{
		{WriteBW, "-V", 1, "Version: 6.29"},
		{WriteBW, "-V --perftest_version 6.06", 1, "Version: 6.06"},
		{SendLat, "-h", 1, "roced send_lat <host>"},
		{SendBW, "-R -c UC", 1, " UC is not supported in librdmacm\n Parser function exited with Error"},
		{WriteBW, "-q 0", 1, " num of Qps should be between 1 and 16384"},
		{WriteBW, "--run_infinitely", 1, "--run_infinitely is not supported by roced"},
		{WriteBW, "-i 2", 1, "roced devices have one port"},
		{WriteBW, "--nope", 1, "Options (perftest's"},
		// -d: the route to a loopback address is from 127.0.0.1.
		{WriteBW, "-d " + ptClientAddr + " -p 1 127.0.0.1", 1, "Couldn't connect to 127.0.0.1:1"},
	}
	t.Setenv("GOROCE_SERVER_WAIT", "0") // the refused connection's case: one try, as the tools
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		code := Main(context.Background(), tt.test, strings.Fields(tt.args), &out, &errOut)
		if code != tt.code || !strings.Contains(out.String()+errOut.String(), tt.out) {
			t.Errorf("%v %q: exit %d\n%s%s", tt.test, tt.args, code, out.String(), errOut.String())
		}
	}
}

// TestPerftestSignalChild is TestPerftestSIGTERMKeepsPcap's child process,
// a roced send_bw (Main) as a server with --pcap, waiting for a client that
// never comes.
func TestPerftestSignalChild(t *testing.T) {
	pcap := os.Getenv("GOROCE_SIGNAL_CHILD_PCAP")
	if pcap == "" {
		t.Skip("runs as TestPerftestSIGTERMKeepsPcap's child")
	}
	os.Exit(Main(context.Background(), SendBW, []string{"-d", "127.0.16.1", "-x", "1", "-p", "18790", "--pcap", pcap}, os.Stdout, os.Stderr))
}

// TestPerftestSIGTERMKeepsPcap: a perftest command killed with SIGTERM
// (timeout(1) stopping a run that hung) ends through its context, closes
// its device and leaves a --pcap file that is whole, not the empty file
// of a buffer never flushed.
func TestPerftestSIGTERMKeepsPcap(t *testing.T) {
	pcap := filepath.Join(t.TempDir(), "run.pcap")
	cmd := exec.Command(os.Args[0], "-test.run=^TestPerftestSignalChild$")
	cmd.Env = append(os.Environ(), "GOROCE_SIGNAL_CHILD_PCAP="+pcap)
	stdout, _ := cmd.StdoutPipe()
	var errb testharness.SyncBuffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The server prints its banner once it listens.
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && !strings.Contains(sc.Text(), "Waiting for client to connect") {
	}
	if sc.Err() != nil {
		t.Fatal(sc.Err())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, stdout)
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) && !ee.Exited() {
		t.Fatalf("roced died of the signal (%v) instead of ending its run: %s", err, errb.String())
	}
	b, rerr := os.ReadFile(pcap)
	if rerr != nil || len(b) < 24 {
		t.Fatalf("pcap %d bytes (%v) after SIGTERM; stderr %s", len(b), rerr, errb.String())
	}
	if m := binary.LittleEndian.Uint32(b); m != 0xa1b2c3d4 && m != 0xa1b23c4d {
		t.Fatalf("pcap magic %#x", m)
	}
}
