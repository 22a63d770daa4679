package interop

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// UCX in the applications stage: Debian's ucx_perftest (UCX 1.13 on
// bookworm, 1.18 on trixie in the guest; the host's is Debian's too) over
// libgoroce.so on this host against the guest's over rxe0, both ways, on
// the transports UCX picks for a RoCE device: rc_verbs (with ud_verbs as
// the auxiliary transport UCP's wireup needs to reach an interface, as on
// rxe or mlx5) and ud_verbs. ucx_perftest's server serves one run and
// exits; the client prints the figures. rxe's own packet counters
// (hw_counters, read in the guest before and after) prove the data went
// over RoCE between the two, not over TCP, which carries only
// ucx_perftest's exchange of addresses.

// UCXPort is the TCP port of the stage's ucx_perftest servers (-p).
const UCXPort = 19767

// UCXTest is one ucx_perftest run of the stage.
type UCXTest struct {
	TLS  string // UCX_TLS
	Name string // the transport that carries the data, for the case's name
	Test string // ucx_perftest's -t
	Size int    // -s: the message size
	N    int    // -n: the iterations
	// AtClient: the data arrives at the client (ucp_get); else at the
	// server (sends and puts).
	AtClient bool
}

// ID names the test in the stage: ucx/TRANSPORT/TEST.
func (u UCXTest) ID() string { return "ucx/" + u.Name + "/" + u.Test }

// UCXTests are the stage's runs: a tagged latency and a put bandwidth over
// rc_verbs, a tagged latency over ud_verbs, each small enough for the
// emulated guest.
var UCXTests = []UCXTest{
	{TLS: "rc_verbs,ud_verbs:aux,self", Name: "rc_verbs", Test: "tag_lat", Size: 4096, N: 200},
	{TLS: "rc_verbs,ud_verbs:aux,self", Name: "rc_verbs", Test: "ucp_put_bw", Size: 65536, N: 100},
	{TLS: "ud_verbs,self", Name: "ud_verbs", Test: "tag_lat", Size: 4096, N: 200},
}

// Argv is ucx_perftest's command line on device dev (goroce0 or rxe0): the
// server's when server is empty, else the client's towards it. noMPI adds
// -P 0, which a ucx_perftest built with MPI needs to run as a plain server
// or client (trixie's UCX 1.18 defaults to MPI mode; bookworm's 1.13 has
// no -P).
func (u UCXTest) Argv(dev, server string, noMPI bool) []string {
	a := []string{"env", "UCX_TLS=" + u.TLS, "UCX_NET_DEVICES=" + dev + ":1"}
	if dev == "rxe0" {
		// rxe's UD completions carry no RoCE packet type (mlx5 gives it
		// in sl, and goroce as mlx5): UCX then takes an IPv4 packet's
		// GRH buffer for an IPv6 GRH, finds no GID of its own in it and
		// drops every UD packet, rxe against itself too (bookworm's UCX
		// 1.13: "UD endpoint ... unhandled timeout error"). On rxe, UCX
		// needs its check of the destination GID off.
		a = append(a, "UCX_UD_ETH_DGID_CHECK=n")
	}
	a = append(a, "ucx_perftest", "-p", strconv.Itoa(UCXPort))
	if noMPI {
		a = append(a, "-P", "0")
	}
	if server == "" {
		return a
	}
	return append(a, server, "-t", u.Test, "-s", strconv.Itoa(u.Size), "-n", strconv.Itoa(u.N), "-w", "10")
}

// ucxCountersScript prints rxe0's received and sent RoCE packets, as rdma
// statistic counts them.
const ucxCountersScript = "cat /sys/class/infiniband/rxe0/ports/1/hw_counters/rcvd_pkts /sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts"

// ucxSide is what the stage needs to know of one side's UCX.
type ucxSide struct {
	version string // ucx_info -v's library version, major.minor ("1.13")
	mpiMode bool   // its ucx_perftest has -P (MPI mode)
}

// ucxProbeScript prints UCX's library version ("# Version 1.13.1" in
// 1.13, "# Library version: 1.18.1" in 1.18) and whether ucx_perftest has
// -P.
const ucxProbeScript = `ucx_info -v | sed -n 's/^# .*[Vv]ersion:* \([0-9]*[.][0-9]*\).*/\1/p' | head -n 1; ucx_perftest -h 2>&1 | grep -c -e '-P <0|1>'`

// ucxProbe asks side (run through r, argv wrapped by wrap) for its UCX,
// once a side.
func (a *appsRun) ucxProbe(ctx context.Context, side string, r Runner, wrap func(...string) []string) (ucxSide, error) {
	if v, ok := a.ucxSides[side]; ok {
		return v, nil
	}
	out := r.Start(ctx, wrap("sh", "-c", ucxProbeScript), AppsTimeout).Wait()
	f := strings.Fields(out.Stdout)
	if len(f) != 2 {
		return ucxSide{}, fmt.Errorf("the %s's UCX: no version%s", side, stderrHint(out.Stdout+out.Stderr))
	}
	v := ucxSide{version: f[0], mpiMode: f[1] != "0"}
	if a.ucxSides == nil {
		a.ucxSides = map[string]ucxSide{}
	}
	a.ucxSides[side] = v
	return v, nil
}

// rxeCounters reads rxe0's received and sent packet counters in the guest.
func (a *appsRun) rxeCounters(ctx context.Context) (rcvd, sent uint64, err error) {
	out := a.lab.Guest().Start(ctx, []string{"sh", "-c", ucxCountersScript}, AppsTimeout).Wait()
	f := strings.Fields(out.Stdout)
	if out.Exit != 0 || len(f) != 2 {
		return 0, 0, fmt.Errorf("rxe0's packet counters: exit %d%s", out.Exit, stderrHint(out.Stderr+out.Stdout))
	}
	if rcvd, err = strconv.ParseUint(f[0], 10, 64); err == nil {
		sent, err = strconv.ParseUint(f[1], 10, 64)
	}
	return rcvd, sent, err
}

// ucx runs one UCX case: the server on one side, the client on the other,
// rxe0's counters read around them.
func (a *appsRun) ucx(ctx context.Context, c AppsCase) Result {
	u := c.UCX
	res := Result{Tool: "ucx_perftest", Transport: strings.ToUpper(u.Name[:2]), Size: u.Size, Iters: u.N, Direction: c.Dir}
	res.Flags = []string{"-t", u.Test, "UCX_TLS=" + u.TLS}
	host, guest := a.lab.Host(), a.lab.Guest()
	same := func(argv ...string) []string { return argv }
	hs, err := a.ucxProbe(ctx, "host", host, a.hostArgv)
	if err != nil {
		res.Reasons = []string{err.Error()}
		return res
	}
	gs, err := a.ucxProbe(ctx, "guest", guest, same)
	if err != nil {
		res.Reasons = []string{err.Error()}
		return res
	}
	// ucx_perftest's exchange over TCP and UCP's wireup are one version's:
	// bookworm's 1.13 client resets the connection of trixie's 1.18
	// server, which waits on.
	if hs.version != gs.version {
		res.Result = NotRun
		res.Reasons = []string{fmt.Sprintf("not run: the host's UCX is %s, the guest's %s; ucx_perftest pairs one version", hs.version, gs.version)}
		return res
	}
	hostP, guestP := hs.mpiMode, gs.mpiMode
	pr, err := a.pair(ctx, c.Dir, UCXPort, func(host bool, to string) []string {
		if host {
			return a.hostArgv(u.Argv("goroce0", to, hostP)...)
		}
		return u.Argv("rxe0", to, guestP)
	})
	res.Server, res.Client = pr.server, pr.client
	if err != nil {
		res.Reasons = []string{err.Error()}
		return res
	}
	cout, sout := pr.client.Output, pr.server.Output
	rcvd, sent := pr.rcvd, pr.sent
	// The data's direction, seen from rxe0: it receives what the host's
	// side sends.
	toRxe := (c.Dir == appsGoroceServer) == u.AtClient
	res.Reasons, res.Figures = JudgeUCX(*u, cout, sout, toRxe, rcvd, sent)
	res.Notes = append(res.Notes, fmt.Sprintf("rxe0's counters over the run: %d RoCE packets received, %d sent", rcvd, sent))
	return res
}

// pairRun is one run of a server and its client, a side each.
type pairRun struct {
	server, client *SideReport
	rcvd, sent     uint64 // rxe0's RoCE packets over the run
}

// pair runs a server on one side and its client on the other: with dir
// appsGoroceServer the server on the host over libgoroce.so and the client
// in the guest on rxe0, else the other way round. argv gives a side's
// command line: the server's when to is empty, else the client's towards
// to. The client starts once the server's TCP port listens (the tools'
// own exchange of addresses); rxe0's packet counters are read around the
// run, which proves RoCE carried the data.
func (a *appsRun) pair(ctx context.Context, dir string, port int, argv func(host bool, to string) []string) (pairRun, error) {
	var pr pairRun
	var srv, cli Runner = a.lab.Host(), a.lab.Guest()
	srvArgv, cliArgv := argv(true, ""), argv(false, a.lab.HostAddr)
	srvWho, cliWho := "libgoroce", "rxe0"
	if dir == appsRxeServer {
		srv, cli = cli, srv
		srvArgv, cliArgv = argv(false, ""), argv(true, a.lab.GuestAddr)
		srvWho, cliWho = cliWho, srvWho
	}
	rcvd0, sent0, err := a.rxeCounters(ctx)
	if err != nil {
		return pr, err
	}
	sp := srv.Start(ctx, srvArgv, AppsTimeout)
	if err := srv.WaitListen(ctx, port, AppsTimeout); err != nil {
		sp.Stop()
		out := sp.Wait()
		pr.server = &SideReport{Who: srvWho, Output: out}
		return pr, fmt.Errorf("the server does not listen: %v%s", err, stderrHint(out.Stderr+out.Stdout))
	}
	cout := cli.Start(ctx, cliArgv, AppsTimeout).Wait()
	if cout.Exit != 0 {
		sp.Stop() // a client that failed leaves the server waiting
	}
	pr.server = &SideReport{Who: srvWho, Output: sp.Wait()}
	pr.client = &SideReport{Who: cliWho, Output: cout}
	rcvd1, sent1, err := a.rxeCounters(ctx)
	pr.rcvd, pr.sent = rcvd1-rcvd0, sent1-sent0
	return pr, err
}

// ucxMTU is the IB MTU the lab's link gives rxe0 (1500-byte tap: 1024),
// which goroce0 shares there: a message of Size bytes is at least
// Size/ucxMTU packets.
const ucxMTU = 1024

// pairSide is one side of a pair's run.
type pairSide struct {
	side string // client or server
	out  Output
}

func pairSides(client, server Output) []pairSide {
	return []pairSide{{"client", client}, {"server", server}}
}

// failure says why the side did not run to a clean exit ("" if it did),
// its output's hint (stderrHint, ucxHint) appended; stoppedOK: a side the
// stage stopped once its peer was done did not fail.
func (s pairSide) failure(hint func(string) string, stoppedOK bool) string {
	text := s.out.Stdout + "\n" + s.out.Stderr
	switch {
	case s.out.StartErr != "":
		return s.side + " did not run: " + s.out.StartErr
	case s.out.TimedOut:
		return fmt.Sprintf("%s timed out after %.0fs%s", s.side, s.out.Seconds, stderrHint(text))
	case s.out.Exit != 0 && !(stoppedOK && s.out.Stopped):
		return fmt.Sprintf("%s exit status %d%s", s.side, s.out.Exit, hint(text))
	}
	return ""
}

// JudgeUCX judges one UCX case: both sides exit 0, the client prints its
// "Final:" line with the iterations asked for and positive figures, and
// rxe0 received (toRxe) or sent the data's packets: at least N messages of
// Size bytes at the lab's MTU.
func JudgeUCX(u UCXTest, client, server Output, toRxe bool, rcvd, sent uint64) (reasons []string, figs []Figure) {
	for _, s := range pairSides(client, server) {
		// A server stopped after its client finished is not a failure.
		if r := s.failure(ucxHint, s.side == "server"); r != "" {
			reasons = append(reasons, r)
		}
	}
	if len(reasons) > 0 {
		return reasons, nil
	}
	final := UCXFinal(client.Stdout)
	if final == nil {
		return []string{"client: no Final: line" + stderrHint(client.Stdout+"\n"+client.Stderr)}, nil
	}
	if n, err := strconv.Atoi(final[1]); err != nil || n != u.N {
		reasons = append(reasons, fmt.Sprintf("client: %s iterations, want %d", final[1], u.N))
	}
	// Latency (the percentile, usec) for a latency test, bandwidth (the
	// overall MB/s) for the others.
	i, unit := 2, "usec"
	if !strings.HasSuffix(u.Test, "_lat") {
		i, unit = 6, "MB/s"
	}
	v, err := strconv.ParseFloat(final[i], 64)
	if err != nil || !finite(v) || v <= 0 {
		reasons = append(reasons, fmt.Sprintf("client: %s %q, want a positive number", unit, final[i]))
	} else {
		figs = []Figure{{Value: v, Unit: unit, Side: "client"}}
	}
	want := uint64((u.Size + ucxMTU - 1) / ucxMTU * u.N)
	got, dir := sent, "sent"
	if toRxe {
		got, dir = rcvd, "received"
	}
	if got < want {
		reasons = append(reasons, fmt.Sprintf("rxe0 %s %d RoCE packets during the run, want at least %d (%d messages of %d bytes at MTU %d)", dir, got, want, u.N, u.Size, ucxMTU))
	}
	return reasons, figs
}

// UCXFinal returns the fields of ucx_perftest's "Final:" line: the
// iterations, the latency's percentile, average and overall (usec), the
// bandwidth's average and overall (MB/s), the message rate's average and
// overall; nil without one.
func UCXFinal(out string) []string {
	var final []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 9 && f[0] == "Final:" {
			final = f
		}
	}
	return final
}

// ucxHint is UCX's own error line in text ("[host:pid:tid] file.c:276
// Fatal: ...", "... ERROR ..."), which its tables and backtrace bury, else
// stderrHint's first and last lines.
func ucxHint(text string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, " Fatal: ") || strings.Contains(l, " ERROR ") {
			return ": " + clip(strings.TrimSpace(l))
		}
	}
	return stderrHint(text)
}
