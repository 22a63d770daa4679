package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/internal/endpoint"
	"github.com/goroce/goroce/transport"
)

// untilSignal makes a command of run: its context ends with SIGINT or
// SIGTERM, as the tool's process would end.
func untilSignal(run func(ctx context.Context, args []string, stdout, stderr io.Writer) int) func(args []string, stdout, stderr io.Writer) int {
	return func(args []string, stdout, stderr io.Writer) int {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return run(ctx, args, stdout, stderr)
	}
}

// cmToolEndpoint is the device of a librdmacm tool whose -s names the
// server (unset: this side serves) and whose -b the address to bind: a
// client's device is the one that routes to the server, and -b picks it
// where --dev does not.
func cmToolEndpoint(link, pcap, dev string, server, bind netip.Addr) endpoint.Config {
	ec := endpoint.Config{Link: link, GID: -1, Pcap: pcap, Dev: dev}
	if server.IsValid() {
		ec.Peer = server.String()
	}
	if ec.Dev == "" && bind.IsValid() && !bind.IsUnspecified() {
		ec.Dev = bind.String()
	}
	return ec
}

// openCM opens the device a tool of librdmacm's runs on and starts its
// connection manager (QP1), whose listeners the stats socket lists (roced
// stats, as rdma(8) lists the kernel's cm_ids). The caller closes the
// manager, then the endpoint.
func openCM(ec endpoint.Config, stderr io.Writer, name string) (*endpoint.Endpoint, *cm.Manager, error) {
	ep, err := endpoint.Open(ec)
	if err != nil {
		return nil, nil, err
	}
	ep.WarnStats(stderr, name)
	m, err := cm.New(ep.Device, cm.Options{})
	if err != nil {
		ep.Close()
		return nil, nil, err
	}
	ep.ServeCM(m)
	return ep, m, nil
}

// cmToolConfig is what the command line of a librdmacm example (ucmatose,
// udaddy: tools/internal/cmflags) tells the frame that runs it.
type cmToolConfig interface {
	// Endpoint says which device to open.
	Endpoint() endpoint.Config
	// PrintWarnings prints the lines the tool prints on stderr as it
	// reads its options, then goes on.
	PrintWarnings(io.Writer)
}

// cmToolEnv is what such a tool runs with besides its command line.
type cmToolEnv struct {
	dev            *transport.Device
	cm             *cm.Manager
	stdout, stderr io.Writer
	// listening is called once the tool's server listens.
	listening func(netip.AddrPort)
}

// cmListening is called once a CM tool's server (ucmatose, udaddy,
// rdma_server) listens, with what stops it as SIGINT would: the loopback
// tests start their client only then (a client of several connections
// whose REQs straddle the listen would leave the server some of them),
// and stop a server whose client failed rather than wait for it forever.
var cmListening = func(netip.AddrPort, context.CancelFunc) {}

// registerCMTool registers roced's NAME, a librdmacm example: parse
// reads its command line (an error wrapping usage is one line on stderr
// and exit status 1, as the tool's usage exit; a getopt complaint, such
// as -h, adds the tool's usage text, printUsage's, on stdout); then its warnings are
// printed, the device opened and its connection manager started, and
// run's status is the command's. A device that cannot be opened is -1
// (255), as the tool's failed rdma_bind_addr or rdma_resolve_addr. SIGINT
// and SIGTERM end run's context.
func registerCMTool[C cmToolConfig](name, summary string, usage error, printUsage func(io.Writer, string),
	parse func([]string) (C, error), run func(context.Context, C, cmToolEnv) int) {
	register(name, summary, func(args []string, stdout, stderr io.Writer) int {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		who := "roced " + name
		cfg, err := parse(args)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %s\n", who, strings.TrimPrefix(err.Error(), usage.Error()+": "))
			if showsUsage(err) {
				printUsage(stdout, who)
			}
			return exitUsage
		}
		cfg.PrintWarnings(stderr)
		ep, m, err := openCM(cfg.Endpoint(), stderr, who)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", who, err)
			return exitRunFail
		}
		defer ep.Close()
		defer m.Close()
		return run(ctx, cfg, cmToolEnv{ep.Device, m, stdout, stderr, func(a netip.AddrPort) { cmListening(a, cancel) }})
	})
}
