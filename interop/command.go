// The interop command's logic: flags, peers and stages; its main is
// interop/cmd/interop.

package interop

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goroce/goroce/nic/impair"
)

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, " ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// Command is the interop command (interop/cmd/interop, whose doc lists
// its peers and flags): it parses args, runs the matrix or a lab stage
// and returns the exit status: 0 when every case passed, 1 when one
// failed or did not run, 2 on a usage or setup error.
func Command(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("interop", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		peer       = fs.String("peer", "self", "self, lab, lab-libgoroce (the host's real tools over -libgoroce against the lab), lab-pyverbs (memory windows and invalidation against rxe's verbs through pyverbs), lab-apps (qperf both ways and rdma-core's test suite, the host's over -libgoroce against the guest's on rxe), lab-pair, lab-guestbench (roced against itself beside rxe against itself inside the guest), remote, or lab-exec (run the command after the flags in the lab's guest through the harness's agent: roced conform's --peer-exec in the lab)")
		roced      = fs.String("roced", "bin/roced", "the roced binary; lab-guestbench: a static one (default: built with CGO_ENABLED=0)")
		libgoroce  = fs.String("libgoroce", "bin/libgoroce.so", "lab-libgoroce: the preloaded library; lab-pyverbs: the library the host's pyverbs runs over in the pair cases ('' leaves them out)")
		link       = fs.String("link", "", "roced's --link (udp, afpacket, afxdp); empty: its default")
		runRe      = fs.String("run", "", "only cases whose ID (tool/transport/size[/variant]@direction), and README pairs whose name (readme/TOOL[/reversed]@direction), match this regexp")
		tools      = fs.String("tools", "", "comma-separated tools (roced names or real program names); empty: all")
		dirs       = fs.String("dir", "both", "both, roced-server or peer-server")
		mtu        = fs.Int("mtu", 1024, "path MTU given to both sides (-m) and the unit of the sizes")
		scale      = fs.Float64("iters-scale", 1, "multiply every -n by this")
		port       = fs.Int("port", DefaultPort, "TCP port of the first case's exchange; case i uses port+i (mod 1000)")
		timeout    = fs.Duration("timeout", 30*time.Second, "timeout of each side's command")
		listenTO   = fs.Duration("listen-timeout", 20*time.Second, "how long a server may take to listen")
		grace      = fs.Duration("grace", 10*time.Second, "how long a server may run on after its client ended")
		budget     = fs.Duration("budget", 0, "time budget of the whole run; later cases are NOT-RUN (and fail); 0: none")
		jsonFile   = fs.String("json", "", "write the report as JSON to this file")
		artifacts  = fs.String("artifacts", "", "directory for each case's outputs and failed cases' pcaps (default: a new temporary directory)")
		list       = fs.Bool("list", false, "print the cases and their command lines, run nothing")
		count      = fs.Int("count", 1, "run each selected case this many times in a row (each run judged alone); lab-guestbench: rounds, each cell the median")
		labDir     = fs.String("lab", "", "the rxe lab directory, holding rxe-peer.sh (default $RXE_PEER_DIR, else lab/ under the module root)")
		labDown    = fs.Bool("lab-down", false, "power the lab VM off at the end")
		tapQLen    = fs.Int("tap-qlen", DefaultTapQueueLen, "transmit queue length set on the lab tap (0: leave it); qemu under TCG drains it slowly")
		pcap       = fs.Bool("pcap", true, "lab: capture the tap around each case, keep it for failed cases")
		keepPcaps  = fs.Bool("keep-pcaps", false, "lab: keep the captures of passing cases too")
		guestEv    = fs.Bool("guest-evidence", true, "lab: record rxe0's hw_counters, new dmesg lines and a guest-side capture around each case (kept for failed cases)")
		selfAddrs  = fs.String("self-addrs", "127.0.0.1,127.0.0.2", "self: the two roced processes' addresses")
		peerHost   = fs.String("peer-host", "", "remote: ssh destination ([user@]host) of the HCA's host")
		peerAddr   = fs.String("peer-addr", "", "remote: the HCA's IP address (default: the host's)")
		peerDev    = fs.String("peer-dev", "", "remote: the peer tools' -d (e.g. mlx5_0)")
		peerGID    = fs.Int("peer-gid", -1, "remote: the peer tools' GID index (-g/-x); -1: not given")
		rocedDev   = fs.String("roced-dev", "", "roced's -d (default: lab: the tap's address, or the tap with a raw -link; remote: the local address routing to the peer)")
		printCmds  = fs.Bool("print", false, "remote: print the peer's commands to run by hand instead of ssh")
		readme     = fs.String("readme", "", "lab: also run the command pairs of this page's \""+ReadmeSection+"\" section and its CM tools' sections, as written (the repository's "+ReadmePairsFile+")")
		impaired   = fs.Bool("impair", false, "lab: put nic/impair between roced and the tap (roced in a namespace of its own, see README)")
		impLoss    = fs.Float64("impair-loss", 0.01, "with -impair: probability a RoCEv2 packet is lost, each direction")
		impReorder = fs.Float64("impair-reorder", 0.02, "with -impair: probability a RoCEv2 packet is held back so later ones overtake it")
		impHold    = fs.Duration("impair-reorder-delay", time.Millisecond, "with -impair: how long a reordered packet is held back")
		impSeed    = fs.Uint64("impair-seed", 1, "with -impair: base seed; each case's forwarder is seeded with it and the case ID")
		qpTimeout  = fs.Int("qp-timeout", -1, "roced's RC local ACK timeout T (--qp-timeout, 4.096 us * 2^T) on every case but the README's; -1: LabQPTimeout with -peer lab, else the tools' own (14); 0: the tools' own")
		sshOpts    stringList
		rocedFlags stringList
		rocedEnv   stringList
	)
	fs.Var(&sshOpts, "ssh-opt", "remote: an ssh option (repeatable), e.g. -ssh-opt=-i -ssh-opt=key")
	fs.Var(&rocedFlags, "roced-flag", "an extra flag for every roced command line (repeatable)")
	fs.Var(&rocedEnv, "roced-env", "lab-guestbench: NAME=VALUE in every roced's environment (repeatable), e.g. GOROCE_BUSY_POLL=5000")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *peer == "lab-exec" {
		if fs.NArg() == 0 {
			fmt.Fprintln(stderr, "interop: -peer lab-exec needs the command to run in the guest after the flags")
			return 2
		}
		dir, err := FindLabDir(*labDir)
		if err != nil {
			fmt.Fprintf(stderr, "interop: %v\n", err)
			return 2
		}
		// The command carries its own timeout (roced conform's words do):
		// without -timeout, the agent's is only a backstop.
		limit := time.Hour
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "timeout" {
				limit = *timeout
			}
		})
		exit := GuestExec(context.Background(), NewLab(dir), fs.Args(), limit, stdout, stderr)
		if exit < 0 {
			return 125 // as env(1) and timeout(1) say it: the command did not run
		}
		return exit
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "interop: unexpected arguments %q\n", fs.Args())
		return 2
	}
	fail := failer(stderr)

	if *peer == "lab-apps" {
		return runApps(*labDir, *runRe, *libgoroce, *list, *jsonFile, stdout, stderr)
	}
	if *peer == "lab-pyverbs" {
		return runVerbs(*labDir, *runRe, *libgoroce, *list, *jsonFile, stdout, stderr)
	}
	if *peer == "lab-guestbench" {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		o := guestBenchArgs{labDir: *labDir, runRe: *runRe, mtu: *mtu, scale: *scale, port: *port, rounds: *count,
			jsonFile: *jsonFile, artifacts: *artifacts, labDown: *labDown, list: *list, rocedEnv: rocedEnv, link: *link}
		if set["roced"] {
			o.roced = *roced
		}
		if set["timeout"] {
			o.timeout = *timeout
		}
		return runGuestBench(o, stdout, stderr)
	}

	ds, err := ParseDirections(*dirs)
	if err != nil {
		return fail("%v", err)
	}
	var toolList []string
	if *tools != "" {
		toolList = strings.Split(*tools, ",")
	} else if *peer == "lab-libgoroce" {
		toolList = LibgoroceTools
	}
	// The IPv6 cases need IPv6 on both sides: the lab gets it (EnableIPv6),
	// not the impaired path's namespaces, nor a self or remote peer.
	ipv6 := (*peer == "lab" || *peer == "lab-libgoroce") && !*impaired
	cases, err := Matrix(MatrixOptions{MTU: *mtu, Directions: ds, Tools: toolList, ItersScale: *scale, IPv6: ipv6})
	if err != nil {
		return fail("%v", err)
	}
	if *impaired && *runRe == "" {
		*runRe = ImpairedCases
	}
	if *peer == "lab-libgoroce" && *tools == "" && *runRe == "" {
		var keep []Case
		for _, c := range cases {
			if LibgoroceCase(c) {
				keep = append(keep, c)
			}
		}
		cases = keep
	}
	var re *regexp.Regexp
	if *runRe != "" {
		if re, err = regexp.Compile(*runRe); err != nil {
			return fail("-run: %v", err)
		}
		var keep []Case
		for _, c := range cases {
			if re.MatchString(c.ID()) {
				keep = append(keep, c)
			}
		}
		cases = keep
	}
	var readmePairs []ReadmePair
	if *readme != "" {
		if *peer != "lab" {
			return fail("-readme needs -peer lab")
		}
		text, err := os.ReadFile(*readme)
		if err != nil {
			return fail("-readme: %v", err)
		}
		if readmePairs, err = ReadmePairs(string(text)); err != nil {
			return fail("-readme %s: %v", *readme, err)
		}
		if re != nil { // -run picks README pairs by name too (readme/TOOL[/reversed]@DIRECTION)
			var keep []ReadmePair
			for _, rp := range readmePairs {
				if re.MatchString(rp.Name()) {
					keep = append(keep, rp)
				}
			}
			readmePairs = keep
		}
	}
	if len(cases) == 0 && len(readmePairs) == 0 {
		return fail("no case matches")
	}
	if *count < 1 {
		return fail("-count %d: want 1 or more", *count)
	}
	cases = Repeat(cases, *count)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rocedPath := *roced
	if *peer == "lab-libgoroce" {
		if rocedPath, err = filepath.Abs(*libgoroce); err != nil {
			return fail("%v", err)
		}
		if _, err := os.Stat(rocedPath); err != nil && !*list {
			return fail("libgoroce: %v (build it: make build)", err)
		}
	} else if *peer != "lab-pair" {
		if rocedPath, err = filepath.Abs(*roced); err != nil {
			return fail("%v", err)
		}
		if _, err := os.Stat(rocedPath); err != nil && !*list {
			return fail("roced binary: %v (build it: make build)", err)
		}
	}
	extra := append([]string(nil), rocedFlags...)
	to := *qpTimeout
	if to < 0 {
		to = 0
		if *peer == "lab" {
			to = LabQPTimeout
		}
	}
	if to > 31 {
		return fail("-qp-timeout %d: want -1, 0 or 1 to 31", to)
	}
	if to > 0 {
		extra = append(extra, "--qp-timeout="+strconv.Itoa(to))
	}
	if *link != "" {
		extra = append(extra, "--link", *link)
	}

	var p *Peer
	var lab *Lab
	switch *peer {
	case "self":
		a, b, ok := strings.Cut(*selfAddrs, ",")
		if !ok {
			return fail("-self-addrs wants two addresses, comma-separated")
		}
		p = SelfPeer(rocedPath, a, b, extra)
	case "lab", "lab-pair", "lab-libgoroce":
		dir, err := FindLabDir(*labDir)
		if err != nil {
			return fail("%v", err)
		}
		lab = NewLab(dir)
		lab.Capture = *pcap && *peer != "lab-pair"
		lab.GuestEvidence = *guestEv && *peer != "lab-pair"
		if !*list {
			if os.Geteuid() != 0 {
				return fail("the lab needs root (tap, network namespace, qemu)")
			}
			if err := lab.Lock(20 * time.Minute); err != nil {
				return fail("%v", err)
			}
			t := time.Now()
			if err := lab.Up(ctx); err != nil {
				return fail("lab VM: %v", err)
			}
			fmt.Fprintf(stderr, "interop: lab %s ready (%.1fs)\n", lab.Suite, time.Since(t).Seconds())
			// A run killed on the impaired path leaves rximp0 in the lab's
			// namespace, a second addressed interface there that makes
			// roced without -d refuse to choose. The impaired path's own
			// Setup removes it; every other run removes it here.
			if !*impaired {
				stale := NewImpairedPath(lab, impair.Faults{}, 0)
				if left := stale.Left(ctx); left != nil {
					fmt.Fprintf(stderr, "interop: removing the impaired path a killed run left: %s\n", strings.Join(left, ", "))
					stale.Teardown(ctx)
				}
			}
			if *tapQLen > 0 {
				if err := lab.SetTapQueueLen(ctx, *tapQLen); err != nil {
					return fail("lab tap: %v", err)
				}
			}
			if ipv6 && slices.ContainsFunc(cases, func(c Case) bool { return c.IPv6 }) {
				if err := lab.EnableIPv6(ctx); err != nil {
					return fail("lab: %v", err)
				}
			}
			if *labDown {
				defer func() {
					if err := lab.Down(context.Background()); err != nil {
						fmt.Fprintf(stderr, "interop: %v\n", err)
					}
				}()
			}
		}
		if *impaired {
			if *peer != "lab" || (*link != "" && *link != "udp") || *rocedDev != "" {
				return fail("-impair needs -peer lab and roced on its default udp link and address")
			}
			for _, v := range []float64{*impLoss, *impReorder} {
				if v < 0 || v > 1 {
					return fail("-impair-loss and -impair-reorder are probabilities in [0, 1]")
				}
			}
			path := NewImpairedPath(lab, impair.Faults{Loss: *impLoss, Reorder: *impReorder, ReorderDelay: *impHold}, *impSeed)
			if !*list {
				if err := path.Setup(ctx); err != nil {
					return fail("%v", err)
				}
				defer path.Teardown(context.Background())
			}
			p = ImpairedLabPeer(ctx, lab, path, rocedPath, extra, to)
		} else if *peer == "lab-libgoroce" {
			p = LibgoroceLabPeer(ctx, lab, rocedPath, HostRdmaCore())
			if *tools == "" && *runRe == "" {
				var keep []Case
				for _, c := range cases {
					if why := LibgoroceSkip(c, p); why != "" {
						fmt.Fprintf(stderr, "interop: %s left out: %s\n", c.ID(), why)
						continue
					}
					keep = append(keep, c)
				}
				cases = keep
			}
		} else if *peer == "lab" {
			dev := *rocedDev
			if dev == "" && *link != "" && *link != "udp" {
				// The raw links open the interface itself: name it, and
				// its whole GID table, rather than one address on it.
				dev = lab.Tap
			}
			p = LabPeer(ctx, lab, rocedPath, dev, extra, to)
		} else if p, err = LabPairPeer(ctx, lab); err != nil {
			return fail("%v", err)
		}
	case "remote":
		rc := RemoteConfig{Host: *peerHost, Addr: *peerAddr, Dev: *peerDev, GID: *peerGID,
			SSHOpts: sshOpts, LocalDev: *rocedDev}
		if *printCmds {
			rc.Print = &PrintRunner{Out: stderr, In: bufio.NewReader(os.Stdin)}
			if *timeout == 30*time.Second {
				*timeout = 10 * time.Minute // a person types the other side
			}
		}
		if p, err = RemotePeer(rocedPath, rc, extra); err != nil {
			return fail("%v", err)
		}
	default:
		return fail("-peer %q: want self, lab, lab-libgoroce, lab-pyverbs, lab-pair, lab-guestbench or remote", *peer)
	}

	if *list {
		for i, c := range cases {
			port := *port + i%1000
			srv, cli := p.Subject, p.Ref
			if c.Dir == PeerServer {
				srv, cli = p.Ref, p.Subject
			}
			fmt.Fprintf(stdout, "%s\n  server: %s\n  client: %s\n", c.ID(),
				ShellJoin(srv.Argv(c.Scenario, port, "")),
				ShellJoin(cli.Argv(c.Scenario, port, srv.AddrFor(c.Scenario))))
		}
		for _, rp := range readmePairs {
			srv, cli := rp.LabArgv(lab, rocedPath)
			fmt.Fprintf(stdout, "%s\n  server: %s\n  client: %s\n", rp.Name(), ShellJoin(srv), ShellJoin(cli))
		}
		return 0
	}

	art := *artifacts
	if art == "" {
		if art, err = os.MkdirTemp("", "goroce-interop-"); err != nil {
			return fail("%v", err)
		}
	} else if err := os.MkdirAll(art, 0o755); err != nil {
		return fail("%v", err)
	}
	// The capture runs in another namespace but the same directory tree;
	// an absolute path keeps every report's file names usable anywhere.
	if art, err = filepath.Abs(art); err != nil {
		return fail("%v", err)
	}
	fmt.Fprintf(stderr, "interop: %d cases against %s, artifacts in %s\n", len(cases), p.Name, art)
	rep := Run(ctx, p, cases, Options{
		Port: *port, Timeout: *timeout, ListenTimeout: *listenTO, Grace: *grace, Budget: *budget,
		Artifacts: art, KeepPcaps: *keepPcaps, Progress: stderr,
	})
	if lab != nil && lab.GuestEvidence {
		// The README pairs keep no guest evidence: stop its capture first.
		if err := lab.EndGuestEvidence(context.Background()); err != nil {
			fmt.Fprintf(stderr, "interop: ending the guest's capture: %v\n", err)
		}
	}
	if len(readmePairs) > 0 {
		RunReadme(ctx, lab, rocedPath, readmePairs, Options{Timeout: *timeout,
			ListenTimeout: *listenTO, Grace: *grace, Artifacts: art, KeepPcaps: *keepPcaps, Progress: stderr}, rep)
		rep.Seconds = time.Since(rep.Started).Seconds()
	}
	rep.WriteText(stdout)
	if *jsonFile != "" {
		if err := rep.WriteJSON(*jsonFile); err != nil {
			fmt.Fprintf(stderr, "interop: %v\n", err)
			return 2
		}
	}
	if !rep.OK() {
		if t := rep.Impair; t != nil && (t.ToGuest.Lost == 0 || t.ToRoced.Lost == 0) {
			fmt.Fprintln(stderr, "interop: the impairing forwarder lost no packet in one direction: the run proves nothing about recovery")
		}
		return 1
	}
	return 0
}

// runVerbs is -peer lab-pyverbs: the verbs stage (RunVerbs)
// against the lab's guest.
// The pair cases run pyverbs over libgoroce (empty: not run).
func runVerbs(labDir, runRe, libgoroce string, list bool, jsonFile string, stdout, stderr io.Writer) int {
	fail := failer(stderr)
	re, err := compileRun(runRe)
	if err != nil {
		return fail("-run: %v", err)
	}
	if libgoroce != "" {
		var err error
		if libgoroce, err = filepath.Abs(libgoroce); err != nil {
			return fail("%v", err)
		}
		if _, err := os.Stat(libgoroce); err != nil && !list {
			return fail("libgoroce: %v (build it: make build; -libgoroce '' leaves the pair cases out)", err)
		}
	}
	if list {
		for _, c := range VerbsCases(libgoroce != "") {
			if re == nil || re.MatchString(c.Name) {
				fmt.Fprintf(stdout, "%s\n  %s\n", c.Name, c.Rule)
			}
		}
		return 0
	}
	ctx, stop, lab, err := labUp(labDir)
	if err != nil {
		return fail("%v", err)
	}
	defer stop()
	return report(RunVerbs(ctx, lab, VerbsOptions{Run: re, Progress: stderr, Libgoroce: libgoroce}), jsonFile, stdout, fail)
}

// labUp finds the lab, takes its lock and boots its guest, for a stage
// that runs in the returned context (which SIGINT and SIGTERM end).
func labUp(labDir string) (context.Context, context.CancelFunc, *Lab, error) {
	dir, err := FindLabDir(labDir)
	if err != nil {
		return nil, nil, nil, err
	}
	if os.Geteuid() != 0 {
		return nil, nil, nil, errors.New("the lab needs root (tap, network namespace, qemu)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	lab := NewLab(dir)
	if err := lab.Lock(20 * time.Minute); err != nil {
		stop()
		return nil, nil, nil, err
	}
	if err := lab.Up(ctx); err != nil {
		stop()
		return nil, nil, nil, fmt.Errorf("lab VM: %w", err)
	}
	return ctx, stop, lab, nil
}

// stageReport is what a lab stage's run returns.
type stageReport interface {
	WriteText(io.Writer)
	WriteJSON(string) error
	OK() bool
}

// report prints a stage's report, writes it as JSON when asked, and
// returns the exit status: 1 when a case failed.
func report(rep stageReport, jsonFile string, stdout io.Writer, fail func(string, ...any) int) int {
	rep.WriteText(stdout)
	if jsonFile != "" {
		if err := rep.WriteJSON(jsonFile); err != nil {
			return fail("%v", err)
		}
	}
	if !rep.OK() {
		return 1
	}
	return 0
}

// runApps is -peer lab-apps: RunApps, qperf and rdma-core's
// test suite over libgoroce against the guest's on rxe0.
func runApps(labDir, runRe, libgoroce string, list bool, jsonFile string, stdout, stderr io.Writer) int {
	fail := failer(stderr)
	re, err := compileRun(runRe)
	if err != nil {
		return fail("-run: %v", err)
	}
	if list {
		for _, c := range AppsCases() {
			if re == nil || re.MatchString(c.Name) {
				fmt.Fprintln(stdout, c.Name)
			}
		}
		return 0
	}
	lib, err := filepath.Abs(libgoroce)
	if err != nil {
		return fail("%v", err)
	}
	if _, err := os.Stat(lib); err != nil {
		return fail("libgoroce: %v (build it: make build)", err)
	}
	ctx, stop, lab, err := labUp(labDir)
	if err != nil {
		return fail("%v", err)
	}
	defer stop()
	return report(RunApps(ctx, lab, AppsOptions{Run: re, Progress: stderr, Libgoroce: lib}), jsonFile, stdout, fail)
}

// failer returns the command's way to fail on bad input: one line on
// stderr, exit status 2.
func failer(stderr io.Writer) func(format string, a ...any) int {
	return func(format string, a ...any) int {
		fmt.Fprintf(stderr, "interop: "+format+"\n", a...)
		return 2
	}
}

// compileRun compiles a -run pattern; the empty one is nil, every case.
func compileRun(runRe string) (*regexp.Regexp, error) {
	if runRe == "" {
		return nil, nil
	}
	return regexp.Compile(runRe)
}
