package main

import (
	"context"
	"io"

	"github.com/goroce/goroce/tools/perftest"
)

// The eight perftest commands: roced write_bw ... atomic_lat are peers of
// ib_write_bw ... ib_atomic_lat. They take the tools' flags, exchange what
// the tools exchange over TCP (in the dialect of the version the peer
// speaks), run the same traffic with the same QP attributes and print the
// tools' output, so either side of a run can be the real tool (package
// tools/perftest runs them).
func init() {
	summaries := map[perftest.Test]string{
		perftest.WriteBW:   "RDMA WRITE bandwidth, a peer of perftest's ib_write_bw",
		perftest.WriteLat:  "RDMA WRITE latency, a peer of ib_write_lat",
		perftest.ReadBW:    "RDMA READ bandwidth, a peer of ib_read_bw",
		perftest.ReadLat:   "RDMA READ latency, a peer of ib_read_lat",
		perftest.SendBW:    "SEND bandwidth, a peer of ib_send_bw",
		perftest.SendLat:   "SEND latency, a peer of ib_send_lat",
		perftest.AtomicBW:  "atomic bandwidth, a peer of ib_atomic_bw",
		perftest.AtomicLat: "atomic latency, a peer of ib_atomic_lat",
	}
	for t, s := range summaries {
		register(t.String(), s, func(args []string, stdout, stderr io.Writer) int {
			return perftest.Main(context.Background(), t, args, stdout, stderr)
		})
		if !t.BW() {
			oneProc[t.String()] = true
		}
	}
}
