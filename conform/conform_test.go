package conform

import (
	"os"
	"testing"
)

// TestSelf runs the whole suite with goroce on both sides: a deviation of
// goroce's from the specification fails it.
func TestSelf(t *testing.T) {
	rs := RunSelf(Catalogue(), nil)
	if d, e := Deviations(rs); d+e > 0 || testing.Verbose() {
		WriteText(os.Stderr, rs)
	}
	for _, r := range rs {
		if r.Verdict != Pass {
			t.Errorf("%s (%s): %s: expected %s, observed %s", r.ID, r.Rule, r.Verdict, r.Expected, r.Observed)
		}
	}
}
