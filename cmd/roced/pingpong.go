package main

import (
	"context"
	"io"

	"github.com/goroce/goroce/tools/pingpong"
)

// The four rdma-core example programs, as drop-in peers of the real ones:
// same flags, same QP setup, same send/receive loop and the same output, so
// that either end of an ibv_*_pingpong run can be roced (package
// tools/pingpong runs them).

func init() {
	summaries := map[pingpong.Tool]string{
		pingpong.RC:  "ibv_rc_pingpong: RC SEND ping-pong (server without a host, client with one)",
		pingpong.UC:  "ibv_uc_pingpong: UC SEND ping-pong",
		pingpong.UD:  "ibv_ud_pingpong: UD SEND ping-pong (Q_Key 0x11111111, GRH in the receive buffer)",
		pingpong.SRQ: "ibv_srq_pingpong: RC ping-pong on -q QPs sharing one SRQ",
	}
	for _, t := range []pingpong.Tool{pingpong.RC, pingpong.UC, pingpong.UD, pingpong.SRQ} {
		register(t.String(), summaries[t], func(args []string, stdout, stderr io.Writer) int {
			return pingpong.Main(context.Background(), t, args, stdout, stderr)
		})
	}
}
