package transport

import "testing"
import (
	"github.com/goroce/goroce/clock"
)

// BenchmarkRecord is what the flight recorder adds to each packet a QP
// sends or receives (a copy of its headers), to set
// beside a packet's cost in device's BenchmarkEngine.
//
//	go test -run '^$' -bench Record ./transport
func BenchmarkRecord(b *testing.B) {
	q := &QP{clock: clock.Real{}}
	dg := make([]byte, 1024+28+12+4)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		q.record(i&1 == 0, dg)
	}
}
