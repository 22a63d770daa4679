package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/goroce/goroce/oob/pingpong"
)

// TestPingpongDispatch: the four pingpongs are roced's commands, and roced
// hands their command lines to oob/pingpong, whose tests run them: a flag
// the tool does not take is getopt's complaint on stderr, the tool's usage
// text on stdout and exit status 1, as the real program's.
func TestPingpongDispatch(t *testing.T) {
	for _, tool := range []pingpong.Tool{pingpong.RC, pingpong.UC, pingpong.UD, pingpong.SRQ} {
		var out, errb bytes.Buffer
		code := run([]string{tool.String(), "-h"}, &out, &errb)
		want := "roced " + tool.String() + ": invalid option -- 'h'\n"
		if code != 1 || errb.String() != want || !strings.HasPrefix(out.String(), "Usage:\n  roced "+tool.String()+" ") {
			t.Errorf("roced %v -h: exit %d, stderr %q, stdout %q; want 1, %q and the usage text", tool, code, errb.String(), out.String(), want)
		}
	}
}
