package udaddy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// runPair runs roced udaddy as the server with sargs and, once it
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

// The lines udaddy.c prints (stdout) on success: run_server's and
// run_client's, then main's "test complete" and "return status".
const (
	serverOK = "udaddy: starting server\nreceiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n"
	clientOK = "udaddy: starting client\nudaddy: connecting\ninitiating data transfers\nreceiving data transfers\ndata transfers complete\ntest complete\nreturn status 0\n"
)

// TestPair: roced udaddy as server and client over the in-memory network
// print exactly udaddy's lines, exit 0, say nothing on stderr, and the
// datagrams really crossed: each device sent -c × -C SENDs with
// immediate and received as many.
func TestPair(t *testing.T) {
	for _, tc := range []struct {
		name        string
		args        []string // both sides'
		msgs        uint64   // each way, all QPs
		server, cli string
	}{
		{name: "c1", msgs: 10, server: serverOK, cli: clientOK},
		{name: "c20", args: []string{"-c", "20", "-C", "10", "-S", "100"}, msgs: 200, server: serverOK, cli: clientOK},
		{name: "c2-S1024", args: []string{"-c", "2", "-C", "5", "-S", "1024"}, msgs: 10, server: serverOK, cli: clientOK},
		// No messages: run_server and run_client skip their data lines.
		{name: "C0", args: []string{"-c", "2", "-C", "0"}, msgs: 0,
			server: "udaddy: starting server\ntest complete\nreturn status 0\n",
			cli:    "udaddy: starting client\nudaddy: connecting\ntest complete\nreturn status 0\n"},
		// -S 0 zeroes the message count (create_message).
		{name: "S0", args: []string{"-S", "0"}, msgs: 0,
			server: "udaddy: starting server\ntest complete\nreturn status 0\n",
			cli:    "udaddy: starting client\nudaddy: connecting\ntest complete\nreturn status 0\n"},
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

// TestClientRefused: with nobody listening, the SIDR_REQ is answered
// "unsupported": udaddy prints the event with the SIDR status and returns
// it, 1.
func TestClientRefused(t *testing.T) {
	net := nic.NewMemNet(1)
	newSide(t, net, serverAddr)
	cli := newSide(t, net, clientAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := Run(ctx, parse(t, "-s", serverAddr, "-c", "3"), cli.env)
	want := "udaddy: starting client\nudaddy: connecting\nudaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 1\ntest complete\nreturn status 1\n"
	if code != 1 || cli.out.String() != want || cli.err.String() != "" {
		t.Fatalf("exit %d\n%s\nwant stdout\n%s", code, cli, want)
	}
}

// TestTooLarge: a message larger than the active MTU fails as
// verify_test_params does: the client before it sends anything (-EINVAL),
// the server as it takes the request, which it rejects; the server then
// goes on with no QP, as udaddy's run_server does, and ends 0.
func TestTooLarge(t *testing.T) {
	net := nic.NewMemNet(1)
	srv, cli := newSide(t, net, serverAddr), newSide(t, net, clientAddr)
	mtu := srv.env.Dev.ActiveMTU().Bytes()
	big := fmt.Sprint(mtu + 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := Run(ctx, parse(t, "-s", serverAddr, "-S", big), cli.env)
	line := fmt.Sprintf("udaddy: message_size %d is larger than active mtu %d\n", mtu+1, mtu)
	if want := "udaddy: starting client\nudaddy: connecting\n" + line + "test complete\nreturn status -22\n"; code != 234 || cli.out.String() != want {
		t.Fatalf("client: exit %d\n%s\nwant\n%s", code, cli, want)
	}

	listening := make(chan struct{})
	srv.env.Listening = func(netip.AddrPort) { close(listening) }
	served := make(chan int)
	go func() { served <- Run(ctx, parse(t, "-S", big), srv.env) }()
	<-listening
	cli.out.b.Reset()
	code = Run(ctx, parse(t, "-s", serverAddr), cli.env)
	if want := "udaddy: starting client\nudaddy: connecting\nudaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 2\ntest complete\nreturn status 2\n"; code != 2 || cli.out.String() != want {
		t.Errorf("client: exit %d\n%s\nwant\n%s", code, cli, want)
	}
	want := "udaddy: starting server\n" + line + "udaddy: failing connection request\n" +
		"receiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n"
	if code := <-served; code != 0 || srv.out.String() != want {
		t.Errorf("server: exit %d\n%s\nwant\n%s", code, srv, want)
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
	if code != 255 || srv.out.String() != "udaddy: starting server\ntest complete\nreturn status -1\n" ||
		srv.err.String() != "udaddy: failure in rdma_get_cm_event in connect events: context canceled\n" {
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
		!strings.HasPrefix(s.err.String(), "udaddy: bind address failed: ") ||
		s.out.String() != "udaddy: starting server\ntest complete\nreturn status -1\n" {
		t.Errorf("server: exit %d\n%s", code, s)
	}
	c := newSide(t, net, clientAddr)
	if code := Run(ctx, parse(t, "-s", serverAddr, "-b", "192.0.2.9"), c.env); code != 255 ||
		!strings.HasPrefix(c.err.String(), "udaddy: failure getting addr: ") ||
		c.out.String() != "udaddy: starting client\nudaddy: connecting\ntest complete\nreturn status -1\n" {
		t.Errorf("client: exit %d\n%s", code, c)
	}
}

func TestParseFlags(t *testing.T) {
	c := parse(t)
	if !c.IsServer() || c.Bind.IsValid() || c.Port != 7174 || c.Connections != 1 || c.Count != 10 ||
		c.Size != 100 || c.Link != "udp" || c.Dev != "" || c.Pcap != "" || len(c.Warnings) != 0 {
		t.Errorf("defaults %+v", c)
	}
	c = parse(t, "-s", "::ffff:192.0.2.2", "-b", "192.0.2.1", "-c", "50", "-C", "7x", "-S", " 512",
		"-f", "IPv6", "-P", "UDP", "-p", "0x111", "--port", "9999", "--link", "afpacket", "--dev", "eth0", "--pcap", "f.pcap")
	if c.IsServer() || c.Addr != netip.MustParseAddr("192.0.2.2") || c.Bind != netip.MustParseAddr("192.0.2.1") ||
		c.Port != 9999 || c.Connections != 50 || c.Count != 7 || c.Size != 512 ||
		c.Link != "afpacket" || c.Dev != "eth0" || c.Pcap != "f.pcap" || len(c.Warnings) != 0 {
		t.Errorf("client %+v", c)
	}
	// What udaddy warns of and goes on.
	c = parse(t, "-f", "x", "-P", "tcp")
	if want := []string{"Warning: unknown address format", "Warning: unknown port space format"}; strings.Join(c.Warnings, "|") != strings.Join(want, "|") {
		t.Errorf("warnings %q, want %q", c.Warnings, want)
	}
	for _, bad := range [][]string{
		{"-P", "ipoib"}, {"-p", "0x2"}, {"-p", "0x106"}, {"-p", "x"}, {"-f", "gid"}, {"-t", "0x20"},
		{"-c", "-1"}, {"-c", "x"}, {"-c", "70000"}, {"-C", "-1"}, {"-C", "40000"}, {"-S", "-5"}, {"-S", ""},
		{"--port", "0"}, {"--port", "65536"}, {"-s", "host.example"}, {"-s", "0.0.0.0"},
		{"-b", "nohost"}, {"-s", "192.0.2.2", "-b", "::1"}, {"-s", "192.0.2.2", "-b", "0.0.0.0"},
		{"extra"}, {"-x"}, {"-s"}, {"--link", "tcp"}, {"-a", "14"}, {"-m"},
	} {
		if _, err := ParseFlags(bad); !errors.Is(err, ErrUsage) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
