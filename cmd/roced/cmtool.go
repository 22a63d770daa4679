package main

import (
	"context"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/internal/endpoint"
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
// connection manager (QP1). The caller closes the manager, then the
// endpoint.
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
	return ep, m, nil
}
