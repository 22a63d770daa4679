package pingpong

import (
	"fmt"
	"time"
)

// LocalAddressLine is the tools' "  local address:" line. ud_pingpong prints
// a colon instead of a comma before "GID" on this line only (a quirk of its
// printf, present in rdma-core 44 and 56 alike).
func LocalAddressLine(tool Tool, d Dest) string {
	sep := ","
	if tool == UD {
		sep = ":"
	}
	return fmt.Sprintf("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s",
		d.LID, d.QPN, d.PSN, sep, GIDString(d.GID))
}

// RemoteAddressLine is the tools' "  remote address:" line.
func RemoteAddressLine(d Dest) string {
	return fmt.Sprintf("  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s",
		d.LID, d.QPN, d.PSN, GIDString(d.GID))
}

// AddressLines is every address line in the order a tool prints them: all
// local ones (srq prints one per QP) before the exchange, all remote ones
// after it. Both sides print the same shape.
func AddressLines(tool Tool, local, remote []Dest) []string {
	var out []string
	for _, d := range local {
		out = append(out, LocalAddressLine(tool, d))
	}
	for _, d := range remote {
		out = append(out, RemoteAddressLine(d))
	}
	return out
}

// ResultLines are the two lines both sides print when the iterations end,
// computed as the C code does: the elapsed time as a float of microseconds
// (gettimeofday resolution), bytes = size * iters * 2 (both directions).
func ResultLines(size, iters uint32, elapsed time.Duration) []string {
	usec := float32(elapsed.Microseconds())
	bytes := int64(size) * int64(iters) * 2
	secs := float64(usec) / 1000000.
	var rate, perIter float64
	if usec != 0 {
		rate = float64(bytes) * 8. / float64(usec)
	}
	if iters != 0 {
		perIter = float64(usec / float32(iters))
	}
	return []string{
		fmt.Sprintf("%d bytes in %.2f seconds = %.2f Mbit/sec", bytes, secs, rate),
		fmt.Sprintf("%d iters in %.2f seconds = %.2f usec/iter", iters, secs, perIter),
	}
}

// TimestampLines are rc_pingpong -t's extra lines about receive completion
// timestamps (printed when at least one pair of stamped completions came).
func TimestampLines(maxCycles, minCycles uint32, avgCycles float64) []string {
	return []string{
		fmt.Sprintf("Max receive completion clock cycles = %d", maxCycles),
		fmt.Sprintf("Min receive completion clock cycles = %d", minCycles),
		fmt.Sprintf("Average receive completion clock cycles = %f", avgCycles),
	}
}
