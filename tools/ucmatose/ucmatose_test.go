package ucmatose

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testharness"
	"github.com/goroce/goroce/nic/mem"
)

// tool runs roced's tool on a side (testharness.CMTool: its pairs run at
// testharness.CMServerAddr and CMClientAddr).
var tool = testharness.CMTool[Config]{Name: "cmatose", Parse: ParseFlags,
	Run: func(ctx context.Context, cfg Config, s *testharness.CMSide, listening func(netip.AddrPort)) int {
		return Run(ctx, cfg, Env{Dev: s.Dev, CM: s.CM, Stdout: &s.Stdout, Stderr: &s.Stderr, Listening: listening})
	}}

// TestClientRefused: with nobody listening, the first connection's REQ is
// rejected (reason 8, invalid service ID): cmatose prints the event and
// returns its status, 8; the other connections are withdrawn, their
// events never printed.
func TestClientRefused(t *testing.T) {
	t.Setenv("GOROCE_SERVER_WAIT", "0") // no server ever comes: one try, as the real tool
	net := mem.NewNet(1)
	testharness.NewCMSide(t, net, testharness.CMServerAddr)
	cli := testharness.NewCMSide(t, net, testharness.CMClientAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := tool.Run(ctx, tool.MustParse(t, "-s", testharness.CMServerAddr, "-c", "3", "-p", "9"), cli, nil)
	want := "cmatose: starting client\ncmatose: connecting\ncmatose: event: RDMA_CM_EVENT_REJECTED, error: 8\ntest complete\nreturn status 8\n"
	if code != 8 || cli.Stdout.String() != want || cli.Stderr.String() != "" {
		t.Fatalf("exit %d\n%s\nwant stdout\n%s", code, cli, want)
	}
}

// TestSizeMismatch: a client whose -S is not the server's. cmatose counts
// whatever completes and ends 0; roced's client finds the server's
// 100-byte messages short of its 200 and fails and disconnects, which
// flushes the server's work requests: both fail, -1.
func TestSizeMismatch(t *testing.T) {
	srv, cli := tool.Pair(t, []string{"-S", "100"}, []string{"-S", "200"})
	if srv.Code != 255 || cli.Code != 255 {
		t.Fatalf("exit %d %d\nserver:\n%s\nclient:\n%s", srv.Code, cli.Code, srv, cli)
	}
	if got, want := cli.Stdout.String(), "cmatose: starting client\ncmatose: connecting\nreceiving data transfers\ntest complete\nreturn status -1\n"; got != want {
		t.Errorf("client printed\n%s\nwant\n%s", got, want)
	}
	if got, want := cli.Stderr.String(), "cmatose: failed polling CQ: connection 0: received 100 bytes, want 200\n"; got != want {
		t.Errorf("client's stderr %q, want %q", got, want)
	}
	// The client fails on the first message; the server's SENDs not yet
	// acknowledged by then are flushed, or else its receives are.
	start, end := "cmatose: starting server\ninitiating data transfers\ncompleting sends\n", "test complete\nreturn status -1\n"
	if got := srv.Stdout.String(); got != start+end && got != start+"receiving data transfers\n"+end {
		t.Errorf("server printed\n%s", got)
	}
	if e := srv.Stderr.String(); !strings.HasPrefix(e, "cmatose: failed polling CQ: connection 0: ") || strings.Count(e, "\n") != 1 {
		t.Errorf("server's stderr %q", e)
	}
}

// TestServerCanceled: a server whose context ends before its clients came
// says so and ends -1; nothing hangs.
func TestServerCanceled(t *testing.T) { tool.CheckServerCanceled(t) }

// TestLateServer: three connections' client started before its server
// waits for it (GOROCE_SERVER_WAIT) where cmatose fails at the first refusal.
func TestLateServer(t *testing.T) {
	tool.CheckLateServer(t, []string{"-c", "3", "-C", "2"}, []string{"-c", "3", "-C", "2"})
}

// TestBindElsewhere: -b an address the device does not have fails as
// rdma_bind_addr (server) and rdma_resolve_addr (client) do.
func TestBindElsewhere(t *testing.T) { tool.CheckBindElsewhere(t) }

func TestParseFlags(t *testing.T) {
	c := tool.MustParse(t)
	if !c.IsServer() || c.Bind.IsValid() || c.Port != 7471 || c.Connections != 1 || c.Count != 10 ||
		c.Size != 100 || c.Migrate || c.Link != "udp" || c.Dev != "" || c.Pcap != "" || len(c.Warnings) != 0 {
		t.Errorf("defaults %+v", c)
	}
	c = tool.MustParse(t, "-s", "::ffff:192.0.2.2", "-b", "192.0.2.1", "-p", "9999", "-c", "50", "-C", "7x", "-S", " 4096",
		"-m", "-f", "IPv6", "-P", "TCP", "--link", "afpacket", "--dev", "eth0", "--pcap", "f.pcap")
	if c.IsServer() || c.Addr != netip.MustParseAddr("192.0.2.2") || c.Bind != netip.MustParseAddr("192.0.2.1") ||
		c.Port != 9999 || c.Connections != 50 || c.Count != 7 || c.Size != 4096 || !c.Migrate ||
		c.Link != "afpacket" || c.Dev != "eth0" || c.Pcap != "f.pcap" || len(c.Warnings) != 0 {
		t.Errorf("client %+v", c)
	}
	// What cmatose warns of and goes on.
	c = tool.MustParse(t, "-f", "x", "-P", "sdp")
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
