package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/oob/udaddy"
	"github.com/goroce/goroce/transport"
)

// librdmacm's udaddy (examples/udaddy.c): UD services resolved through
// goroce's RDMA connection manager (package cm, SIDR in the UDP port
// space) and datagrams on each (package oob/udaddy).

func init() {
	register("udaddy", "librdmacm's udaddy: -c UD services resolved through the RDMA CM (SIDR), -C SENDs of -S bytes each way on each (-s ADDR client, else server)",
		func(args []string, stdout, stderr io.Writer) int {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runUdaddy(ctx, args, stdout, stderr)
		})
}

// runUdaddy exits as udaddy does: 1 for a bad command line (exit(1) after
// its usage), else its return status (runCMTool).
func runUdaddy(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := udaddy.ParseFlags(args)
	f := cmToolFlags{Warnings: cfg.Warnings, Server: cfg.IsServer(), Addr: cfg.Addr, Bind: cfg.Bind,
		Dev: cfg.Dev, Link: cfg.Link, Pcap: cfg.Pcap}
	return runCMTool("roced udaddy", f, err, udaddy.ErrUsage, stderr, func(dev *transport.Device, m *cm.Manager) int {
		return udaddy.Run(ctx, cfg, udaddy.Env{Dev: dev, CM: m, Stdout: stdout, Stderr: stderr})
	})
}
