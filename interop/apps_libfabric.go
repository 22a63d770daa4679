package interop

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// libfabric in the applications stage: Debian's fi_pingpong (libfabric-bin)
// over libgoroce.so on this host against the guest's on rxe0, both ways,
// through libfabric's verbs provider: its msg endpoint (an RC QP the RDMA
// CM connects) and ofi_rxm's rdm endpoint over it. fi_pingpong checks
// every byte it receives (-c); its server serves one run and exits, both
// sides print the figures. rxe0's counters prove RoCE carried the data;
// TCP carries only fi_pingpong's exchange of addresses.
// Its dgram endpoint (UD) addresses its peer by GID index 0, the
// link-local GID of the interface's MAC: the lab's tap has IPv6 off until
// asked (rxe's ibv_create_ah then times out resolving the host's, and
// goroce has no such GID), so that case turns it on first
// (Lab.EnableIPv6, which gives the tap its link-local address at once).

// LibfabricPort is the TCP port of the stage's fi_pingpong servers (-B).
// Not fi_pingpong's default, 47592: that lies in Linux's ephemeral range
// (32768-60999), where the harness's own connections of the minute
// before leave TIME_WAIT sockets, and fi_pingpong binds without
// SO_REUSEADDR: CI's trixie run once failed to bind it (EADDRINUSE with
// nothing listening). The stage's other ports are below the range too.
const LibfabricPort = 19768

// LibfabricTest is one fi_pingpong run of the stage.
type LibfabricTest struct {
	Endpoint string // fi_pingpong's -e: msg, rdm, dgram
	Provider string // -p
	Size     int    // -S: the message size
	N        int    // -I: the iterations
	// LinkLocal says the endpoint addresses its peer by the link-local
	// GID (index 0): the lab's IPv6 must be on.
	LinkLocal bool
}

// ID names the test in the stage: libfabric/ENDPOINT.
func (f LibfabricTest) ID() string { return "libfabric/" + f.Endpoint }

// LibfabricTests are the stage's runs, small enough for the emulated guest.
var LibfabricTests = []LibfabricTest{
	{Endpoint: "msg", Provider: "verbs", Size: 4096, N: 200},
	{Endpoint: "rdm", Provider: "verbs;ofi_rxm", Size: 4096, N: 200},
	{Endpoint: "dgram", Provider: "verbs", Size: 1024, N: 200, LinkLocal: true},
}

// Argv is fi_pingpong's command line: the server's when server is empty,
// else the client's towards it. ofi_rxm sizes its completion queues from
// the universe size (256 peers by default), past the 32767 entries an rxe
// CQ holds and goroce's 32768 ("Unable to create verbs CQ"): 16 peers
// fit both.
func (f LibfabricTest) Argv(server string) []string {
	a := []string{"env", "FI_UNIVERSE_SIZE=16", "fi_pingpong", "-p", f.Provider, "-e", f.Endpoint,
		"-S", strconv.Itoa(f.Size), "-I", strconv.Itoa(f.N), "-c"}
	if server == "" {
		return append(a, "-B", strconv.Itoa(LibfabricPort))
	}
	return append(a, "-P", strconv.Itoa(LibfabricPort), server)
}

// libfabric runs one libfabric case.
func (a *appsRun) libfabric(ctx context.Context, c AppsCase) Result {
	f := c.Libfabric
	res := Result{Tool: "fi_pingpong", Transport: "RC", Size: f.Size, Iters: f.N, Direction: c.Dir}
	res.Flags = []string{"-p", f.Provider, "-e", f.Endpoint, "-c"}
	if f.LinkLocal {
		res.Transport = "UD"
		if err := a.lab.EnableIPv6(ctx); err != nil {
			res.Reasons = []string{err.Error()}
			return res
		}
	}
	pr, err := a.pair(ctx, c.Dir, LibfabricPort, func(host bool, to string) []string {
		if host {
			return a.hostArgv(f.Argv(to)...)
		}
		return f.Argv(to)
	})
	res.Server, res.Client = pr.server, pr.client
	if err != nil {
		res.Reasons = []string{err.Error()}
		return res
	}
	res.Reasons, res.Figures = JudgeLibfabric(*f, pr.client.Output, pr.server.Output, pr.rcvd, pr.sent)
	res.Notes = append(res.Notes, fmt.Sprintf("rxe0's counters over the run: %d RoCE packets received, %d sent", pr.rcvd, pr.sent))
	return res
}

// JudgeLibfabric judges one libfabric case: both sides exit 0 and print
// fi_pingpong's result line with every iteration sent and acknowledged and
// a positive latency, and rxe0 both received and sent the data's packets
// (a ping-pong carries N messages of Size bytes each way), at least one
// per IB MTU of each message.
func JudgeLibfabric(f LibfabricTest, client, server Output, rcvd, sent uint64) (reasons []string, figs []Figure) {
	for _, s := range pairSides(client, server) {
		if r := s.failure(stderrHint, false); r != "" {
			reasons = append(reasons, r)
			continue
		}
		text := s.out.Stdout + "\n" + s.out.Stderr
		line := FiPingpongResult(s.out.Stdout)
		if line == nil {
			reasons = append(reasons, s.side+": no result line"+stderrHint(text))
			continue
		}
		n := strconv.Itoa(f.N)
		if line.Sent != n || line.Acked != n {
			reasons = append(reasons, fmt.Sprintf("%s: %s sent and %s acknowledged, want %d", s.side, line.Sent, line.Acked, f.N))
		}
		if v, err := strconv.ParseFloat(line.Usec, 64); err != nil || !finite(v) || v <= 0 {
			reasons = append(reasons, fmt.Sprintf("%s: usec/xfer %q, want a positive number", s.side, line.Usec))
		} else if s.side == "client" {
			figs = []Figure{{Value: v, Unit: "usec", Side: "client"}}
		}
	}
	want := uint64((f.Size + ucxMTU - 1) / ucxMTU * f.N)
	if rcvd < want || sent < want {
		reasons = append(reasons, fmt.Sprintf("rxe0 received %d and sent %d RoCE packets during the run, want at least %d each way (%d messages of %d bytes at MTU %d)", rcvd, sent, want, f.N, f.Size, ucxMTU))
	}
	return reasons, figs
}

// FiPingpongLine is fi_pingpong's result line: "4k 200 =200 1.5m 0.29s
// 5.61 729.64 0.00" (bytes, #sent, #ack, total, time, MB/sec, usec/xfer,
// Mxfers/sec).
type FiPingpongLine struct {
	Sent  string // messages sent
	Acked string // of those, acknowledged (fi_pingpong prints "=200"; the "=" is dropped)
	Usec  string // microseconds a transfer
}

// FiPingpongResult returns the last result line of fi_pingpong's output, or
// nil without one.
func FiPingpongResult(out string) *FiPingpongLine {
	var r *FiPingpongLine
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 8 && strings.HasPrefix(f[2], "=") && strings.HasSuffix(f[4], "s") {
			r = &FiPingpongLine{Sent: f[1], Acked: strings.TrimPrefix(f[2], "="), Usec: f[6]}
		}
	}
	return r
}
