package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/goroce/goroce/oob/ucmatose"
)

// librdmacm's ucmatose (examples/cmatose.c), connecting through goroce's
// RDMA connection manager (package cm) and moving its messages on every
// connection (package oob/ucmatose).

func init() {
	register("ucmatose", "librdmacm's ucmatose: -c RDMA CM connections, -C SENDs of -S bytes each way on each (-s ADDR client, else server)",
		untilSignal(runUcmatose))
}

// runUcmatose exits as cmatose does: 1 for a bad command line (exit(1)
// after its usage), else its return status; a device that cannot be
// opened is -1 (255), as cmatose's failed rdma_bind_addr or
// rdma_resolve_addr.
func runUcmatose(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const name = "roced ucmatose"
	cfg, err := ucmatose.ParseFlags(args)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s\n", name, strings.TrimPrefix(err.Error(), ucmatose.ErrUsage.Error()+": "))
		return exitUsage
	}
	// cmatose prints these as it reads its options, then goes on.
	for _, w := range cfg.Warnings {
		fmt.Fprintln(stderr, w)
	}
	// The server binds -b (cmatose's src_addr); the client connects to
	// -s and binds -b if given.
	ep, m, err := openCM(cmToolEndpoint(cfg.Link, cfg.Pcap, cfg.Dev, cfg.Addr, cfg.Bind), stderr, name)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitRunFail
	}
	defer ep.Close()
	defer m.Close()
	return ucmatose.Run(ctx, cfg, ucmatose.Env{Dev: ep.Device, CM: m, Stdout: stdout, Stderr: stderr})
}
