package transport

import (
	"github.com/goroce/goroce/nic"
)

// Stats returns the device's counters as rdma-core and the kernel report
// them for a port (rdma statistic show link DEV/1): the engine's protocol
// counters first, named as Linux rxe's hw_counters and then goroce's own
// (Counters.List), then the link's, prefixed "link_", with packets and
// bytes counting IP datagrams as the engine sends and receives them, then
// QP1's MADs (MADStats), prefixed "gsi_".
func (d *Device) Stats() []nic.Counter {
	c := d.counters.List()
	c = append(c, linkCounters(d.link.Stats())...)
	c = append(c, nic.Counter{Name: "async_events_lost", Value: d.EventsLost()})
	m := d.MADStats()
	return append(c, nic.Counter{Name: "gsi_rcvd_mads", Value: m.Received}, nic.Counter{Name: "gsi_sent_mads", Value: m.Sent},
		nic.Counter{Name: "gsi_dropped", Value: m.Dropped}, nic.Counter{Name: "gsi_unclaimed", Value: m.Unclaimed})
}

// linkCounters names a link's counters.
func linkCounters(s nic.Stats) []nic.Counter {
	return []nic.Counter{
		{Name: "link_tx_packets", Value: s.TxPackets},
		{Name: "link_tx_bytes", Value: s.TxBytes},
		{Name: "link_rx_packets", Value: s.RxPackets},
		{Name: "link_rx_bytes", Value: s.RxBytes},
		{Name: "link_tx_dropped", Value: s.TxDropped},
		{Name: "link_rx_dropped", Value: s.RxDropped},
		{Name: "link_tx_batches", Value: s.TxBatches},
		{Name: "link_rx_batches", Value: s.RxBatches},
		{Name: "link_tx_gso_segments", Value: s.TxGSOSegments},
		{Name: "link_rx_gro_segments", Value: s.RxGROSegments},
		{Name: "link_tx_gso_refused", Value: s.TxGSORefused},
		{Name: "link_rx_gro_copies", Value: s.RxGROCopies},
		{Name: "link_tx_no_neighbour", Value: s.TxNoNeighbour},
		{Name: "link_rx_id_unsolved", Value: s.RxIDUnsolved},
		{Name: "link_rx_kernel_drops", Value: s.RxKernelDrops},
	}
}
