package main

import (
	"context"

	"github.com/goroce/goroce/tools/ucmatose"
)

// librdmacm's ucmatose (examples/cmatose.c), connecting through goroce's
// RDMA connection manager (package cm) and moving its messages on every
// connection (package tools/ucmatose). It exits as cmatose does: 1 for a
// bad command line, else its return status.
func init() {
	registerCMTool("ucmatose", "librdmacm's ucmatose: -c RDMA CM connections, -C SENDs of -S bytes each way on each (-s ADDR client, else server)",
		ucmatose.ErrUsage, ucmatose.Usage, ucmatose.ParseFlags, func(ctx context.Context, cfg ucmatose.Config, e cmToolEnv) int {
			return ucmatose.Run(ctx, cfg, ucmatose.Env{Dev: e.dev, CM: e.cm, Stdout: e.stdout, Stderr: e.stderr,
				Listening: e.listening})
		})
}
