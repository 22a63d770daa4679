package bth

// PSN is a 24-bit packet sequence number. Arithmetic wraps at 2^24 and
// comparison is serial-number arithmetic: p is before q when q lies less than
// half the space (2^23) ahead of p, which is the window the specification's
// duplicate and invalid PSN regions are defined over (IBA 9.7.5.1.3).
type PSN uint32

// PSN space.
const (
	PSNMask  = 1<<24 - 1
	PSNSpace = 1 << 24
	PSNHalf  = 1 << 23
)

// Add returns p+n modulo 2^24 (n may be negative).
func (p PSN) Add(n int) PSN { return PSN((int64(p) + int64(n)) & PSNMask) }

// Next returns p+1 modulo 2^24.
func (p PSN) Next() PSN { return (p + 1) & PSNMask }

// Diff returns the signed distance p-q in the range [-2^23, 2^23).
func (p PSN) Diff(q PSN) int32 { return int32(uint32(p-q)<<8) >> 8 }

// Before reports whether p comes strictly before q.
func (p PSN) Before(q PSN) bool { return p.Diff(q) < 0 }

// After reports whether p comes strictly after q.
func (p PSN) After(q PSN) bool { return p.Diff(q) > 0 }

// InWindow reports whether p lies in [lo, lo+n).
func (p PSN) InWindow(lo PSN, n uint32) bool { return uint32(p-lo)&PSNMask < n }

// Valid reports whether p fits in 24 bits.
func (p PSN) Valid() bool { return p <= PSNMask }
