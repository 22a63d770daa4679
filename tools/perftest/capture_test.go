package perftest

import (
	"bytes"
	"context"
	"errors"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/tools/internal/capture"
)

const captureDir = "../../bth/testdata"

// run is one captured perftest exchange and the command lines behind it
// (CAPTURES.md of each directory).
type run struct {
	name          string
	shape         Shape // Role is filled in per test
	iters         uint64
	cli, srv      Version // as sent
	mismatch      bool
	stream        *capture.Stream
	c2s, s2c      []byte
	plan          func(Role) []Step
	clientSizeArg uint64 // the mismatch run's client used other -s/-n
}

func iters(name string) uint64 {
	switch {
	case strings.HasPrefix(name, "pt629"), strings.HasPrefix(name, "pt624"), strings.HasSuffix(name, "_s8192"):
		return 20
	case strings.HasPrefix(name, "send_bw_rnr"):
		return 50
	}
	return 100
}

func loadRuns(t *testing.T) []run {
	t.Helper()
	var out []run
	for _, dir := range []string{"captures", "captures-trixie"} {
		files, _ := filepath.Glob(filepath.Join(captureDir, dir, "*.pcap"))
		for _, f := range files {
			base := strings.TrimSuffix(filepath.Base(f), ".pcap")
			var test Test = -1
			for i, n := range testNames {
				if strings.Contains(base, n) {
					test = Test(i)
				}
			}
			if test < 0 {
				continue
			}
			ss, err := capture.ReadFile(f, DefaultPort)
			if err != nil || len(ss) != 1 || !ss[0].Complete() {
				t.Fatalf("%s: %v streams, err %v", f, len(ss), err)
			}
			r := run{name: dir + "/" + base, stream: ss[0], iters: iters(base), mismatch: strings.Contains(base, "mismatch")}
			r.c2s, r.s2c = ss[0].Bytes[capture.ToServer], ss[0].Bytes[capture.ToClient]
			var perr error
			if r.cli, perr = ParseVersion(r.c2s[:16]); perr != nil {
				t.Fatal(perr)
			}
			if r.srv, perr = ParseVersion(r.s2c[:16]); perr != nil {
				t.Fatal(perr)
			}
			size := uint64(64)
			switch {
			case strings.HasSuffix(base, "_s8192"):
				size = 8192
			case test == AtomicBW:
				size = 8
			}
			conn := int32(ConnRC)
			if strings.Contains(base, "_ud_") {
				conn = ConnUD
			} else if strings.Contains(base, "_uc_") {
				conn = ConnUC
			}
			r.shape = Shape{Test: test, NumQPs: 1, Size: size, Conn: conn, MTU: 3}
			out = append(out, r)
		}
	}
	if len(out) != 32 {
		t.Fatalf("%d perftest captures, want 32", len(out))
	}
	return out
}

// script turns a plan into the lockstep message list, plus whether each
// side writes a trailing "done".
func script(steps []Step) []capture.Step {
	var out []capture.Step
	for _, st := range steps {
		for _, n := range st.Messages(true) {
			out = append(out, capture.Step{Dir: capture.ToServer, Size: n}, capture.Step{Dir: capture.ToClient, Size: n})
		}
	}
	return out
}

// mine cuts a side's own stream into the plan's messages, so the side
// under test can be handed exactly what the real tool sent at each step.
type feed struct{ b []byte }

func (f *feed) next(n int) []byte {
	if len(f.b) < n {
		panic("feed exhausted")
	}
	out := f.b[:n]
	f.b = f.b[n:]
	return out
}

func loopback(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-ch
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// walk runs a plan with a Session, feeding it the real tool's own values
// from own (its side of the capture) so its bytes can be compared with the
// real tool's. It returns the first error (a mismatch ends the run).
func walk(ctx context.Context, s *Session, steps []Step, own []byte) error {
	f := &feed{own}
	for _, st := range steps {
		switch st.Kind {
		case StepVersion:
			f.next(VersionSize)
			if err := s.ExchangeVersions(ctx); err != nil {
				return err
			}
		case StepSysData:
			f.next(8)
			if _, err := s.ExchangeSysData(ctx, DefaultSysData); err != nil {
				return err
			}
		case StepMTU:
			f.next(2)
			if _, err := s.ExchangeMTU(ctx, 3); err != nil {
				return err
			}
		case StepNegotiate:
			p, err := ParseParams(f.next(NegotiateSize))
			if err != nil {
				return err
			}
			if _, err := s.Negotiate(ctx, p, 1); err != nil {
				return err
			}
		case StepRecord:
			r, err := ParseRecord(f.next(RecordSize))
			if err != nil {
				return err
			}
			if _, err := s.ExchangeRecord(ctx, r); err != nil {
				return err
			}
		case StepBWReport:
			var raw [BWReportSteps][]byte
			for i := range raw {
				raw[i] = f.next(8)
			}
			rep, err := ParseBWReport(raw)
			if err != nil {
				return err
			}
			if _, err := s.ExchangeBWReport(ctx, rep); err != nil {
				return err
			}
		case StepClose:
			if s.Local.sendsDone() {
				if !bytes.Equal(f.next(5), doneMsg) {
					return errors.New("recording lacks done")
				}
			}
			return s.Close(ctx, 2*time.Second)
		}
	}
	if len(f.b) != 0 {
		return errors.New("recording longer than the plan")
	}
	return nil
}

type replayResult struct {
	got []byte
	err error
}

// replayAgainst runs our side in role against the recording of the other.
func replayAgainst(t *testing.T, r run, role Role) (ours []byte, err error, peerErr error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b := loopback(t)
	fakeDir, own, theirs := capture.ToServer, r.s2c, r.c2s
	local, peer := r.srv, r.cli
	if role == Client {
		fakeDir, own, theirs = capture.ToClient, r.c2s, r.s2c
		local, peer = r.cli, r.srv
	}
	shape := r.shape
	shape.Role = role
	steps := Plan(shape, local, peer)
	if r.mismatch {
		steps = steps[:4] // both tools give up after the negotiation
	}
	peerShape := shape
	peerShape.Role = 1 - role
	sc := script(steps)
	res := make(chan replayResult, 1)
	go func() {
		fakeSent := theirs
		// The recording's "done" (6.06) follows the lockstep messages.
		lock := 0
		for _, st := range sc {
			if st.Dir == fakeDir {
				lock += st.Size
			}
		}
		tail := fakeSent[lock:]
		// Our side half-closes once it has sent everything (Session.Close,
		// or Close on an error), so the replay reads to that end of stream:
		// the bound is only a backstop for a side that never closes.
		got, err := capture.Replay(b, sc, fakeDir, fakeSent[:lock], 30*time.Second)
		if err == nil && len(tail) > 0 {
			b.Write(tail) // what our side's Close waits for
		}
		b.Close()
		res <- replayResult{got, err}
	}()
	s := NewSession(a, role, local)
	err = walk(ctx, s, steps, own)
	// As the tool's exit would: the latency tools' plans end without a
	// closing exchange, and the replay reads to this end of stream.
	a.Close()
	rr := <-res
	return rr.got, err, rr.err
}

// TestReplayServer plays each captured client against our server, which
// is given the real server's values and version ceiling: it must send what
// the real server sent, but for its version field. There roced answers in
// the older of its own version and the client's (README), where the real
// server sent its own: pt624cli_pt629srv's 6.29 server said "6.29", roced
// says "6.24" to a 6.24 client. So the expected field is the captured
// version field, byte for byte, of whichever side of the capture is older;
// everything after it is the same, since a 6.29 server talks 6.24 to such
// a client.
func TestReplayServer(t *testing.T) {
	mirrored := 0
	for _, r := range loadRuns(t) {
		want := bytes.Clone(r.s2c)
		if capturedVersion(t, r.c2s) < capturedVersion(t, r.s2c) {
			copy(want, r.c2s[:VersionSize])
			mirrored++
		}
		t.Run(r.name, func(t *testing.T) {
			got, err, perr := replayAgainst(t, r, Server)
			checkReplay(t, r, Server, got, err, perr, want)
		})
	}
	if mirrored == 0 {
		t.Error("no capture has a client older than its server: the version choice is untested")
	}
}

// capturedVersion reads the number in a captured 16-byte version field
// (e.g. "6.24" and NULs) with nothing but the standard library, so that the
// expectation does not come from the code under test.
func capturedVersion(t *testing.T, stream []byte) float64 {
	t.Helper()
	s := string(bytes.TrimRight(stream[:VersionSize], "\x00"))
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("captured version field %q: %v", stream[:VersionSize], err)
	}
	return f
}

// TestReplayClient plays each captured server against our client.
func TestReplayClient(t *testing.T) {
	for _, r := range loadRuns(t) {
		t.Run(r.name, func(t *testing.T) {
			got, err, perr := replayAgainst(t, r, Client)
			checkReplay(t, r, Client, got, err, perr, r.c2s)
		})
	}
}

func checkReplay(t *testing.T, r run, role Role, got []byte, err, perr error, want []byte) {
	t.Helper()
	if r.mismatch {
		var me *MismatchError
		if !errors.As(err, &me) || me.Field != "size" {
			t.Fatalf("err = %v, want a size mismatch", err)
		}
		wantMsg := "size mismatch: local=64, remote=128"
		if role == Client {
			wantMsg = "size mismatch: local=128, remote=64"
		}
		if me.Error() != wantMsg {
			t.Errorf("mismatch %q, want %q", me.Error(), wantMsg)
		}
	} else if err != nil {
		t.Fatalf("our %v: %v", role, err)
	}
	if perr != nil {
		t.Fatalf("recorded peer: %v", perr)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("our %v sent %d bytes, the real one %d; first difference at %d: %q vs %q", role, len(got), len(want), i, clip(got[i:]), clip(want[i:]))
	}
}

func clip(b []byte) []byte {
	if len(b) > 40 {
		return b[:40]
	}
	return b
}
