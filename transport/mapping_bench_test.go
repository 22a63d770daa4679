package transport_test

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/latency"
	"github.com/goroce/goroce/transport"
)

// BenchmarkMappingFaults measures what a page fault costs an RDMA
// operation: one 64 KiB WRITE or READ at a time between two devices over
// the in-memory link, each timed from post to completion, into memory of
// each kind:
//
//	heap             a Go slice, touched before
//	anonymous        MapAnonymous, touched before
//	fresh            MapAnonymous, its pages dropped (madvise MADV_DONTNEED)
//	                 before each operation: the engine's copy into it takes
//	                 the first-touch faults, as in a newly mapped buffer
//	hugepages        MapHugePages, touched before
//	hugepages-fresh  MapHugePages, its 2 MiB page dropped before each one
//
// The memory of the kind is where the operation writes (b's region for a
// WRITE, a's for a READ); the other side reads a touched heap buffer. It
// reports p50 and p99 per operation and the process's minor page faults
// per operation (getrusage). The hugepage kinds need free hugepages
// (/proc/sys/vm/nr_hugepages) and are skipped without them.
//
//	go test -run '^$' -bench MappingFaults -benchtime 2000x ./transport
func BenchmarkMappingFaults(b *testing.B) {
	const n = 64 << 10
	for _, op := range []transport.WROpcode{transport.WRRDMAWrite, transport.WRRDMARead} {
		for _, kind := range []string{"heap", "anonymous", "fresh", "hugepages", "hugepages-fresh"} {
			b.Run(op.String()+"/"+kind, func(b *testing.B) {
				var target []byte
				var drop func() // makes the target's pages untouched again
				switch kind {
				case "heap":
					target = make([]byte, n)
				case "anonymous", "fresh":
					m := mapped(b, transport.MapAnonymous, n)
					target = m.Bytes()
					drop = func() { must(b, unix.Madvise(target, unix.MADV_DONTNEED)) }
				case "hugepages", "hugepages-fresh":
					// 2 MiB, x86-64's hugepage: MADV_DONTNEED drops only
					// whole hugepages.
					m := mapped(b, transport.MapHugePages, 2<<20)
					target = m.Bytes()[:n]
					drop = func() { must(b, unix.Madvise(m.Bytes(), unix.MADV_DONTNEED)) }
				}
				for i := range target {
					target[i] = 1
				}
				if kind != "fresh" && kind != "hugepages-fresh" {
					drop = nil
				}
				a, p := connected(b)
				// The region on the side the data lands is over target; the
				// other side's over a touched Go slice.
				other := make([]byte, n)
				for i := range other {
					other[i] = byte(i)
				}
				var local, remote *transport.MR
				var err error
				if op == transport.WRRDMAWrite {
					local, err = a.pd.Register(other, 0)
					must(b, err)
					remote, err = p.pd.Register(target, transport.LocalWrite|transport.RemoteWrite)
				} else {
					local, err = a.pd.Register(target, transport.LocalWrite)
					must(b, err)
					remote, err = p.pd.Register(other, transport.LocalWrite|transport.RemoteRead)
				}
				must(b, err)
				s := make(latency.Sample, 0, b.N)
				var faults int64
				b.ResetTimer()
				for range b.N {
					if drop != nil {
						b.StopTimer()
						drop()
						b.StartTimer()
					}
					f0 := minflt(b)
					t0 := time.Now()
					must(b, a.rdma(op, local, remote))
					s = append(s, time.Since(t0))
					faults += minflt(b) - f0
				}
				b.StopTimer()
				s.Report(b)
				b.ReportMetric(float64(faults)/float64(b.N), "faults/op")
				must(b, local.Dereg())
				must(b, remote.Dereg())
			})
		}
	}
}

// mapped maps n bytes with mapf, unmapped when the benchmark ends; no
// free hugepage skips it.
func mapped(b *testing.B, mapf func(int, transport.MapOptions) (*transport.Mapping, error), n int) *transport.Mapping {
	m, err := mapf(n, transport.MapOptions{})
	if errors.Is(err, transport.ErrNoHugePages) {
		b.Skip(err)
	}
	must(b, err)
	b.Cleanup(func() { must(b, m.Close()) })
	return m
}

// minflt returns the process's minor page faults so far.
func minflt(b *testing.B) int64 {
	var ru unix.Rusage
	must(b, unix.Getrusage(unix.RUSAGE_SELF, &ru))
	return ru.Minflt
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}
