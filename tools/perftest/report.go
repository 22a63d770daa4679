package perftest

import (
	"encoding/binary"
	"fmt"
	"math"
)

// BWReport is what xchg_bw_reports sends: five 8-byte big-endian values,
// each its own exchange step (peers >= 5.33 send iters as 8 bytes; older
// ones are refused at the version step). Doubles travel as their IEEE-754
// bits in network order (hton_double).
type BWReport struct {
	Size    uint64  // message size
	Iters   uint64  // iterations
	BWPeak  float64 // MiB/s (MB/s on 6.06), or Gbit/s with --report_gbits
	BWAvg   float64 // in BWPeak's unit
	MsgRate float64 // Mpps
}

// BWReportSteps is the number of 8-byte exchanges in the report (without
// --report-per-port, which this package does not implement).
const BWReportSteps = 5

func (r BWReport) fields() [BWReportSteps]uint64 {
	return [...]uint64{r.Size, r.Iters, math.Float64bits(r.BWPeak), math.Float64bits(r.BWAvg), math.Float64bits(r.MsgRate)}
}

// Marshal returns the five 8-byte messages.
func (r BWReport) Marshal() [BWReportSteps][8]byte {
	var out [BWReportSteps][8]byte
	for i, v := range r.fields() {
		binary.BigEndian.PutUint64(out[i][:], v)
	}
	return out
}

// ParseBWReport reads the five messages back.
func ParseBWReport(msgs [BWReportSteps][]byte) (BWReport, error) {
	var v [BWReportSteps]uint64
	for i, m := range msgs {
		if len(m) != 8 {
			return BWReport{}, fmt.Errorf("perftest: bandwidth report value %d is %d bytes, want 8", i, len(m))
		}
		v[i] = binary.BigEndian.Uint64(m)
	}
	return BWReport{
		Size: v[0], Iters: v[1],
		BWPeak: math.Float64frombits(v[2]), BWAvg: math.Float64frombits(v[3]), MsgRate: math.Float64frombits(v[4]),
	}, nil
}
