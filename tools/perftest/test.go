package perftest

import "fmt"

// Test is one of the eight perftest programs roced stands in for.
type Test int

// The tests, each named after its program without the ib_ prefix.
const (
	WriteBW Test = iota
	WriteLat
	ReadBW
	ReadLat
	SendBW
	SendLat
	AtomicBW
	AtomicLat
)

var testNames = [...]string{"write_bw", "write_lat", "read_bw", "read_lat", "send_bw", "send_lat", "atomic_bw", "atomic_lat"}

// String returns the test's roced command ("write_bw").
func (t Test) String() string {
	if t < 0 || int(t) >= len(testNames) {
		return fmt.Sprintf("Test(%d)", int(t))
	}
	return testNames[t]
}

// Binary is the real program's name.
func (t Test) Binary() string { return "ib_" + t.String() }

// TestByName accepts "write_bw" or "ib_write_bw" (and so on).
func TestByName(name string) (Test, error) {
	for i, n := range testNames {
		if name == n || name == "ib_"+n {
			return Test(i), nil
		}
	}
	return 0, fmt.Errorf("perftest: unknown test %q", name)
}

// BW reports whether t is a bandwidth test (tst == BW).
func (t Test) BW() bool { return t%2 == 0 }

// Verb is the test's verb as perftest >= 6.28 numbers it (before
// --write_with_imm turns WRITE into WRITE_IMM).
func (t Test) Verb() int32 {
	switch t {
	case WriteBW, WriteLat:
		return VerbWrite
	case ReadBW, ReadLat:
		return VerbRead
	case SendBW, SendLat:
		return VerbSend
	}
	return VerbAtomic
}
