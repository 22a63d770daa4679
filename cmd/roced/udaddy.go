package main

import (
	"context"

	"github.com/goroce/goroce/tools/udaddy"
)

// librdmacm's udaddy (examples/udaddy.c): UD services resolved through
// goroce's RDMA connection manager (package cm, SIDR in the UDP port
// space) and datagrams on each (package tools/udaddy). It exits as udaddy
// does: 1 for a bad command line, else its return status.
func init() {
	registerCMTool("udaddy", "librdmacm's udaddy: -c UD services resolved through the RDMA CM (SIDR), -C SENDs of -S bytes each way on each (-s ADDR client, else server)",
		udaddy.ErrUsage, udaddy.Usage, udaddy.ParseFlags, func(ctx context.Context, cfg udaddy.Config, e cmToolEnv) int {
			return udaddy.Run(ctx, cfg, udaddy.Env{Dev: e.dev, CM: e.cm, Stdout: e.stdout, Stderr: e.stderr,
				Listening: e.listening})
		})
}
