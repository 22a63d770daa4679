package linkio

import (
	"sync/atomic"

	"github.com/goroce/goroce/nic"
)

// Counters is the atomically updated form of nic.Stats that links hold,
// each field the Stats field of the same name. Send runs from many
// goroutines, so every field is atomic; links add once per batch, not per
// packet, to keep the cache line quiet.
type Counters struct {
	TxPackets, TxBytes           atomic.Uint64 // Stats.TxPackets, TxBytes
	RxPackets, RxBytes           atomic.Uint64 // Stats.RxPackets, RxBytes
	TxDropped, RxDropped         atomic.Uint64 // Stats.TxDropped, RxDropped
	TxBatches, RxBatches         atomic.Uint64 // Stats.TxBatches, RxBatches
	TxGSOSegments, RxGROSegments atomic.Uint64 // Stats.TxGSOSegments, RxGROSegments
	TxGSORefused, RxGROCopies    atomic.Uint64 // Stats.TxGSORefused, RxGROCopies
	TxNoNeighbour, RxIDUnsolved  atomic.Uint64 // Stats.TxNoNeighbour, RxIDUnsolved
	RxKernelDrops                atomic.Uint64 // Stats.RxKernelDrops
}

// Snapshot reads the counters.
func (c *Counters) Snapshot() nic.Stats {
	return nic.Stats{
		TxPackets:     c.TxPackets.Load(),
		TxBytes:       c.TxBytes.Load(),
		RxPackets:     c.RxPackets.Load(),
		RxBytes:       c.RxBytes.Load(),
		TxDropped:     c.TxDropped.Load(),
		RxDropped:     c.RxDropped.Load(),
		TxBatches:     c.TxBatches.Load(),
		RxBatches:     c.RxBatches.Load(),
		TxGSOSegments: c.TxGSOSegments.Load(),
		RxGROSegments: c.RxGROSegments.Load(),
		TxGSORefused:  c.TxGSORefused.Load(),
		RxGROCopies:   c.RxGROCopies.Load(),
		TxNoNeighbour: c.TxNoNeighbour.Load(),
		RxIDUnsolved:  c.RxIDUnsolved.Load(),
		RxKernelDrops: c.RxKernelDrops.Load(),
	}
}

// AddIf adds n to a counter unless n is zero, sparing the atomic.
func AddIf(c *atomic.Uint64, n uint64) {
	if n != 0 {
		c.Add(n)
	}
}
