package transport_test

import (
	"reflect"
	"testing"

	"github.com/goroce/goroce/internal/testharness"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/transport"
)

// TestStats: after a SEND both ways, the device's counters carry the
// engine's and the link's figures under their names, in a stable order,
// and every nic.Stats field has a name.
func TestStats(t *testing.T) {
	a, b, _ := testharness.MemPair(t, testharness.Options{})
	for range 3 {
		testharness.Must(t, b.QP.PostRecv(&transport.RecvWR{SGL: []transport.SGE{b.MR.SGE(0, 4096)}}))
	}
	sendN(t, a, 3, 2000) // two packets each at MTU 1024
	for range 3 {
		if wc := testharness.Wait(t, a.SCQ, timeoutShort); wc.Status != transport.Success {
			t.Fatalf("send %+v", wc)
		}
		if wc := testharness.Wait(t, b.RCQ, timeoutShort); wc.Status != transport.Success {
			t.Fatalf("receive %+v", wc)
		}
	}
	get := func(d *transport.Device) map[string]uint64 {
		m := map[string]uint64{}
		for _, c := range d.Stats() {
			if _, dup := m[c.Name]; dup {
				t.Fatalf("counter %s twice", c.Name)
			}
			m[c.Name] = c.Value
		}
		return m
	}
	sa, sb := get(a.Dev), get(b.Dev)
	for _, c := range []struct {
		name string
		m    map[string]uint64
		want uint64
	}{
		{"sent_pkts", sa, 6}, {"rdma_sends", sa, 3}, {"rcvd_pkts", sb, 6}, {"rdma_recvs", sb, 3},
		{"link_tx_packets", sa, 6}, {"link_rx_packets", sb, 6}, {"unknown_qp", sb, 0},
	} {
		if got := c.m[c.name]; got != c.want {
			t.Errorf("%s = %d, want %d", c.name, got, c.want)
		}
	}
	if sa["link_tx_bytes"] != a.Mem.Stats().TxBytes || sa["link_tx_bytes"] == 0 {
		t.Errorf("link_tx_bytes %d, link says %d", sa["link_tx_bytes"], a.Mem.Stats().TxBytes)
	}
	if got := a.Dev.Stats()[0].Name; got != "sent_pkts" {
		t.Errorf("first counter %s: rxe's order starts with sent_pkts", got)
	}
	if n := reflect.TypeOf(nic.Stats{}).NumField(); len(transport.LinkCounters(nic.Stats{})) != n {
		t.Errorf("%d link counters named, nic.Stats has %d fields", len(transport.LinkCounters(nic.Stats{})), n)
	}
}
