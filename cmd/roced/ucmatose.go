package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/oob/ucmatose"
	"github.com/goroce/goroce/transport"
)

// librdmacm's ucmatose (examples/cmatose.c), connecting through goroce's
// RDMA connection manager (package cm) and moving its messages on every
// connection (package oob/ucmatose).

func init() {
	register("ucmatose", "librdmacm's ucmatose: -c RDMA CM connections, -C SENDs of -S bytes each way on each (-s ADDR client, else server)",
		func(args []string, stdout, stderr io.Writer) int {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runUcmatose(ctx, args, stdout, stderr)
		})
}

// runUcmatose exits as cmatose does: 1 for a bad command line (exit(1)
// after its usage), else its return status (runCMTool).
func runUcmatose(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := ucmatose.ParseFlags(args)
	f := cmToolFlags{Warnings: cfg.Warnings, Server: cfg.IsServer(), Addr: cfg.Addr, Bind: cfg.Bind,
		Dev: cfg.Dev, Link: cfg.Link, Pcap: cfg.Pcap}
	return runCMTool("roced ucmatose", f, err, ucmatose.ErrUsage, stderr, func(dev *transport.Device, m *cm.Manager) int {
		return ucmatose.Run(ctx, cfg, ucmatose.Env{Dev: dev, CM: m, Stdout: stdout, Stderr: stderr})
	})
}
