package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/goroce/goroce/internal/endpoint"
	"github.com/goroce/goroce/tools/rdmaserver"
)

// librdmacm's example pair rdma_server and rdma_client, connecting through
// goroce's RDMA connection manager (package cm) and exchanging their two
// 16-byte SENDs (package tools/rdmaserver).

func init() {
	for _, server := range []bool{true, false} {
		name, what := "rdma_client", "client: connect (-s ADDR), SEND 16 bytes, receive 16"
		if server {
			name, what = "rdma_server", "server: listen, receive 16 bytes, SEND 16 back"
		}
		register(name, "librdmacm's "+name+" example: RDMA CM connection, then its "+what,
			func(args []string, stdout, stderr io.Writer) int {
				ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
				defer stop()
				return runRdmaServer(ctx, server, args, stdout, stderr)
			})
	}
}

// showsUsage reports whether err is one of getopt's complaints (an
// unknown option such as -h, a missing argument), which the librdmacm
// tools answer with their usage text on stdout; their other refusals are
// one line. (tools/internal/getopt's Error says so; cmd/ cannot name it.)
func showsUsage(err error) bool {
	var u interface{ ShowsUsage() bool }
	return errors.As(err, &u) && u.ShowsUsage()
}

// The examples' exit statuses: 1 for a bad command line (exit(1) after
// the usage), -1 for a failure (run()'s ret).
const (
	exitUsage   = 1
	exitRunFail = 255
)

func runRdmaServer(ctx context.Context, server bool, args []string, stdout, stderr io.Writer) int {
	cfg, err := rdmaserver.ParseFlags(server, args)
	name := "roced " + cfg.Name()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s\n", name, strings.TrimPrefix(err.Error(), rdmaserver.ErrUsage.Error()+": "))
		if showsUsage(err) {
			rdmaserver.Usage(stdout, server, name)
		}
		return exitUsage
	}
	ec := endpoint.Config{Link: cfg.Link, GID: -1, Pcap: cfg.Pcap, Dev: cfg.Dev}
	switch {
	case !server:
		ec.Peer = cfg.Addr.String()
	case ec.Dev == "" && cfg.Addr.IsValid() && !cfg.Addr.IsUnspecified():
		ec.Dev = cfg.Addr.String()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ep, m, err := openCM(ec, stderr, name)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitRunFail
	}
	defer ep.Close()
	defer m.Close()
	return rdmaserver.Run(ctx, cfg, rdmaserver.Env{Dev: ep.Device, CM: m, Stdout: stdout, Stderr: stderr,
		Listening: func(a netip.AddrPort) { cmListening(a, cancel) }})
}
