package transport_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/testharness"
	"github.com/goroce/goroce/transport"
)

// BenchmarkTwoQPs measures issue 44's "two QPs on two cores": 64 B RDMA
// WRITEs streamed over the in-memory link (128 outstanding, as ib_write_bw
// keeps), by one QP pair, then by two pairs at once from two goroutines,
// over links with one receive queue and with two (mem.Options.RxQueues:
// the pairs' QPNs alternate, so each pair has a queue, and a receive
// goroutine and worker, of its own on each device). Each case prints
// msgs/s, x-1qp (its rate over the one pair's, in the same run; the
// issue asks 1.8 of two pairs on two queues), cpu-ns/msg, the process's
// CPU time (user and system, every goroutine) per message, and cores,
// that CPU time over the run's: how much of the machine it got, beside
// spin's, what two goroutines that never wait got in the same run.
// wait leaves the receiving to the devices' goroutines; poll puts the
// devices in poll mode, where the polling application goroutine receives.
//
// Read x-1qp beside cores and cpu-ns/msg. Measured 2026-12-05 on the
// shared 2-core host (load average 6-14): spin got 0.54-1.40 cores and
// the streams at most 1.51, so the host could not show two cores' rate.
// One pair cost 870-1120 ns of CPU a message with GOMAXPROCS=2 against
// 570-670 with 1: its hand-offs between goroutines (the poster, each
// device's receiver) cross cores. Two pairs on two queues cost 580-840,
// less than one pair on two cores, so the second queue adds no
// contention (the mutex profile: 5% of a run waiting, mostly in ACK timer
// callbacks); their x-1qp (median 1.5 of five runs, wait mode) is partly
// that saving. On a quiet host (2026-12-07, spin 1.98-2.0 cores), two
// pairs on two queues: 1.76-2.28x, median 1.99 of 7, waiting; in poll
// mode 2.20-2.56x, median 2.40 of 5, once a poll received on its CQ's
// own queues only (1.53-1.86x, median 1.80, when it polled every queue).
//
//	go test -run '^$' -bench TwoQPs -benchtime 200000x ./transport
func BenchmarkTwoQPs(b *testing.B) {
	const size, depth = 64, 128
	// The control: what the host gives two goroutines that never wait,
	// in cores, measured in the same run as the streams.
	b.Run("spin", func(b *testing.B) {
		cpu0, t0 := cpuTime(b), time.Now()
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for x := 0; time.Since(t0) < 200*time.Millisecond; x++ {
				}
			}()
		}
		wg.Wait()
		b.ReportMetric((cpuTime(b)-cpu0).Seconds()/time.Since(t0).Seconds(), "cores")
		b.ReportMetric(0, "ns/op")
	})
	for _, poll := range []bool{false, true} {
		mode := map[bool]string{false: "wait", true: "poll"}[poll]
		one := 0.0
		for _, c := range []struct {
			name        string
			pairs, rxqs int
		}{{"1qp", 1, 1}, {"2qp-1queue", 2, 1}, {"2qp-2queues", 2, 2}} {
			b.Run(fmt.Sprintf("%s/%s", mode, c.name), func(b *testing.B) {
				o := testharness.Options{MTU: transport.MTU4096, BufSize: 64 << 10, SQDepth: 2 * depth, RQDepth: 16,
					CQDepth: 4 * depth, Window: 512, PollProgress: poll, RxQueues: c.rxqs}
				a, p, _ := testharness.MemPair(b, o)
				pairs := [][2]*testharness.Peer{{a, p}}
				if c.pairs == 2 {
					a2, p2 := a.NewQP(b), p.NewQP(b)
					testharness.ConnectQP(b, a2, p2, a2.Opt, 0, 0)
					testharness.ConnectQP(b, p2, a2, p2.Opt, 0, 0)
					pairs = append(pairs, [2]*testharness.Peer{a2, p2})
				}
				per := max(b.N/c.pairs, 1)
				var wg sync.WaitGroup
				ready := make(chan struct{})
				el := make([]time.Duration, len(pairs))
				for i, pr := range pairs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						el[i] = testharness.Bandwidth(b, pr[0], pr[1], transport.WRRDMAWrite, size, depth, per, func() { <-ready })
					}()
				}
				cpu0 := cpuTime(b)
				b.ResetTimer()
				close(ready)
				wg.Wait()
				b.StopTimer()
				cpu := cpuTime(b) - cpu0
				slow := el[0]
				for _, e := range el {
					slow = max(slow, e)
				}
				msgs := float64(per * len(pairs))
				rate := msgs / slow.Seconds()
				b.ReportMetric(rate, "msgs/s")
				b.ReportMetric(float64(cpu.Nanoseconds())/msgs, "cpu-ns/msg")
				b.ReportMetric(cpu.Seconds()/slow.Seconds(), "cores")
				if c.pairs == 1 {
					one = rate
				} else if one > 0 {
					b.ReportMetric(rate/one, "x-1qp")
				}
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// cpuTime returns the CPU time the process has used, user and system.
func cpuTime(tb testing.TB) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
