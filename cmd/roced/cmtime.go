package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/goroce/goroce/tools/cmtime"
)

// librdmacm's cmtime (examples/cmtime.c): the steps of setting up and
// tearing down RDMA CM connections, timed on goroce's connection manager
// (package cm), in the report of the peer's rdma-core (package
// tools/cmtime).

func init() {
	register("cmtime", "librdmacm's cmtime: times -c RDMA CM connections step by step (-s ADDR client, else server; rdma-core 44 or 56, --rdma-core)",
		untilSignal(runCmtime))
}

// runCmtime exits as cmtime does: 1 for a bad command line (its usage)
// and for any failure (exit(EXIT_FAILURE)), else 0.
func runCmtime(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const name = "roced cmtime"
	cfg, err := cmtime.ParseFlags(args)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s\n", name, strings.TrimPrefix(err.Error(), cmtime.ErrUsage.Error()+": "))
		if showsUsage(err) {
			cmtime.Usage(stdout, name)
		}
		return exitUsage
	}
	if cfg.Socket {
		// -S times plain TCP sockets: no device.
		return cmtime.Run(ctx, cfg, cmtime.Env{Stdout: stdout, Stderr: stderr})
	}
	ep, m, err := openCM(cmToolEndpoint(cfg.Link, cfg.Pcap, cfg.Dev, cfg.Addr, cfg.Bind), stderr, name)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1 // cmtime's exit(EXIT_FAILURE)
	}
	defer ep.Close()
	defer m.Close()
	return cmtime.Run(ctx, cfg, cmtime.Env{Dev: ep.Device, CM: m, Stdout: stdout, Stderr: stderr})
}
