package udaddy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testharness"
	"github.com/goroce/goroce/nic/mem"
)

// tool runs roced's tool on a side (testharness.CMTool: its pairs run at
// testharness.CMServerAddr and CMClientAddr).
var tool = testharness.CMTool[Config]{Name: "udaddy", Parse: ParseFlags,
	Run: func(ctx context.Context, cfg Config, s *testharness.CMSide, listening func(netip.AddrPort)) int {
		return Run(ctx, cfg, Env{Dev: s.Dev, CM: s.CM, Stdout: &s.Stdout, Stderr: &s.Stderr, Listening: listening})
	}}

// TestClientRefused: with nobody listening, the SIDR_REQ is answered
// "unsupported": udaddy prints the event with the SIDR status and returns
// it, 1.
func TestClientRefused(t *testing.T) {
	t.Setenv("GOROCE_SERVER_WAIT", "0") // no server ever comes: one try, as the real tool
	net := mem.NewNet(1)
	testharness.NewCMSide(t, net, testharness.CMServerAddr)
	cli := testharness.NewCMSide(t, net, testharness.CMClientAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := tool.Run(ctx, tool.MustParse(t, "-s", testharness.CMServerAddr, "-c", "3"), cli, nil)
	want := "udaddy: starting client\nudaddy: connecting\nudaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 1\ntest complete\nreturn status 1\n"
	if code != 1 || cli.Stdout.String() != want || cli.Stderr.String() != "" {
		t.Fatalf("exit %d\n%s\nwant stdout\n%s", code, cli, want)
	}
}

// TestTooLarge: a message larger than the active MTU fails as
// verify_test_params does: the client before it sends anything (-EINVAL),
// the server as it takes the request, which it rejects; the server then
// goes on with no QP, as udaddy's run_server does, and ends 0.
func TestTooLarge(t *testing.T) {
	net := mem.NewNet(1)
	srv, cli := testharness.NewCMSide(t, net, testharness.CMServerAddr), testharness.NewCMSide(t, net, testharness.CMClientAddr)
	mtu := srv.Dev.ActiveMTU().Bytes()
	big := fmt.Sprint(mtu + 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := tool.Run(ctx, tool.MustParse(t, "-s", testharness.CMServerAddr, "-S", big), cli, nil)
	line := fmt.Sprintf("udaddy: message_size %d is larger than active mtu %d\n", mtu+1, mtu)
	if want := "udaddy: starting client\nudaddy: connecting\n" + line + "test complete\nreturn status -22\n"; code != 234 || cli.Stdout.String() != want {
		t.Fatalf("client: exit %d\n%s\nwant\n%s", code, cli, want)
	}

	cli.Stdout.Reset()
	testharness.RunCMPair(t, srv, cli, func(ctx context.Context, listening func(netip.AddrPort)) int {
		return tool.Run(ctx, tool.MustParse(t, "-S", big), srv, listening)
	}, func(ctx context.Context) int {
		return tool.Run(ctx, tool.MustParse(t, "-s", testharness.CMServerAddr), cli, nil)
	})
	if want := "udaddy: starting client\nudaddy: connecting\nudaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 2\ntest complete\nreturn status 2\n"; cli.Code != 2 || cli.Stdout.String() != want {
		t.Errorf("client: exit %d\n%s\nwant\n%s", cli.Code, cli, want)
	}
	want := "udaddy: starting server\n" + line + "udaddy: failing connection request\n" +
		"receiving data transfers\nsending replies\ndata transfers complete\ntest complete\nreturn status 0\n"
	if srv.Code != 0 || srv.Stdout.String() != want {
		t.Errorf("server: exit %d\n%s\nwant\n%s", srv.Code, srv, want)
	}
}

// TestServerCanceled: a server whose context ends before its clients came
// says so and ends -1; nothing hangs.
func TestServerCanceled(t *testing.T) { tool.CheckServerCanceled(t) }

// TestLateServer: three connections' client started before its server
// waits for it (GOROCE_SERVER_WAIT) where udaddy fails at the first refusal.
func TestLateServer(t *testing.T) {
	tool.CheckLateServer(t, []string{"-c", "3", "-C", "2"}, []string{"-c", "3", "-C", "2"})
}

// TestBindElsewhere: -b an address the device does not have fails as
// rdma_bind_addr (server) and rdma_resolve_addr (client) do.
func TestBindElsewhere(t *testing.T) { tool.CheckBindElsewhere(t) }

func TestParseFlags(t *testing.T) {
	c := tool.MustParse(t)
	if !c.IsServer() || c.Bind.IsValid() || c.Port != 7174 || c.Connections != 1 || c.Count != 10 ||
		c.Size != 100 || c.Link != "udp" || c.Dev != "" || c.Pcap != "" || len(c.Warnings) != 0 {
		t.Errorf("defaults %+v", c)
	}
	c = tool.MustParse(t, "-s", "::ffff:192.0.2.2", "-b", "192.0.2.1", "-c", "50", "-C", "7x", "-S", " 512",
		"-f", "IPv6", "-P", "UDP", "-p", "0x111", "--port", "9999", "--link", "afpacket", "--dev", "eth0", "--pcap", "f.pcap")
	if c.IsServer() || c.Addr != netip.MustParseAddr("192.0.2.2") || c.Bind != netip.MustParseAddr("192.0.2.1") ||
		c.Port != 9999 || c.Connections != 50 || c.Count != 7 || c.Size != 512 ||
		c.Link != "afpacket" || c.Dev != "eth0" || c.Pcap != "f.pcap" || len(c.Warnings) != 0 {
		t.Errorf("client %+v", c)
	}
	// What udaddy warns of and goes on.
	c = tool.MustParse(t, "-f", "x", "-P", "tcp")
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
