package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
)

// clusterDoc is the page whose sh blocks TestOpenMPI runs as written.
const clusterDoc = "../../docs/cluster.md"

// clusterScript returns the sh blocks of docs/cluster.md, in order, as one
// script, and fails unless they are the three runs TestOpenMPI checks:
// the four hosts made, mpi_check built, one rank a host over UCX, then
// roced serve on each host and two ranks a host, then Open MPI's TCP
// transport, then the hosts removed.
func clusterScript(t *testing.T) string {
	t.Helper()
	text, err := os.ReadFile(clusterDoc)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for rest := string(text); ; {
		_, after, ok := strings.Cut(rest, "```sh\n")
		if !ok {
			break
		}
		block, tail, ok := strings.Cut(after, "```")
		if !ok {
			t.Fatalf("%s: an sh block is not closed", clusterDoc)
		}
		blocks = append(blocks, block)
		rest = tail
	}
	script := strings.Join(blocks, "")
	var runs []string
	for _, l := range strings.Split(script, "\n") {
		if strings.Contains(l, " mpirun ") {
			runs = append(runs, l)
		}
	}
	want := []string{"--mca pml ucx --mca btl self -H mpi1,mpi2,mpi3,mpi4 ",
		"--mca pml ucx --mca btl self -H mpi1:2,mpi2:2,mpi3:2,mpi4:2 ",
		"--mca pml ob1 --mca btl tcp,self -H mpi1,mpi2,mpi3,mpi4 "}
	if len(runs) != len(want) {
		t.Fatalf("%s: want 3 mpirun lines (4 hosts over UCX, 8 ranks over UCX, 4 hosts over TCP), have %d:\n%s", clusterDoc, len(runs), script)
	}
	for i, w := range want {
		if !strings.Contains(runs[i], w) || !strings.HasSuffix(runs[i], " $PWD/mpi_check") {
			t.Fatalf("%s: mpirun line %d is %q; want %q ... $PWD/mpi_check", clusterDoc, i+1, runs[i], w)
		}
	}
	for _, w := range []string{"scripts/netns-hosts up 4\n", "export LD_PRELOAD=$PWD/bin/libgoroce.so GOROCE_NETDEV=eth0 UCX_TLS=rc_verbs,ud_verbs,self\n",
		"$PWD/bin/roced serve --background", "scripts/netns-hosts down\n"} {
		if !strings.Contains(script, w) {
			t.Fatalf("%s: the blocks lack %q:\n%s", clusterDoc, w, script)
		}
	}
	if !strings.HasSuffix(script, "scripts/netns-hosts down\n") {
		t.Fatalf("%s: the last line must remove the hosts:\n%s", clusterDoc, script)
	}
	return script
}

// TestClusterLines holds docs/cluster.md to the form TestOpenMPI runs,
// without root, so that an edit of the page fails at once.
func TestClusterLines(t *testing.T) { clusterScript(t) }

// mpiRank is one line of mpi_check's report.
type mpiRank struct {
	rank, size                    int
	host                          string
	sent, tcpData, retrans, ipOut int64
}

var mpiLine = regexp.MustCompile(`^mpi_check: rank (\d+)/(\d+) on (\S+): sent (\d+) bytes in \d+ messages, allreduced \d+ elements; window: tcp_data_segs (\d+) tcp_retrans (\d+) ip_out_octets (\d+)$`)

// mpiRuns splits the output of the script into mpi_check's runs: each
// run's rank lines, ended by its verdict ("mpi_check: ok"); an
// unfinished run is returned with ok false.
func mpiRuns(out string) (runs [][]mpiRank, oks []bool) {
	var cur []mpiRank
	for _, l := range strings.Split(out, "\n") {
		if m := mpiLine.FindStringSubmatch(l); m != nil {
			n := func(i int) int64 { v, _ := strconv.ParseInt(m[i], 10, 64); return v }
			cur = append(cur, mpiRank{int(n(1)), int(n(2)), m[3], n(4), n(5), n(6), n(7)})
			continue
		}
		if strings.HasPrefix(l, "mpi_check: ok") || strings.HasPrefix(l, "mpi_check: FAILED") {
			runs, oks = append(runs, cur), append(oks, strings.HasPrefix(l, "mpi_check: ok"))
			cur = nil
		}
	}
	return runs, oks
}

// ucxLanes matches UCX's report (at UCX_LOG_LEVEL=info) of an endpoint's
// lanes, as "ep_cfg[1]: tag(rc_verbs/goroce0:1)".
var ucxLanes = regexp.MustCompile(`ep_cfg\[\d+\]: (.*)$`)

// goroceLane is a lane on goroce (a verbs transport on a goroce device)
// or a rank's lane to itself.
var goroceLane = regexp.MustCompile(`^(rc_verbs|ud_verbs)/goroce\d+:\d+$|^self/memory\d*$`)

// TestOpenMPI runs docs/cluster.md's blocks as written: Open MPI 4.1 (pml
// ucx) across four network namespaces acting as four hosts, mpirun's
// daemons launched through scripts/netns-rsh, mpi_check's ping-pong
// (1 B .. 1 MiB, every pair, both ways) and allreduces with every byte
// checked; once one rank a host, once two ranks a host sharing the
// host's goroce device through roced serve; then, for contrast, Open
// MPI's TCP transport. For the goroce runs it requires each rank on its
// host, no TCP segment carrying data in any host's namespace while the
// ranks exchanged their data (the window mpi_check reports, which the
// control traffic of Open MPI, TCP between mpirun and its daemons, stays
// outside of), at least as many IP bytes sent as the rank sent (its data
// left as packets, not through shared memory), and every UCX endpoint's
// lanes a verbs transport on goroce0 or the rank's own (UCX's report at
// UCX_LOG_LEVEL=info). The TCP run shows that the window sees data
// carried by TCP. Needs root (skipped by -short; make test runs it in its
// system stage) and Debian's openmpi-bin and libopenmpi-dev.
func TestOpenMPI(t *testing.T) {
	netns.Privileged(t)
	for _, name := range []string{"mpirun", "mpicc"} {
		if _, err := exec.LookPath(name); err != nil {
			t.Skipf("%s is not installed (Debian's openmpi-bin and libopenmpi-dev; make deps installs them): %v", name, err)
		}
	}
	script := clusterScript(t)
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// One run at a time on this machine: the page's host names are fixed.
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "goroce-netns-hosts-mpi.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if out, _ := exec.Command("ip", "netns", "list").Output(); regexp.MustCompile(`(?m)^mpi(\d+|-sw)\b`).Match(out) {
		t.Fatalf("network namespaces named like the page's hosts exist already (scripts/netns-hosts down removes them):\n%s", out)
	}
	// The page's directory: the repository's scripts and sources, and a
	// bin/ with the library, its engine and roced as TestMain built them.
	dir := t.TempDir()
	for _, l := range []struct{ link, target string }{
		{"scripts", filepath.Join(repo, "scripts")},
		{"cmd", filepath.Join(repo, "cmd")},
		{"bin/libgoroce.so", lib},
		{"bin/libgoroce-engine.so", filepath.Join(filepath.Dir(lib), "libgoroce-engine.so")},
		{"bin/roced", roced},
	} {
		p := filepath.Join(dir, l.link)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(l.target, p); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		// The script's last line removes the hosts; this, when it failed
		// before it.
		if out, err := exec.Command(filepath.Join(repo, "scripts/netns-hosts"), "down").CombinedOutput(); err != nil {
			t.Errorf("netns-hosts down: %v\n%s", err, out)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-ec", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PWD="+dir, "UCX_LOG_LEVEL=info")
	// A file, not a pipe: the roced serve --background the script starts
	// keep its output open until the script's last line ends them, and a
	// script that fails before it must not leave Run waiting on them.
	outFile, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()
	cmd.Stdout, cmd.Stderr = outFile, outFile
	start := time.Now()
	err = cmd.Run()
	t.Logf("the page's lines ran in %v", time.Since(start).Round(time.Second))
	out, rerr := os.ReadFile(outFile.Name())
	if rerr != nil {
		t.Fatal(rerr)
	}
	report := string(out)
	if err != nil {
		t.Fatalf("%v\n%s", err, report)
	}
	runs, oks := mpiRuns(report)
	if len(runs) != 3 {
		t.Fatalf("want 3 runs of mpi_check, have %d:\n%s", len(runs), report)
	}
	for i, c := range []struct {
		name    string
		size    int
		host    func(rank int) int // the host number of rank
		overTCP bool
	}{
		{"four hosts over goroce", 4, func(r int) int { return r + 1 }, false},
		{"two ranks a host over goroce", 8, func(r int) int { return r/2 + 1 }, false},
		{"four hosts over TCP", 4, func(r int) int { return r + 1 }, true},
	} {
		ranks := runs[i]
		if !oks[i] || len(ranks) != c.size {
			t.Errorf("%s: verdict ok %v, %d rank lines, want ok and %d", c.name, oks[i], len(ranks), c.size)
			continue
		}
		var tcp int64
		for r, k := range ranks {
			if k.rank != r || k.size != c.size || k.host != fmt.Sprintf("mpi%d", c.host(r)) {
				t.Errorf("%s: line %d is rank %d/%d on %s; want rank %d/%d on mpi%d", c.name, r, k.rank, k.size, k.host, r, c.size, c.host(r))
			}
			tcp += k.tcpData
			if c.overTCP {
				continue
			}
			if k.tcpData != 0 || k.retrans != 0 {
				t.Errorf("%s: rank %d's host sent %d TCP data segments (%d retransmitted) while the ranks exchanged data", c.name, r, k.tcpData, k.retrans)
			}
			if k.ipOut < k.sent {
				t.Errorf("%s: rank %d sent %d bytes, its host %d IP bytes meanwhile: some did not leave as packets", c.name, r, k.sent, k.ipOut)
			}
		}
		if c.overTCP && tcp < 1000 {
			t.Errorf("%s: %d TCP data segments in all the windows; the window misses data carried by TCP", c.name, tcp)
		}
		t.Logf("%s: each rank sent %d bytes; TCP data segments in the windows: %d; rank 0's host sent %d IP bytes", c.name, ranks[0].sent, tcp, ranks[0].ipOut)
	}
	// Every endpoint of the UCX runs: 4 ranks with an endpoint to
	// themselves and one kind to the others, then 8.
	lanes := 0
	for _, l := range strings.Split(report, "\n") {
		m := ucxLanes.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		lanes++
		for _, f := range strings.Fields(m[1]) {
			f = strings.Trim(f, "()")
			if i := strings.IndexByte(f, '('); i >= 0 {
				f = f[i+1:]
			}
			if !goroceLane.MatchString(f) {
				t.Errorf("a UCX endpoint has a lane %q, not on goroce: %s", f, l)
			}
		}
	}
	if lanes < 2*(4+8) {
		t.Errorf("UCX reported %d endpoint configurations, want at least %d (UCX_LOG_LEVEL=info):\n%s", lanes, 2*(4+8), report)
	}
	if t.Failed() {
		t.Logf("output:\n%s", report)
	}
}

// TestClusterScriptsRefuse: scripts/netns-hosts and scripts/netns-rsh
// refuse what they cannot do with a one-line reason and a non-zero exit,
// before they need root or touch a namespace.
func TestClusterScriptsRefuse(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"netns-hosts"}, "", "usage: scripts/netns-hosts up [N] | down | list"},
		{[]string{"netns-hosts", "up", "0"}, "", "the number of hosts must be 1..250, not '0'"},
		{[]string{"netns-hosts", "up", "four"}, "", "the number of hosts must be 1..250, not 'four'"},
		{[]string{"netns-hosts", "down", "now"}, "", "down takes no operand"},
		{[]string{"netns-hosts", "list"}, "NETNS_HOSTS_PREFIX=mpi7", "NETNS_HOSTS_PREFIX must be lower-case letters"},
		{[]string{"netns-rsh"}, "", "usage: netns-rsh [-x] [-l USER] HOST COMMAND..."},
		{[]string{"netns-rsh", "-z", "mpi1", "true"}, "", "unknown option -z"},
		{[]string{"netns-rsh", "mpi1/..", "true"}, "", "'mpi1/..' is not a host name"},
		{[]string{"netns-rsh", "mpi-no-such-host", "true"}, "", "no host 'mpi-no-such-host'"},
	} {
		cmd := exec.Command(filepath.Join("../../scripts", c.args[0]), c.args[1:]...)
		cmd.Env = os.Environ()
		if c.env != "" {
			cmd.Env = append(cmd.Env, c.env)
		}
		out, err := cmd.CombinedOutput()
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if err == nil || len(lines) != 1 || !strings.Contains(lines[0], c.want) {
			t.Errorf("%s: %v, output %q; want a failure saying %q", strings.Join(c.args, " "), err, out, c.want)
		}
	}
}
