package main

// rsockets over goroce (rsocket.c): rdma-core's rstream, both ends
// preloaded, across a veth pair; an unmodified TCP program under
// librspreload.so, with the namespace's kernel TCP counters as the proof
// that no kernel TCP segment carried it; docs/libgoroce.md's lines as
// written. Each needs root (namespaces) and is skipped by -short; make
// test runs them in its system stage (system-readme).

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
)

// rspreload is Debian's librspreload.so (librdmacm1), which makes an
// ordinary socket program use rsockets.
const rspreload = "/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so"

// stdbuf is coreutils' libstdbuf.so, which stdbuf(1) preloads: with
// _STDBUF_O=L a server's stdout is line-buffered into a pipe, so that
// its first line (rstream's header, printed once rlisten succeeded) is
// the event the client waits for.
const stdbuf = "/usr/libexec/coreutils/libstdbuf.so"

// startServer starts cmd inside end's namespace with stdout read line by
// line, and returns once a line matching ready came (the server
// listens), with a function that waits for the server's end and returns
// all it wrote.
func startServer(t *testing.T, end *netns.End, cmd *exec.Cmd, ready string) func() ([]byte, error) {
	t.Helper()
	pr, pw := io.Pipe()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := end.Do(cmd.Start); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		pw.Close()
		done <- err
	}()
	// The reader alone touches out until read is closed; it closes seen
	// at the ready line, so that no line is missed whatever the timing.
	seen, read := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(pr)
		found := false
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			if !found && strings.Contains(sc.Text(), ready) {
				found = true
				close(seen)
			}
		}
		io.Copy(io.Discard, pr) // a line too long for the scanner: keep the server writing
	}()
	wait := func() ([]byte, error) {
		err := <-done
		<-read
		return out.Bytes(), err
	}
	select {
	case <-seen:
		return wait
	case <-read:
		select {
		case <-seen: // ready, then ended already: both were closed
			return wait
		default:
		}
		b, err := wait()
		t.Fatalf("server %s ended before it listened: %v\n%s", strings.Join(cmd.Args, " "), err, b)
		return nil
	}
}

// TestRstream runs rdma-core's rstream, server and client both preloaded,
// one in each namespace of a veth pair: sizes from 1 byte to 3 MB (odd
// ones, which split across the 2 KiB..64 KiB transfers and the wrap of
// the send buffer), in rstream's non-blocking (default), blocking (-T b)
// and rpoll (-T a) modes, each with -T v: rstream checks every byte it
// receives and exits non-zero on a mismatch.
func TestRstream(t *testing.T) {
	netns.Privileged(t)
	rstream := toolCM(t, "rstream")
	p := netns.New(t, netns.Config{})
	for i, args := range [][]string{
		{"-S", "1", "-C", "300"},
		{"-S", "4099", "-C", "200", "-T", "b"},
		{"-S", "65536", "-C", "100", "-T", "a"},
		{"-S", "1048576", "-C", "10"},
		{"-S", "3000001", "-C", "4", "-T", "b"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			port := strconv.Itoa(7471 + i)
			args = append(args, "-T", "v", "-p", port)
			srv := preloaded(ctx, p.A.Link, rstream, append([]string{"-b", p.A.IPv4.String()}, args...)...)
			srv.Env = append(srv.Env, "LD_PRELOAD="+lib+" "+stdbuf, "_STDBUF_O=L")
			wait := startServer(t, p.A, srv, "usec/xfer")
			var out []byte
			err := p.B.Do(func() error {
				var err error
				out, err = preloaded(ctx, p.B.Link, rstream, append([]string{"-s", p.A.IPv4.String()}, args...)...).CombinedOutput()
				return err
			})
			sout, serr := wait()
			for _, r := range []struct {
				who string
				out []byte
				err error
			}{{"client", out, err}, {"server", sout, serr}} {
				if r.err != nil || !bytes.Contains(r.out, []byte("\ncustom ")) {
					t.Errorf("rstream %s: %v\n%s", r.who, r.err, r.out)
				}
			}
			t.Logf("%s", bytes.TrimSpace(out))
		})
	}
}

// tcpCounters reads the kernel's TCP and UDP counters inside end's
// namespace (/proc/net/snmp, as a process there sees it), and the bytes
// its interfaces sent ("txbytes").
func tcpCounters(t *testing.T, end *netns.End) map[string]int64 {
	t.Helper()
	out, err := end.Run("cat", "/proc/net/snmp")
	if err != nil {
		t.Fatalf("cat /proc/net/snmp: %v\n%s", err, out)
	}
	c := map[string]int64{}
	var names []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || (f[0] != "Tcp:" && f[0] != "Udp:") {
			continue
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			names = f
			continue
		}
		for i := 1; i < len(f) && i < len(names); i++ {
			v, _ := strconv.ParseInt(f[i], 10, 64)
			c[f[0]+names[i]] = v
		}
	}
	if _, ok := c["Tcp:OutSegs"]; !ok {
		t.Fatalf("no Tcp: OutSegs in /proc/net/snmp:\n%s", out)
	}
	// txbytes: the bytes all its interfaces sent (/proc/net/dev's ninth
	// number of a line).
	dev, err := end.Run("cat", "/proc/net/dev")
	if err != nil {
		t.Fatalf("cat /proc/net/dev: %v\n%s", err, dev)
	}
	for _, l := range strings.Split(string(dev), "\n") {
		_, nums, ok := strings.Cut(l, ":")
		f := strings.Fields(nums)
		if !ok || len(f) < 9 {
			continue
		}
		v, err := strconv.ParseInt(f[8], 10, 64)
		if err != nil {
			continue
		}
		c["txbytes"] += v
	}
	return c
}

// TestRspreload runs testdata/tcp_echo.c, an ordinary TCP program (1 MiB
// each way, every byte checked, the way back after the client's
// shutdown(SHUT_WR), each side's end seen as recv 0), in a namespace of
// its own: first as it is, over the kernel's TCP, which the namespace's
// counters must show (so that they are the right ones); then under librspreload.so and
// libgoroce.so, where they must not move at all (no segment, no open)
// while UDP carried the data (RoCEv2), and librspreload.so's rsocket
// bound to libgoroce.so (LD_DEBUG).
func TestRspreload(t *testing.T) {
	netns.Privileged(t)
	if _, err := os.Stat(rspreload); err != nil {
		t.Skipf("%s: %v (Debian's librdmacm1 has it)", rspreload, err)
	}
	bin := buildC(t, "tcp_echo", "-lpthread")
	p := netns.New(t, netns.Config{})
	addr := p.A.IPv4.String()
	run := func(preload bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, addr)
		if preload {
			cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib+" "+rspreload, "GOROCE_NETDEV="+p.A.Link, "LD_DEBUG=bindings")
		}
		var out []byte
		err := p.A.Do(func() error {
			var err error
			out, err = cmd.CombinedOutput()
			return err
		})
		if err != nil || !bytes.Contains(out, []byte("tcp_echo: ok")) {
			t.Fatalf("tcp_echo (preloaded %v): %v\n%s", preload, err, tail(out))
		}
		if preload && !regexp.MustCompile("librspreload.so[^\n]* to [^\n]*libgoroce.so[^\n]*`rsocket'").Match(out) {
			t.Errorf("librspreload.so's rsocket did not bind to libgoroce.so:\n%s", tail(out))
		}
	}
	c0 := tcpCounters(t, p.A)
	run(false)
	c1 := tcpCounters(t, p.A)
	if d := c1["Tcp:OutSegs"] - c0["Tcp:OutSegs"]; d < 2*(1<<20)/65536 {
		t.Fatalf("tcp_echo over the kernel's TCP moved Tcp OutSegs by %d: not this namespace's counters?", d)
	}
	run(true)
	c2 := tcpCounters(t, p.A)
	for _, k := range []string{"Tcp:ActiveOpens", "Tcp:PassiveOpens", "Tcp:InSegs", "Tcp:OutSegs"} {
		if c2[k] != c1[k] {
			t.Errorf("under librspreload.so %s went from %d to %d: kernel TCP carried something", k, c1[k], c2[k])
		}
	}
	// UDP (RoCEv2) carried it: datagrams out (the udp link sends with
	// GSO, several packets a datagram), and the namespace's interfaces
	// (lo: the program talks to itself) sent at least the 2 MiB.
	if d := c2["Udp:OutDatagrams"] - c1["Udp:OutDatagrams"]; d <= 0 {
		t.Errorf("under librspreload.so Udp OutDatagrams moved by %d: the data went some other way", d)
	}
	if d := c2["txbytes"] - c1["txbytes"]; d < 2<<20 {
		t.Errorf("under librspreload.so the interfaces sent %d bytes, less than the 2 MiB echoed", d)
	}
	t.Logf("kernel TCP: %d segments out as it is, %d under librspreload.so; under it UDP datagrams out: %d, bytes sent: %d",
		c1["Tcp:OutSegs"]-c0["Tcp:OutSegs"], c2["Tcp:OutSegs"]-c1["Tcp:OutSegs"], c2["Udp:OutDatagrams"]-c1["Udp:OutDatagrams"],
		c2["txbytes"]-c1["txbytes"])
}

// tail is the end of a long output (LD_DEBUG's), for a failure message.
func tail(b []byte) []byte {
	if len(b) > 4000 {
		return b[len(b)-4000:]
	}
	return b
}

// rsocketHeading is docs/libgoroce.md's section whose sh block
// TestRsocketDocs runs.
const rsocketHeading = "## rsockets: rstream and unmodified TCP programs"

// TestRsocketDocs runs docs/libgoroce.md's rsockets lines as written on
// two hosts (namespaces joined by a veth, each interface renamed eth0
// with the page's address: 192.0.2.2 the server, 192.0.2.1 the client),
// but for the built library's path in place of $PWD/bin/libgoroce.so and
// a temporary directory's in place of /tmp: the rstream server line in
// the server's namespace (line-buffered, see stdbuf, so that the client
// starts once it listens), the client line and then the rest in the
// client's.
func TestRsocketDocs(t *testing.T) {
	netns.Privileged(t)
	toolCM(t, "rstream")
	lines := readmeLines(t, "../../docs/libgoroce.md", rsocketHeading)
	var srvLine string
	var rest []string
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "#") || strings.TrimSpace(l) == "":
		case srvLine == "" && strings.Contains(l, "rstream -b "):
			srvLine = l
		default:
			rest = append(rest, l)
		}
	}
	if srvLine == "" || len(rest) < 2 || !strings.Contains(rest[0], "rstream -s ") {
		t.Fatalf("%s's block is not an rstream server line, then its client, then more: %q", rsocketHeading, lines)
	}
	dir := t.TempDir()
	subst := func(l string) string {
		l = strings.ReplaceAll(l, "/tmp/", dir+"/")
		return strings.ReplaceAll(l, "$PWD/bin/libgoroce.so", lib)
	}
	p := readmeVeth(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// The server: its LD_PRELOAD with libstdbuf.so added, for the ready line.
	sl := subst(srvLine)
	if !strings.HasPrefix(sl, "LD_PRELOAD="+lib+" ") {
		t.Fatalf("the server line does not start with LD_PRELOAD=$PWD/bin/libgoroce.so: %q", srvLine)
	}
	sl = fmt.Sprintf("LD_PRELOAD='%s %s' _STDBUF_O=L %s", lib, stdbuf, strings.TrimPrefix(sl, "LD_PRELOAD="+lib+" "))
	wait := startServer(t, p.A, exec.CommandContext(ctx, "sh", "-ec", sl), "usec/xfer")
	script := subst(strings.Join(rest, "\n")) + "\n"
	var out []byte
	err := p.B.Do(func() error {
		var err error
		cmd := exec.CommandContext(ctx, "sh", "-ec", script)
		cmd.Dir = filepath.Join(wd(t), "..", "..") // the page's lines run from the repository's top
		out, err = cmd.CombinedOutput()
		return err
	})
	sout, serr := wait()
	if serr != nil || !bytes.Contains(sout, []byte("\ncustom ")) {
		t.Errorf("server line %q: %v\n%s", srvLine, serr, sout)
	}
	if err != nil || !bytes.Contains(out, []byte("\ncustom ")) || !bytes.Contains(out, []byte("tcp_echo: ok")) {
		t.Errorf("client lines %q: %v\n%s", rest, err, out)
	}
}

// wd is the test's working directory (the package's).
func wd(t *testing.T) string {
	t.Helper()
	d, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return d
}
