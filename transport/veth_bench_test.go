package transport_test

import (
	"fmt"
	"testing"

	"github.com/goroce/goroce/internal/rawudp"
	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/qp"
)

// BenchmarkVethRC measures RC WRITE and SEND across a veth pair between two
// namespaces, over every link kind, at active MTU 1024 and 4096: 64 KiB
// messages, 128 outstanding, as ib_write_bw and ib_send_bw run by default.
// In the same run and between the same namespaces it measures the kernel's
// plain UDP path with datagrams the size of a full RoCEv2 packet (BTH, an
// MTU of payload, ICRC): one sendto each (raw-sendto) and UDP GSO to a GRO
// socket (raw-gso). Each link's figures carry their ratio to both.
//
// Metrics: Gbit/s of payload, Mpps of full data packets, and x-sendto,
// x-gso: the link's goodput over raw UDP's. The veths keep their offloads,
// as a host's would.
//
//	go test -run '^$' -bench VethRC -benchtime 3s ./transport
func BenchmarkVethRC(b *testing.B) {
	const size, depth = 64 << 10, 128
	for _, mtu := range []qp.MTU{qp.MTU1024, qp.MTU4096} {
		n := rdmatest.NewNet(b, rdmatest.Config{MTU: rdmatest.VethMTU(mtu), Offloads: true})
		m := mtu.Bytes()
		raw := map[bool]float64{} // Gbit/s of raw UDP, by GSO
		measureRaw := func(b *testing.B, gso bool, count int, start func()) rawudp.Result {
			r, err := rawudp.Measure(n.A, n.B, n.A.IPv4, n.B.IPv4, m+16, count, gso, start)
			if err != nil {
				b.Fatal(err)
			}
			raw[gso] = r.Gbps(m)
			return r
		}
		for _, gso := range []bool{false, true} {
			name := "raw-sendto"
			if gso {
				name = "raw-gso"
			}
			b.Run(fmt.Sprintf("mtu%d/%s", m, name), func(b *testing.B) {
				r := measureRaw(b, gso, b.N, b.ResetTimer)
				b.StopTimer()
				report(b, r.Gbps(m), r.PPS(), 0, 0)
			})
		}
		for _, k := range rdmatest.Kinds {
			for _, op := range []qp.WROpcode{qp.WRRDMAWrite, qp.WRSend} {
				b.Run(fmt.Sprintf("mtu%d/%v/%s", m, k, opName(op)), func(b *testing.B) {
					for _, gso := range []bool{false, true} {
						if raw[gso] == 0 { // its sub-benchmark was not selected
							measureRaw(b, gso, 100000, nil)
						}
					}
					a, c := rdmatest.Pair(b, n, k, rdmatest.IPv4, rdmatest.Options{BufSize: 2 * size, SQDepth: 2 * depth, RQDepth: 512})
					el := rdmatest.Bandwidth(b, a, c, op, size, depth, b.N, b.ResetTimer)
					b.StopTimer()
					gbps := float64(b.N) * size * 8 / el.Seconds() / 1e9
					pps := float64(b.N) * float64((size+m-1)/m) / el.Seconds()
					report(b, gbps, pps, gbps/raw[false], gbps/raw[true])
				})
			}
		}
	}
}

func opName(op qp.WROpcode) string {
	if op == qp.WRSend {
		return "send"
	}
	return "write"
}

// report sets the benchmark's metrics; ns/op means nothing here.
func report(b *testing.B, gbps, pps, xSendto, xGSO float64) {
	b.ReportMetric(gbps, "Gbit/s")
	b.ReportMetric(pps/1e6, "Mpps")
	if xSendto > 0 {
		b.ReportMetric(xSendto, "x-sendto")
		b.ReportMetric(xGSO, "x-gso")
	}
	b.ReportMetric(0, "ns/op")
}
