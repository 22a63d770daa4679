package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/goroce/goroce/tools/perftest"
	"github.com/goroce/goroce/tools/pingpong"
)

// TestPingpongDispatch: the four pingpongs are roced's commands, and roced
// hands their command lines to tools/pingpong, whose tests run them: a flag
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

// TestPerftestRegistered: the eight commands are roced's.
func TestPerftestRegistered(t *testing.T) {
	for tt := perftest.WriteBW; tt <= perftest.AtomicLat; tt++ {
		if _, ok := commands[tt.String()]; !ok {
			t.Errorf("roced %v is not registered", tt)
		}
	}
}

// TestPerftestDispatch: roced hands a perftest command's command line to
// tools/perftest, whose tests run it: a flag the tool does not take is the
// usage text and the parser's complaint on stderr, exit status 1, as the
// real tool's.
func TestPerftestDispatch(t *testing.T) {
	for tt := perftest.WriteBW; tt <= perftest.AtomicLat; tt++ {
		var out, errb bytes.Buffer
		code := run([]string{tt.String(), "--nope"}, &out, &errb)
		if code != 1 || out.Len() != 0 || !strings.HasPrefix(errb.String(), "Usage:\n  roced "+tt.String()+" ") ||
			!strings.HasSuffix(errb.String(), "\n Parser function exited with Error\n") {
			t.Errorf("roced %v --nope: exit %d, stdout %q, stderr %q; want 1, nothing and the usage error", tt, code, out.String(), errb.String())
		}
	}
}
