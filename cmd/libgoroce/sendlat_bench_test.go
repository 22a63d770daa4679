package main

import (
	"net/netip"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/rawudp"
)

// BenchmarkSendLat runs Debian's ib_send_lat (64 bytes, 5000 iterations)
// through libgoroce.so on loopback, in the default mode (poll mode) and
// with the receive goroutines doing the receiving (GOROCE_POLL_MODE=0),
// and roced's send_lat in its default (receive goroutines) and in poll
// mode, beside the kernel's UDP ping-pong between the same addresses
// with a datagram the size of the SEND's RoCE payload, in the same run:
// rounds of each, alternating, medians of each side's p50 (perftest's
// t_typical) and p99, in microseconds of half a round trip as perftest
// prints them. over-raw is the tool's p50 less the raw one; x-raw-p99
// the tool's p99 over the raw one.
//
//	go test -run '^$' -bench SendLat -benchtime 1x ./cmd/libgoroce
func BenchmarkSendLat(b *testing.B) {
	real, err := exec.LookPath("ib_send_lat")
	if err != nil {
		b.Skipf("ib_send_lat is not installed (Debian's perftest): %v", err)
	}
	const rounds = 5
	args := []string{"-s", "64", "-n", "5000", "-F"}
	for _, m := range []struct {
		name   string
		native bool // roced's send_lat
		env    []string
	}{
		{"default", false, nil}, {"nopoll", false, []string{"GOROCE_POLL_MODE=0"}},
		{"roced", true, nil}, {"roced-poll", true, []string{"GOROCE_POLL_MODE=1"}},
	} {
		b.Run(m.name, func(b *testing.B) {
			var p50, p99, raw50, raw99 []float64
			for range rounds {
				row := perftestPair(b, real, "send_lat", m.native, args, m.env)
				p50, p99 = append(p50, row.TTypical), append(p99, row.P99)
				s, err := rawudp.PingPong(netip.MustParseAddr(addrA), netip.MustParseAddr(addrB), 12+64+4, 5000, nil)
				if err != nil {
					b.Fatal(err)
				}
				half := func(q float64) float64 { return float64(s.Quantile(q)) / float64(time.Microsecond) / 2 }
				raw50, raw99 = append(raw50, half(0.5)), append(raw99, half(0.99))
			}
			b.ReportMetric(median(p50), "p50-usec")
			b.ReportMetric(median(p99), "p99-usec")
			b.ReportMetric(median(raw50), "raw-p50-usec")
			b.ReportMetric(median(raw99), "raw-p99-usec")
			b.ReportMetric(median(p50)-median(raw50), "over-raw-p50-usec")
			b.ReportMetric(median(p99)/median(raw99), "x-raw-p99")
			b.ReportMetric(0, "ns/op")
			b.Logf("p50 %v p99 %v; raw p50 %v p99 %v", sorted(p50), sorted(p99), sorted(raw50), sorted(raw99))
		})
	}
}

func sorted(v []float64) []float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s
}
