package interop

import (
	"bytes"
	"strings"
	"testing"
)

// The command's logic lives here, not in cmd/: bad usage is exit status 2
// with a line saying what was wrong, before any peer or lab is touched.
func TestCommandUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-no-such-flag"}, "no-such-flag"},
		{[]string{"-peer", "self", "stray"}, "unexpected arguments"},
		{[]string{"-peer", "lab-exec"}, "needs the command"},
	} {
		var out, errb bytes.Buffer
		if got := Command(tc.args, &out, &errb); got != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("Command(%q) = %d, stderr %q; want 2 and %q", tc.args, got, errb.String(), tc.want)
		}
	}
}
