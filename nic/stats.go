package nic

// Counter is one named counter value, as a device lists its own and its
// link's (transport.Device.Stats) and a fault link its faults.
type Counter struct {
	Name  string // rxe's hw_counters name where there is one, else goroce's
	Value uint64 // events counted since the device or link opened
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
	s.TxGSORefused += t.TxGSORefused
	s.RxGROCopies += t.RxGROCopies
	s.TxNoNeighbour += t.TxNoNeighbour
	s.RxIDUnsolved += t.RxIDUnsolved
	s.RxKernelDrops += t.RxKernelDrops
}
