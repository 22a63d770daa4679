package pingpong

import (
	"bytes"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/tools/internal/capture"
)

// The lab's captures live with the bth package's test data; the tools'
// stdout next to them is copied into this package's testdata.
const captureDir = "../../bth/testdata"

// recorded is one capture of a pingpong exchange.
type recorded struct {
	name    string // e.g. captures-trixie/srq_pingpong_s64
	tool    Tool
	numQP   int
	size    uint32
	stream  *capture.Stream
	client  []Dest // every record the client sent (MaxQP for srq)
	server  []Dest
	c2s     []byte // the client's bytes, holes filled in
	s2c     []byte
	s2cHole [][2]int
}

var sizeRE = regexp.MustCompile(`_s(\d+)$`)

func loadRecorded(t *testing.T) []recorded {
	t.Helper()
	var out []recorded
	for _, dir := range []string{"captures", "captures-trixie"} {
		files, err := filepath.Glob(filepath.Join(captureDir, dir, "*.pcap"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no captures in %s (%v)", dir, err)
		}
		for _, f := range files {
			base := strings.TrimSuffix(filepath.Base(f), ".pcap")
			tool, numQP := RC, 1
			switch {
			case strings.HasPrefix(base, "host_"): // Python client, real ibv_rc_pingpong server
			case strings.Contains(base, "_pingpong_"):
				var err error
				if tool, err = ToolByName(base[:strings.Index(base, "_s")]); err != nil {
					t.Fatal(err)
				}
				if tool == SRQ {
					numQP = 2 // the suite runs srq_pingpong with -q 2
				}
			default:
				continue
			}
			ss, err := capture.ReadFile(f, DefaultPort)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(ss) != 1 {
				t.Fatalf("%s: %d TCP streams, want 1", f, len(ss))
			}
			r := recorded{name: dir + "/" + base, tool: tool, numQP: numQP, stream: ss[0]}
			if m := sizeRE.FindStringSubmatch(base); m != nil {
				n, _ := strconv.Atoi(m[1])
				r.size = uint32(n)
			}
			r.c2s, r.client = records(t, r.name+" C->S", ss[0].Bytes[capture.ToServer], ss[0].Holes[capture.ToServer], tool.records(), true)
			r.s2c, r.server = records(t, r.name+" S->C", ss[0].Bytes[capture.ToClient], ss[0].Holes[capture.ToClient], tool.records(), false)
			r.s2cHole = ss[0].Holes[capture.ToClient]
			out = append(out, r)
		}
	}
	if len(out) != 2*8+3 {
		t.Fatalf("%d pingpong captures, want 19", len(out))
	}
	return out
}

// records parses a direction's records. Bytes the capture lost (a snap
// length hole) can only be srq's trailing all-zero records, which the
// tool memsets; they are filled in as such and checked to be in that range.
func records(t *testing.T, what string, b []byte, holes [][2]int, n int, withDone bool) ([]byte, []Dest) {
	t.Helper()
	want := n * RecordSize
	if withDone {
		want += len(done)
	}
	if len(b) != want {
		t.Fatalf("%s: %d bytes, want %d", what, len(b), want)
	}
	b = bytes.Clone(b)
	zero := Dest{}.Marshal()
	for _, h := range holes {
		if h[0] < 2*RecordSize || h[1] > n*RecordSize {
			t.Fatalf("%s: hole %v where real data was expected", what, h)
		}
		for i := h[0]; i < h[1]; i++ {
			b[i] = zero[i%RecordSize]
		}
	}
	out := make([]Dest, n)
	for i := range out {
		raw := b[i*RecordSize : (i+1)*RecordSize]
		d, err := ParseDest(raw)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !bytes.Equal(d.Marshal(), raw) {
			t.Fatalf("%s: record %d re-marshals as %q, sent %q", what, i, d.Marshal(), raw)
		}
		out[i] = d
	}
	if withDone && !bytes.Equal(b[n*RecordSize:], done) {
		t.Fatalf("%s: ends with %q, want done", what, b[n*RecordSize:])
	}
	return b, out
}

func (r recorded) script() []capture.Step {
	k := r.tool.records()
	s := capture.Steps(capture.ToServer, RecordSize, k)
	s = append(s, capture.Steps(capture.ToClient, RecordSize, k)...)
	return append(s, capture.Step{Dir: capture.ToServer, Size: len(done)})
}

// equalOutsideHoles compares what we sent with what the real tool sent,
// skipping the bytes the capture lost.
func equalOutsideHoles(got, want []byte, holes [][2]int) bool {
	if len(got) != len(want) {
		return false
	}
	got, want = bytes.Clone(got), bytes.Clone(want)
	for _, h := range holes {
		clear(got[h[0]:h[1]])
		clear(want[h[0]:h[1]])
	}
	return bytes.Equal(got, want)
}

// replay runs fn (our side) against the recorded other side, which sends
// its bytes in dir, and returns what our side sent.
func replay(t *testing.T, r recorded, dir capture.Dir, recorded []byte, fn func(conn net.Conn) error) []byte {
	t.Helper()
	ours, theirs := net.Pipe()
	defer ours.Close()
	type result struct {
		got []byte
		err error
	}
	res := make(chan result, 1)
	go func() {
		// Our side is closed once fn returns: the read after the script
		// ends at that EOF, so it sees every trailing byte. The idle time
		// only bounds a hang.
		got, err := capture.Replay(theirs, r.script(), dir, recorded, 10*time.Second)
		theirs.Close()
		res <- result{got, err}
	}()
	if err := fn(ours); err != nil {
		t.Fatal(err)
	}
	ours.Close()
	rr := <-res
	if rr.err != nil {
		t.Fatal(rr.err)
	}
	return rr.got
}

// TestReplayRealClient plays each capture's client against our Server,
// which is given the real server's addresses: it must answer with the very
// bytes the real server sent, at the moment the client expected them.
func TestReplayRealClient(t *testing.T) {
	for _, r := range loadRecorded(t) {
		t.Run(r.name, func(t *testing.T) {
			var remote []Dest
			readyCalled := false
			got := replay(t, r, capture.ToServer, r.c2s, func(c net.Conn) error {
				var err error
				remote, err = Server(testCtx(t), c, r.tool, r.server[:r.numQP], func([]Dest) error {
					readyCalled = true
					return nil
				})
				return err
			})
			if !equalOutsideHoles(got, r.s2c, r.s2cHole) {
				t.Errorf("our server sent %d bytes that differ from the real server's %d", len(got), len(r.s2c))
			}
			if !readyCalled || !equal(remote, r.client[:r.numQP]) {
				t.Errorf("remote = %v, want %v", remote, r.client[:r.numQP])
			}
		})
	}
}

// TestReplayRealServer plays each capture's server against our Client.
func TestReplayRealServer(t *testing.T) {
	for _, r := range loadRecorded(t) {
		t.Run(r.name, func(t *testing.T) {
			var remote []Dest
			got := replay(t, r, capture.ToClient, r.s2c, func(c net.Conn) error {
				var err error
				remote, err = Client(testCtx(t), c, r.tool, r.client[:r.numQP])
				return err
			})
			if !bytes.Equal(got, r.c2s) {
				t.Errorf("our client sent %q..., the real one %q...", got[:min(60, len(got))], r.c2s[:60])
			}
			if !equal(remote, r.server[:r.numQP]) {
				t.Errorf("remote = %v, want %v", remote, r.server[:r.numQP])
			}
		})
	}
}

var itersRE = regexp.MustCompile(`^(\d+) iters in [\d.]+ seconds = ([\d.]+) usec/iter$`)

// TestGoldenOutput rebuilds each tool's stdout from the capture's records
// and the elapsed time the tool reported, and compares it line for line.
func TestGoldenOutput(t *testing.T) {
	n := 0
	for _, r := range loadRecorded(t) {
		if r.size == 0 {
			continue // host_* captures: the client was a script
		}
		for _, side := range []string{"server", "client"} {
			path := filepath.Join("testdata", r.name+"."+side+".txt")
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			n++
			lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
			own, peer := r.server[:r.numQP], r.client[:r.numQP]
			if side == "client" {
				own, peer = peer, own
			}
			want := AddressLines(r.tool, own, peer)
			if len(lines) != len(want)+2 {
				t.Errorf("%s: %d lines, want %d", path, len(lines), len(want)+2)
				continue
			}
			m := itersRE.FindStringSubmatch(lines[len(lines)-1])
			if m == nil {
				t.Errorf("%s: last line %q", path, lines[len(lines)-1])
				continue
			}
			iters, _ := strconv.Atoi(m[1])
			perIter, _ := strconv.ParseFloat(m[2], 64)
			usec := math.Round(perIter * float64(iters))
			want = append(want, ResultLines(r.size, uint32(iters), time.Duration(usec)*time.Microsecond)...)
			for i := range want {
				if lines[i] != want[i] {
					t.Errorf("%s line %d:\n got %q\nwant %q", path, i+1, want[i], lines[i])
				}
			}
		}
	}
	if n != 32 {
		t.Errorf("checked %d output files, want 32", n)
	}
}

func TestResultLines(t *testing.T) {
	// The README's default run: 4096 bytes x 1000 iterations in 0.31 s.
	got := ResultLines(4096, 1000, 311*time.Millisecond)
	want := []string{
		"8192000 bytes in 0.31 seconds = 210.73 Mbit/sec",
		"1000 iters in 0.31 seconds = 311.00 usec/iter",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := ResultLines(64, 0, 0); !strings.HasPrefix(got[1], "0 iters in 0.00 seconds") {
		t.Errorf("zero iterations: %q", got)
	}
}
