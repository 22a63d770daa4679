package perftest

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// argsFor is each capture's command line (CAPTURES.md); the client runs
// the same on rxeA plus the server's address.
func argsFor(name string, role Role) string {
	base := filepath.Base(name)
	dev := "rxeB"
	if role == Client {
		dev = "rxeA"
	}
	a := "-d " + dev + " -x 1 -F "
	switch {
	case strings.Contains(base, "mismatch"):
		if role == Client {
			return a + "-n 30 -s 128 198.51.100.2"
		}
		return a + "-n 20 -s 64"
	case strings.HasPrefix(base, "pt6"):
		a += "-n 20 -s 64"
	case strings.HasPrefix(base, "atomic_bw"):
		a += "-n 100"
		if strings.HasSuffix(base, "cas") {
			a += " -A CMP_AND_SWAP"
		}
	case strings.Contains(base, "_ud_"):
		a += "-c UD -n 100 -s 64"
	case strings.Contains(base, "_uc_"):
		a += "-c UC -n 20 -s 8192"
	case strings.Contains(base, "rnr"):
		a += "-n 50 -s 64 -r 1"
		if role == Client {
			a += " -t 32"
		}
	case strings.HasSuffix(base, "s8192"):
		a += "-n 20 -s 8192"
	default:
		a += "-n 100 -s 64"
	}
	if role == Client {
		a += " 198.51.100.2"
	}
	return a
}

// stderrLine tells the lines the tools write on stderr; in the files they
// land wherever the unbuffered stderr overtook the buffered stdout.
func stderrLine(l string) bool {
	return strings.HasPrefix(l, "Correlation coefficient") || l == InlineNotice ||
		strings.Contains(l, " mismatch: local=") || l == " Failed to negotiate parameters"
}

var (
	bwRowRE  = regexp.MustCompile(`^ (\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)$`)
	latRowRE = regexp.MustCompile(`^ (\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*$`)
)

func num(s string) float64 {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil { // inf, -nan
		return map[string]float64{"inf": inf, "-nan": negNaN}[s]
	}
	return f
}

// TestGoldenOutput rebuilds every perftest stdout file of the lab from the
// command line, the capture (records, versions, the bandwidth report on
// the wire) and, for figures measured locally, the row's own numbers
// re-formatted: every line must match exactly.
func TestGoldenOutput(t *testing.T) {
	checked := 0
	for _, r := range loadRuns(t) {
		for _, role := range []Role{Server, Client} {
			side := map[Role]string{Server: "server", Client: "client"}[role]
			path := filepath.Join("testdata", r.name+"."+side+".txt")
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			checked++
			var got []string
			for _, l := range strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n") {
				if !stderrLine(l) {
					got = append(got, l)
				}
			}
			want := expectedOutput(t, r, role, got)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				for i := 0; i < max(len(got), len(want)); i++ {
					var g, w string
					if i < len(got) {
						g = got[i]
					}
					if i < len(want) {
						w = want[i]
					}
					if g != w {
						t.Errorf("%s line %d:\n file %q\n ours %q", path, i+1, g, w)
						break
					}
				}
			}
		}
	}
	if checked != 64 {
		t.Errorf("checked %d files, want 64", checked)
	}
}

func expectedOutput(t *testing.T, r run, role Role, file []string) []string {
	t.Helper()
	args := strings.Fields(argsFor(r.name, role))
	cfg, err := ParseFlags(r.shape.Test, args)
	if err != nil {
		t.Fatalf("%s %v: %v", r.name, args, err)
	}
	local, peer := r.srv, r.cli
	own, theirs := r.s2c, r.c2s
	if role == Client {
		local, peer = r.cli, r.srv
		own, theirs = r.c2s, r.s2c
	}
	var out []string
	notes := cfg.Resolve(3, 128, local)
	for _, n := range notes {
		if n != resultLine {
			out = append(out, n)
		}
	}
	if local.dialect() == V629 {
		out = append(out, DisablingDynamicPolling)
	}
	for _, n := range notes {
		if n == resultLine {
			out = append(out, n)
		}
	}
	if role == Server {
		out = append(out, WaitingBanner()...)
	}
	if r.mismatch {
		return out
	}
	out = append(out, cfg.Banner(RunInfo{Device: args[1], MTU: 3}, local)...)
	// The first record each side sent is the one it prints.
	off := VersionSize + 8 + 2
	if Negotiates(local, peer) {
		off += NegotiateSize
	}
	mine, err := ParseRecord(own[off : off+RecordSize])
	if err != nil {
		t.Fatal(err)
	}
	rem, err := ParseRecord(theirs[off : off+RecordSize])
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, cfg.AddressLines("local", mine)...)
	out = append(out, cfg.AddressLines("remote", rem)...)
	test := r.shape.Test
	if role == Server && (test == ReadLat || test == AtomicLat) {
		return append(out, resultLine)
	}
	out = append(out, cfg.ResultHeader(local)...)
	row := file[len(out)]
	switch test {
	case WriteBW, ReadBW, AtomicBW:
		// Both sides print the client's report, as it crossed the wire.
		steps := Plan(r.shape, r.cli, r.srv)
		pos := 0
		for _, st := range steps {
			if st.Kind == StepBWReport {
				break
			}
			for _, n := range st.Messages(true) {
				pos += n
			}
		}
		var msgs [BWReportSteps][]byte
		for i := range msgs {
			msgs[i] = r.c2s[pos+8*i : pos+8*i+8]
		}
		rep, err := ParseBWReport(msgs)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, cfg.BWRow(rep, local))
	case SendBW:
		m := bwRowRE.FindStringSubmatch(row)
		if m == nil {
			t.Fatalf("%s: row %q", r.name, row)
		}
		size, _ := strconv.ParseUint(m[1], 10, 64)
		it, _ := strconv.ParseUint(m[2], 10, 64)
		if size != cfg.Size || it != cfg.Iters {
			t.Errorf("%s: row for %d x %d, config says %d x %d", r.name, size, it, cfg.Size, cfg.Iters)
		}
		out = append(out, cfg.BWRow(BWReport{Size: size, Iters: it, BWPeak: num(m[3]), BWAvg: num(m[4]), MsgRate: num(m[5])}, local))
	default:
		m := latRowRE.FindStringSubmatch(row)
		if m == nil {
			t.Fatalf("%s: row %q", r.name, row)
		}
		size, _ := strconv.ParseUint(m[1], 10, 64)
		it, _ := strconv.ParseUint(m[2], 10, 64)
		out = append(out, cfg.LatRow(LatReport{Size: size, Iters: it, Min: num(m[3]), Max: num(m[4]), Typical: num(m[5]),
			Avg: num(m[6]), Stdev: num(m[7]), Percentile99: num(m[8]), Percentile999: num(m[9])}))
	}
	return append(out, resultLine)
}

// TestParamsFromFlags checks that the struct roced would send for each
// 6.29 command line is field for field the one the real tool sent.
func TestParamsFromFlags(t *testing.T) {
	n := 0
	for _, r := range loadRuns(t) {
		if !Negotiates(r.cli, r.srv) {
			continue
		}
		for _, role := range []Role{Server, Client} {
			cfg, err := ParseFlags(r.shape.Test, strings.Fields(argsFor(r.name, role)))
			if err != nil {
				t.Fatal(err)
			}
			cfg.Resolve(3, 128, V629)
			raw := r.c2s
			if role == Server {
				raw = r.s2c
			}
			sent, err := ParseParams(raw[26 : 26+NegotiateSize])
			if err != nil {
				t.Fatal(err)
			}
			ours := cfg.Params(sent.Attr)
			if ours != sent {
				t.Errorf("%s %v: ours %+v\nsent %+v", r.name, role, ours, sent)
			}
			if string(ours.Marshal()) != string(raw[26:26+NegotiateSize]) {
				t.Errorf("%s %v: struct bytes differ", r.name, role)
			}
			n++
		}
	}
	if n != 8 {
		t.Errorf("checked %d structs, want 8", n)
	}
}
