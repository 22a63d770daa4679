package ucmatose

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/nic"
)

const (
	serverAddr = "198.51.100.2"
	clientAddr = "198.51.100.1"
)

// syncBuffer is a bytes.Buffer written by a run and read by the test
// while it may still run.
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

// side is one process of a pair: its device, output and exit status.
type side struct {
	env      Env
	out, err syncBuffer
	code     int
}

func newSide(t *testing.T, net *nic.MemNet, addr string) *side {
	dev, m := rdmatest.CMNode(t, net, addr)
	s := &side{}
	s.env = Env{Dev: dev, CM: m, Stdout: &s.out, Stderr: &s.err}
	return s
}

func (s *side) String() string { return s.out.String() + s.err.String() }

func parse(t *testing.T, args ...string) Config {
	t.Helper()
	c, err := ParseFlags(args)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runPair runs roced ucmatose as the server with sargs and, once it
// listens, as the client with cargs, and returns both sides when both
// ended.
func runPair(t *testing.T, sargs, cargs []string) (srv, cli *side) {
	t.Helper()
	net := nic.NewMemNet(1)
	srv, cli = newSide(t, net, serverAddr), newSide(t, net, clientAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	listening := make(chan struct{})
	srv.env.Listening = func(netip.AddrPort) { close(listening) }
	served := make(chan struct{})
	scfg, ccfg := parse(t, sargs...), parse(t, append([]string{"-s", serverAddr}, cargs...)...)
	go func() { defer close(served); srv.code = Run(ctx, scfg, srv.env) }()
	select {
	case <-listening:
	case <-served:
		t.Fatalf("the server exited %d before it listened:\n%s", srv.code, srv)
	}
	cli.code = Run(ctx, ccfg, cli.env)
	<-served
	return srv, cli
}

// The lines cmatose.c prints (stdout) on success: run_server's and
// run_client's, then main's "test complete" and "return status".
const (
	serverData = "initiating data transfers\ncompleting sends\nreceiving data transfers\ndata transfers complete\n"
	clientData = "receiving data transfers\nsending replies\ndata transfers complete\n"
	serverOK   = "cmatose: starting server\n" + serverData + "cmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n"
	clientOK   = "cmatose: starting client\ncmatose: connecting\n" + clientData + "test complete\nreturn status 0\n"
)

// TestPair: roced ucmatose as server and client over the in-memory
// network print exactly cmatose's lines, exit 0, say nothing on stderr,
// and the messages really crossed: each device completed -c × -C SENDs
// and received as many.
func TestPair(t *testing.T) {
	for _, tc := range []struct {
		name        string
		args        []string // both sides'
		msgs        uint64   // each way, all connections
		server, cli string
	}{
		{name: "c1", msgs: 10, server: serverOK, cli: clientOK},
		{name: "c50", args: []string{"-c", "50", "-C", "10", "-S", "100"}, msgs: 500, server: serverOK, cli: clientOK},
		// Messages of several packets each.
		{name: "c3-S5000", args: []string{"-c", "3", "-C", "4", "-S", "5000"}, msgs: 12, server: serverOK, cli: clientOK},
		// No messages: run_server and run_client skip their data lines.
		{name: "C0-migrate", args: []string{"-C", "0", "-m"}, msgs: 0,
			server: "cmatose: starting server\nmigrating to new event channel\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n",
			cli:    "cmatose: starting client\ncmatose: connecting\nmigrating to new event channel\ntest complete\nreturn status 0\n"},
		// -S 0 zeroes the message count (create_message).
		{name: "S0", args: []string{"-c", "2", "-S", "0"}, msgs: 0,
			server: "cmatose: starting server\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n",
			cli:    "cmatose: starting client\ncmatose: connecting\ntest complete\nreturn status 0\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, cli := runPair(t, tc.args, tc.args)
			if srv.code != 0 || cli.code != 0 || srv.err.String() != "" || cli.err.String() != "" {
				t.Fatalf("exit %d %d\nserver:\n%s\nclient:\n%s", srv.code, cli.code, srv, cli)
			}
			if got := srv.out.String(); got != tc.server {
				t.Errorf("server printed\n%s\nwant\n%s", got, tc.server)
			}
			if got := cli.out.String(); got != tc.cli {
				t.Errorf("client printed\n%s\nwant\n%s", got, tc.cli)
			}
			for _, s := range []*side{srv, cli} {
				c := s.env.Dev.Counters()
				if sends, recvs := c.RDMASends.Load(), c.RDMARecvs.Load(); sends != tc.msgs || recvs != tc.msgs {
					t.Errorf("rdma_sends %d rdma_recvs %d, want %d each", sends, recvs, tc.msgs)
				}
			}
		})
	}
}

// TestClientRefused: with nobody listening, the first connection's REQ is
// rejected (reason 8, invalid service ID): cmatose prints the event and
// returns its status, 8; the other connections are withdrawn, their
// events never printed.
func TestClientRefused(t *testing.T) {
	net := nic.NewMemNet(1)
	newSide(t, net, serverAddr)
	cli := newSide(t, net, clientAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := Run(ctx, parse(t, "-s", serverAddr, "-c", "3", "-p", "9"), cli.env)
	want := "cmatose: starting client\ncmatose: connecting\ncmatose: event: RDMA_CM_EVENT_REJECTED, error: 8\ntest complete\nreturn status 8\n"
	if code != 8 || cli.out.String() != want || cli.err.String() != "" {
		t.Fatalf("exit %d\n%s\nwant stdout\n%s", code, cli, want)
	}
}

// TestSizeMismatch: a client whose -S is not the server's. cmatose counts
// whatever completes and ends 0; roced's client finds the server's
// 100-byte messages short of its 200 and fails and disconnects, which
// flushes the server's work requests: both fail, -1.
func TestSizeMismatch(t *testing.T) {
	srv, cli := runPair(t, []string{"-S", "100"}, []string{"-S", "200"})
	if srv.code != 255 || cli.code != 255 {
		t.Fatalf("exit %d %d\nserver:\n%s\nclient:\n%s", srv.code, cli.code, srv, cli)
	}
	if got, want := cli.out.String(), "cmatose: starting client\ncmatose: connecting\nreceiving data transfers\ntest complete\nreturn status -1\n"; got != want {
		t.Errorf("client printed\n%s\nwant\n%s", got, want)
	}
	if got, want := cli.err.String(), "cmatose: failed polling CQ: connection 0: received 100 bytes, want 200\n"; got != want {
		t.Errorf("client's stderr %q, want %q", got, want)
	}
	// The client fails on the first message; the server's SENDs not yet
	// acknowledged by then are flushed, or else its receives are.
	start, end := "cmatose: starting server\ninitiating data transfers\ncompleting sends\n", "test complete\nreturn status -1\n"
	if got := srv.out.String(); got != start+end && got != start+"receiving data transfers\n"+end {
		t.Errorf("server printed\n%s", got)
	}
	if e := srv.err.String(); !strings.HasPrefix(e, "cmatose: failed polling CQ: connection 0: ") || strings.Count(e, "\n") != 1 {
		t.Errorf("server's stderr %q", e)
	}
}

// TestServerCanceled: a server whose context ends before its clients came
// says so and ends -1; nothing hangs.
func TestServerCanceled(t *testing.T) {
	net := nic.NewMemNet(1)
	srv := newSide(t, net, serverAddr)
	ctx, cancel := context.WithCancel(context.Background())
	srv.env.Listening = func(netip.AddrPort) { cancel() }
	code := Run(ctx, parse(t, "-c", "2"), srv.env)
	if code != 255 || srv.out.String() != "cmatose: starting server\ntest complete\nreturn status -1\n" ||
		srv.err.String() != "cmatose: failure in rdma_get_cm_event in connect events: context canceled\n" {
		t.Fatalf("exit %d\n%s", code, srv)
	}
}

// TestBindElsewhere: -b an address the device does not have fails as
// rdma_bind_addr (server) and rdma_resolve_addr (client) do.
func TestBindElsewhere(t *testing.T) {
	net := nic.NewMemNet(1)
	s := newSide(t, net, serverAddr)
	ctx := context.Background()
	if code := Run(ctx, parse(t, "-b", "192.0.2.9"), s.env); code != 255 ||
		!strings.HasPrefix(s.err.String(), "cmatose: bind address failed: ") ||
		s.out.String() != "cmatose: starting server\ntest complete\nreturn status -1\n" {
		t.Errorf("server: exit %d\n%s", code, s)
	}
	c := newSide(t, net, clientAddr)
	if code := Run(ctx, parse(t, "-s", serverAddr, "-b", "192.0.2.9"), c.env); code != 255 ||
		!strings.HasPrefix(c.err.String(), "cmatose: failure getting addr: ") ||
		c.out.String() != "cmatose: starting client\ncmatose: connecting\ntest complete\nreturn status -1\n" {
		t.Errorf("client: exit %d\n%s", code, c)
	}
}

func TestParseFlags(t *testing.T) {
	c := parse(t)
	if !c.IsServer() || c.Bind.IsValid() || c.Port != 7471 || c.Connections != 1 || c.Count != 10 ||
		c.Size != 100 || c.Migrate || c.Link != "udp" || c.Dev != "" || c.Pcap != "" || len(c.Warnings) != 0 {
		t.Errorf("defaults %+v", c)
	}
	c = parse(t, "-s", "::ffff:192.0.2.2", "-b", "192.0.2.1", "-p", "9999", "-c", "50", "-C", "7x", "-S", " 4096",
		"-m", "-f", "IPv6", "-P", "TCP", "--link", "afpacket", "--dev", "eth0", "--pcap", "f.pcap")
	if c.IsServer() || c.Addr != netip.MustParseAddr("192.0.2.2") || c.Bind != netip.MustParseAddr("192.0.2.1") ||
		c.Port != 9999 || c.Connections != 50 || c.Count != 7 || c.Size != 4096 || !c.Migrate ||
		c.Link != "afpacket" || c.Dev != "eth0" || c.Pcap != "f.pcap" || len(c.Warnings) != 0 {
		t.Errorf("client %+v", c)
	}
	// What cmatose warns of and goes on.
	c = parse(t, "-f", "x", "-P", "sdp")
	if want := []string{"Warning: unknown address format", "Warning: unknown port space format"}; strings.Join(c.Warnings, "|") != strings.Join(want, "|") {
		t.Errorf("warnings %q, want %q", c.Warnings, want)
	}
	for _, bad := range [][]string{
		{"-P", "ib"}, {"-P", "udp"}, {"-f", "gid"}, {"-t", "0x20"}, {"-a", "14"},
		{"-c", "-1"}, {"-c", "x"}, {"-c", "70000"}, {"-C", "-1"}, {"-C", "40000"}, {"-S", "-5"}, {"-S", ""},
		{"-p", "0"}, {"-p", "65536"}, {"-p", "http"}, {"-s", "host.example"}, {"-s", "0.0.0.0"},
		{"-b", "nohost"}, {"-s", "192.0.2.2", "-b", "::1"}, {"-s", "192.0.2.2", "-b", "0.0.0.0"},
		{"extra"}, {"-x"}, {"-s"}, {"--link", "tcp"},
	} {
		if _, err := ParseFlags(bad); !errors.Is(err, ErrUsage) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
