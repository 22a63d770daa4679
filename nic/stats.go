package nic

import "sync/atomic"

// counters is the atomically updated form of Stats that links embed. Send
// runs from many goroutines, so every field is atomic; links add once per
// batch, not per packet, to keep the cache line quiet.
type counters struct {
	txPackets, txBytes         atomic.Uint64
	rxPackets, rxBytes         atomic.Uint64
	txDropped, rxDropped       atomic.Uint64
	txBatches, rxBatches       atomic.Uint64
	txGSOSegments, rxGROSegs   atomic.Uint64
	txNoNeighbour, rxIDUnsolve atomic.Uint64
	rxKernelDrops              atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		TxPackets:     c.txPackets.Load(),
		TxBytes:       c.txBytes.Load(),
		RxPackets:     c.rxPackets.Load(),
		RxBytes:       c.rxBytes.Load(),
		TxDropped:     c.txDropped.Load(),
		RxDropped:     c.rxDropped.Load(),
		TxBatches:     c.txBatches.Load(),
		RxBatches:     c.rxBatches.Load(),
		TxGSOSegments: c.txGSOSegments.Load(),
		RxGROSegments: c.rxGROSegs.Load(),
		TxNoNeighbour: c.txNoNeighbour.Load(),
		RxIDUnsolved:  c.rxIDUnsolve.Load(),
		RxKernelDrops: c.rxKernelDrops.Load(),
	}
}

// addIf adds n to a counter unless n is zero, sparing the atomic.
func addIf(c *atomic.Uint64, n uint64) {
	if n != 0 {
		c.Add(n)
	}
}

// add adds t's counters to s, field by field (a link joining others sums
// theirs).
func (s *Stats) add(t Stats) {
	s.TxPackets += t.TxPackets
	s.TxBytes += t.TxBytes
	s.RxPackets += t.RxPackets
	s.RxBytes += t.RxBytes
	s.TxDropped += t.TxDropped
	s.RxDropped += t.RxDropped
	s.TxBatches += t.TxBatches
	s.RxBatches += t.RxBatches
	s.TxGSOSegments += t.TxGSOSegments
	s.RxGROSegments += t.RxGROSegments
	s.TxNoNeighbour += t.TxNoNeighbour
	s.RxIDUnsolved += t.RxIDUnsolved
	s.RxKernelDrops += t.RxKernelDrops
}
