package interop

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/tools/cmtime"
	"github.com/goroce/goroce/tools/perftest"
	"github.com/goroce/goroce/tools/pingpong"
	"github.com/goroce/goroce/tools/rdmaserver"
	"github.com/goroce/goroce/tools/rping"
	"github.com/goroce/goroce/tools/ucmatose"
	"github.com/goroce/goroce/tools/udaddy"
)

// The "Talking to an rxe or HCA host" section of docs/tools.md (the page
// the README sends a user to for the tools) shows the command
// lines a new user types first, one pair per code block: the server's
// line, then the client's, each behind a prompt naming its host (hca$,
// goroce$). They are run here as written against rxe in the lab, so that
// neither the README nor roced can drift from what works. Only the HCA
// side is adapted to the lab (its -d becomes rxe0 and its GID index 1,
// as the README's own note says); roced's line is run unchanged, without
// -d, as a user would.

// ReadmeTimeout is the least time each side of a README pair gets: the
// pairs ask for more traffic than a matrix case (1000 round trips, 200
// messages of 64 KiB), which takes seconds under TCG.
const ReadmeTimeout = 60 * time.Second

// ReadmePairsFile is the page that holds the pairs, from the repository's
// root: interop-lab.sh passes it to interop -readme, and TestReadmePairs
// reads it.
const ReadmePairsFile = "docs/tools.md"

// ReadmeSection is the heading whose code blocks hold the pairs.
const ReadmeSection = "## Talking to an rxe or HCA host"

// ReadmeCMSections are the headings of the pairs of tools that connect
// through the RDMA CM. The README shows both directions itself, so they
// are run as written and not reversed (their server address is a flag,
// not a trailing operand to drop).
var ReadmeCMSections = []string{
	"## Connecting through the RDMA connection manager: `roced rping`",
	"## librdmacm's smallest example: `roced rdma_server` and `roced rdma_client`",
	"## Many connections at once: `roced ucmatose`",
	"## UD through SIDR: `roced udaddy`",
	"## Timing connection setup: `roced cmtime`",
}

// ReadmeLine is one prompted command line of the README.
type ReadmeLine struct {
	Host string   // the prompt: "hca" or "goroce"
	Argv []string // the command line after the prompt, split into words
}

// ReadmePair is one code block: the server's line and the client's.
type ReadmePair struct {
	Server, Client ReadmeLine // the block's two lines, the server's first
	// Reversed: the block's lines with the roles swapped.
	Reversed bool
	// Scenario is what the judge checks the outputs against: the tool,
	// and the size and iterations the command line asks for (or the
	// tool's defaults).
	Scenario Scenario
}

// ReadmePairs reads the pairs of ReadmeSection from a README's text, then
// the same pairs reversed, then the pairs of each of ReadmeCMSections.
func ReadmePairs(text string) ([]ReadmePair, error) {
	pairs, err := sectionPairs(text, ReadmeSection)
	if err != nil {
		return nil, err
	}
	for _, p := range pairs[:len(pairs):len(pairs)] {
		pairs = append(pairs, p.reversed())
	}
	for _, h := range ReadmeCMSections {
		cm, err := sectionPairs(text, h)
		if err != nil {
			return nil, err
		}
		pairs = append(pairs, cm...)
	}
	return pairs, nil
}

// sectionPairs reads the pairs of the code blocks under heading.
func sectionPairs(text, heading string) ([]ReadmePair, error) {
	i := strings.Index(text, "\n"+heading+"\n")
	if i < 0 {
		return nil, fmt.Errorf("README has no %q section", heading)
	}
	section := text[i+len(heading)+2:]
	if j := strings.Index(section, "\n#"); j >= 0 {
		section = section[:j]
	}
	var pairs []ReadmePair
	var block []ReadmeLine
	in := false
	sc := bufio.NewScanner(strings.NewReader(section))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "```"):
			if in {
				p, err := readmePair(block)
				if err != nil {
					return nil, err
				}
				pairs = append(pairs, p)
				block = nil
			}
			in = !in
		case in && line != "":
			host, cmd, ok := strings.Cut(line, "$")
			if !ok || (host != "hca" && host != "goroce") {
				return nil, fmt.Errorf("README line %q: want \"hca$ ...\" or \"goroce$ ...\"", line)
			}
			block = append(block, ReadmeLine{Host: host, Argv: strings.Fields(cmd)})
		}
	}
	if len(pairs) == 0 {
		return nil, fmt.Errorf("README section %q has no command pair", heading)
	}
	return pairs, nil
}

// reversed is the pair with the roles swapped: the client's line without
// its host operand serves, the server's line with the other host's address
// connects. So each README example is also tried the other way round: a
// roced pingpong server with no -d is what issue 12 found advertising
// loopback.
func (p ReadmePair) reversed() ReadmePair {
	addr := map[string]string{"hca": readmeHCAAddr, "goroce": readmeGoroceAddr}
	c := p.Client.Argv
	return ReadmePair{
		Server:   ReadmeLine{p.Client.Host, append([]string(nil), c[:len(c)-1]...)},
		Client:   ReadmeLine{p.Server.Host, append(append([]string(nil), p.Server.Argv...), addr[p.Client.Host])},
		Scenario: p.Scenario, Reversed: true,
	}
}

func readmePair(block []ReadmeLine) (ReadmePair, error) {
	if len(block) != 2 || block[0].Host == block[1].Host {
		return ReadmePair{}, fmt.Errorf("README code block %v: want a server line and a client line, one per host", block)
	}
	p := ReadmePair{Server: block[0], Client: block[1]}
	// The goroce side names the tool as roced does and its flags are the
	// tool's own; both sides ask for the same traffic.
	g := p.Server
	if g.Host != "goroce" {
		g = p.Client
	}
	if len(g.Argv) < 2 || g.Argv[0] != "roced" {
		return p, fmt.Errorf("README line %q: want \"roced TOOL ...\"", strings.Join(g.Argv, " "))
	}
	t, ok := ToolByName(g.Argv[1])
	if !ok {
		return p, fmt.Errorf("README line %q: no tool %s", strings.Join(g.Argv, " "), g.Argv[1])
	}
	server := g.Host == p.Server.Host
	if want := t.Command(server, true); g.Argv[1] != want {
		return p, fmt.Errorf("README line %q: the %s side runs roced %s", strings.Join(g.Argv, " "), map[bool]string{true: "server", false: "client"}[server], want)
	}
	sc := Scenario{Tool: t, Transport: t.Transports[0]}
	var err error
	if sc.Size, sc.Iters, err = counts(t, server, g.Argv[2:]); err != nil {
		return p, fmt.Errorf("README line %q: %v", strings.Join(g.Argv, " "), err)
	}
	switch t.Exchange {
	case CmatoseSends:
		// The judge's figure is -c, as a matrix case's flags carry it.
		c, _ := ucmatose.ParseFlags(g.Argv[2:])
		sc.Flags = []string{"-c", strconv.Itoa(c.Connections)}
	case UdaddySends:
		c, _ := udaddy.ParseFlags(g.Argv[2:])
		sc.Flags = []string{"-c", strconv.Itoa(c.Connections)}
	case CmtimeConnects:
		c, _ := cmtime.ParseFlags(g.Argv[2:])
		sc.Flags = []string{"-c", strconv.Itoa(c.Connections)}
	}
	p.Scenario = sc
	return p, nil
}

// counts parses a tool's flags as roced does and returns the message size
// and the iterations they ask for (the tool's defaults where not given).
func counts(t *Tool, server bool, args []string) (size, iters int, err error) {
	if t.Family == CM && t.Exchange == CmtimeConnects {
		_, err = cmtime.ParseFlags(args)
		return 0, 1, err
	}
	if t.Family == CM && t.Exchange == CmatoseSends {
		var c ucmatose.Config
		c, err = ucmatose.ParseFlags(args)
		return c.Size, c.Count, err
	}
	if t.Family == CM && t.Exchange == UdaddySends {
		var c udaddy.Config
		c, err = udaddy.ParseFlags(args)
		return c.Size, c.Count, err
	}
	if t.Family == CM && t.Exchange == ExampleSends {
		_, err = rdmaserver.ParseFlags(server, args)
		return rdmaserver.MsgLen, 1, err
	}
	if t.Family == CM {
		var c rping.Config
		c, err = rping.ParseFlags(args)
		return c.Size, c.Count, err
	}
	if t.Family == Pingpong {
		pt, err := pingpong.ToolByName(t.Name)
		if err == nil {
			var c pingpong.Config
			c, err = pingpong.ParseFlags(pt, args)
			size, iters = int(c.Size), int(c.Iters)
		}
		return size, iters, err
	}
	pt, err := perftest.TestByName(t.Name)
	if err == nil {
		var c perftest.Config
		c, err = perftest.ParseFlags(pt, args)
		size, iters = int(c.Size), int(c.Iters)
	}
	return size, iters, err
}

// Dir says which side serves.
func (p ReadmePair) Dir() Direction {
	if p.Server.Host == "hca" {
		return PeerServer
	}
	return RocedServer
}

// Name names a pair in reports, as a case ID: readme/TOOL@DIRECTION.
func (p ReadmePair) Name() string {
	return p.caseName() + "@" + p.Dir().String()
}

func (p ReadmePair) caseName() string {
	n := "readme/" + p.Scenario.Tool.Name
	if p.Reversed {
		n += "/reversed"
	}
	return n
}

// labArgv is the command line a README line becomes in the lab: roced's
// as written but for the binary's path; the HCA's with rxe0, GID index 1
// and the lab's addresses.
func (p ReadmePair) labArgv(l ReadmeLine, l0 *Lab, roced string) []string {
	a := append([]string(nil), l.Argv...)
	if l.Host == "goroce" {
		a[0] = roced
	}
	for i := range a {
		switch {
		case l.Host == "hca" && i > 0 && a[i-1] == "-d":
			a[i] = "rxe0"
		case l.Host == "hca" && i > 0 && (a[i-1] == "-g" || a[i-1] == "-x"):
			a[i] = "1"
		case a[i] == readmeHCAAddr:
			a[i] = l0.GuestAddr
		case a[i] == readmeGoroceAddr:
			a[i] = l0.HostAddr
		}
	}
	return a
}

// The addresses the README's examples use: the lab's defaults.
const (
	readmeHCAAddr    = "192.0.2.2"
	readmeGoroceAddr = "192.0.2.1"
)

// LabArgv returns the server's and the client's command lines in the lab.
func (p ReadmePair) LabArgv(l *Lab, roced string) (server, client []string) {
	return p.labArgv(p.Server, l, roced), p.labArgv(p.Client, l, roced)
}

// RunReadme runs each pair against the lab's rxe0, as Run runs the
// matrix's cases (same timeouts, judge and artifacts), and adds the
// results to rep.
func RunReadme(ctx context.Context, l *Lab, roced string, pairs []ReadmePair, o Options, rep *Report) {
	o.defaults()
	// The README's lines keep the tools' default counts (1000 pingpong
	// round trips, 5000 WRITEs of 64 KiB), made for hardware: against rxe
	// under qemu TCG they take 15-30 s on a quiet machine.
	o.Timeout = max(o.Timeout, ReadmeTimeout)
	for _, p := range pairs {
		res := runReadme(ctx, l, roced, p, o)
		if res.Result == Pass {
			rep.Passed++
		} else {
			rep.Failed++
		}
		if o.Progress != nil {
			fmt.Fprintln(o.Progress, progressLine(res))
		}
		rep.Results = append(rep.Results, res)
	}
}

func runReadme(ctx context.Context, l *Lab, roced string, p ReadmePair, o Options) Result {
	start := time.Now()
	res := Result{Case: p.caseName(), Tool: p.Scenario.Tool.Name, Transport: string(RC),
		Size: p.Scenario.Size, Iters: p.Scenario.Iters, Direction: p.Dir().String(), Result: Fail}
	side := func(r ReadmeLine) (Runner, string, bool) {
		if r.Host == "goroce" {
			return l.Host(), "roced", true
		}
		return l.Guest(), "rxe0", false
	}
	srvRun, srvWho, srvStrict := side(p.Server)
	cliRun, cliWho, cliStrict := side(p.Client)
	srvArgv, cliArgv := p.LabArgv(l, roced)
	port := DefaultPort
	if p.Scenario.Tool.Port != 0 {
		port = p.Scenario.Tool.Port
	}
	// The tap capture, kept if the pair fails, as the matrix's cases keep
	// theirs: a failure under load is otherwise left without evidence.
	dir := ""
	if o.Artifacts != "" {
		dir = filepath.Join(o.Artifacts, strings.NewReplacer("/", "_", "@", ".").Replace(p.Name()))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			dir = ""
		}
	}
	var capture Proc
	pcap := filepath.Join(dir, "tap.pcap")
	if l.Capture && dir != "" {
		var err error
		if capture, err = l.StartCapture(ctx, pcap, port); err != nil {
			res.Notes = append(res.Notes, "no capture: "+err.Error())
		}
	}
	srv := srvRun.Start(ctx, srvArgv, o.Timeout)
	listening := time.Now()
	var cliOut Output
	// srvStrict: the server is roced, whose CM listener its stats socket
	// lists (waitServer).
	rc := suiteRdmaCore[l.Suite]
	srvSide := Side{Runner: srvRun, RdmaCore: rc}
	if srvStrict {
		srvSide.Roced = roced
	}
	if err := waitServer(ctx, p.Scenario, srvSide, srv, port, o); err != nil {
		srv.Stop()
		cliOut = Output{Where: cliRun.Where(), Exit: -1, Argv: cliArgv, StartErr: "not started: " + err.Error()}
	} else {
		var starts int
		cliOut, starts = runClient(ctx, p.Scenario, cliRun, cliArgv, srv, listening.Add(o.ListenTimeout), o)
		res.Notes = append(res.Notes, startsNote(cliOut, starts, o)...)
		if runsOn(p.Scenario, srvSide) {
			srv.Stop() // its client is done: nothing more will come
		}
		select {
		case <-srv.Done():
		case <-time.After(o.Grace):
			srv.Stop()
		}
	}
	srvOut := srv.Wait()
	v := Judge(p.Scenario,
		SideRun{Role: "server", Who: srvWho, Strict: srvStrict, Roced: srvStrict, Out: srvOut, RdmaCore: rc},
		SideRun{Role: "client", Who: cliWho, Strict: cliStrict, Roced: cliStrict, Out: cliOut, RdmaCore: rc})
	res.Server = &SideReport{Who: srvWho, Output: srvOut}
	res.Client = &SideReport{Who: cliWho, Output: cliOut}
	res.Reasons, res.Figures = v.Reasons, v.Figures
	res.Notes = append(res.Notes, v.Notes...)
	if v.Pass {
		res.Result = Pass
	}
	res.Pcap = endCapture(capture, pcap, v.Pass && !o.KeepPcaps)
	res.Seconds = time.Since(start).Seconds()
	if dir != "" {
		res.Dir = dir
		writeArtifacts(dir, res)
	}
	return res
}
