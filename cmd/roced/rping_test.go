package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestRpingBadFlags: a command line rping refuses is one line on stderr
// and rping's exit status for it, EINVAL; nothing is opened.
func TestRpingBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-x"}, {"-s", "-S", "10"}, {"-s", "-S", "65536"}, {"-c"}, {"-s", "-C", "-1"},
		{"-s", "-p", "70000"}, {"-c", "-a", "nohost"}, {"-s", "-P"}, {"-v"}, {"-s", "extra"},
		{"-s", "--link", "tcp"},
	} {
		var out, errw bytes.Buffer
		code := run(append([]string{"rping"}, args...), &out, &errw)
		lines := strings.Split(strings.TrimSuffix(errw.String(), "\n"), "\n")
		if code != 22 || len(lines) != 1 || !strings.HasPrefix(lines[0], "roced rping: ") || out.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out.String(), errw.String())
		}
	}
}
