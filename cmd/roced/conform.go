package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/goroce/goroce/conform"
	"github.com/goroce/goroce/internal/endpoint"
	"github.com/goroce/goroce/nic/udp"
)

func init() {
	register("conform", "run the specification-cited conformance suite against a peer (--peer-exec) or goroce itself (--self)", runConform)
}

// runConform runs the conformance suite, against goroce itself (--self)
// or against a peer host (HOST, its tools started through --peer-exec or
// by a person); it prints the table of results, writes them as JSON with
// --json and as a page with --html, and exits 1 if any case is not a
// pass.
func runConform(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conform", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	self := fs.Bool("self", false, "run with goroce as the peer, in this process over the in-memory link")
	jsonFile := fs.String("json", "", "also write the results to `FILE` as {\"cases\": [...]}")
	htmlFile := fs.String("html", "", "also write the results to `FILE` as an HTML page, each case's packets as a ladder diagram")
	runRE := fs.String("run", "", "run only the cases whose id matches `REGEXP`")
	list := fs.Bool("list", false, "list the cases (id, role, rule, expected) and run none")
	var peerExec *string
	fs.Func("peer-exec", "start each peer tool by running `PREFIX` followed by its command line ('ssh hca1', 'rxe-peer.sh exec', '' to run it here); without it, print each command for a person to run", func(v string) error {
		peerExec = &v
		return nil
	})
	dev := fs.String("d", "", "the local interface or address the suite sends from (default: the one that routes to HOST)")
	gid := fs.Int("g", -1, "the local GID index (default: the GID of the local address)")
	peerDev := fs.String("peer-dev", "", "the peer tools' -d (default: none, their first device)")
	peerGID := fs.Int("peer-gid", 1, "the peer tools' GID index (-g, -x): 1 is rxe's IPv4 GID")
	peerRoced := fs.String("peer-roced", "", "run roced's tools from `PATH` on the peer instead of rdma-core's and perftest's")
	peerPython := fs.String("peer-python", "", "goroce's requester script at `PATH` on the peer (--requester-script prints it; it needs python3-pyverbs there): the requester cases no tool's client plays run it")
	script := fs.Bool("requester-script", false, "print goroce's requester script (for --peer-python) and run nothing")
	port := fs.Int("port", 18515, "the first TCP port of the peer tools; case i uses PORT+2i and PORT+2i+1")
	deadWait := fs.Duration("dead-wait", 2*time.Second, "how long the fence waits before a QP that answers nothing is taken to be in the error state")
	peerStart := fs.Duration("peer-start", 0, "how long a peer tool may take to listen or connect (default 60s, and 10m for a person running printed commands)")
	fs.Usage = func() {} // an error is one line; -h prints the flags below
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, "usage: roced conform --self | [--peer-exec PREFIX] [-d DEV] [-g GIDX] HOST  [--run REGEXP] [--json FILE] [--html FILE] | --list | --requester-script")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "roced conform: %v (roced conform -h lists the flags)\n", err)
		return 2
	}
	if *script {
		if fs.NArg() > 0 {
			fmt.Fprintf(stderr, "roced conform: --requester-script takes no HOST (%s)\n", fs.Arg(0))
			return 2
		}
		io.WriteString(stdout, conform.RequesterScript)
		return 0
	}
	host := ""
	switch {
	case fs.NArg() > 1:
		fmt.Fprintf(stderr, "roced conform: unexpected argument %q: one peer HOST\n", fs.Arg(1))
		return 2
	case fs.NArg() == 1 && *self:
		fmt.Fprintf(stderr, "roced conform: --self and a peer HOST (%s) exclude each other\n", fs.Arg(0))
		return 2
	case fs.NArg() == 1:
		host = fs.Arg(0)
	case peerExec != nil:
		fmt.Fprintln(stderr, "roced conform: --peer-exec needs the peer's HOST")
		return 2
	}
	cases := conform.Catalogue()
	if *runRE != "" {
		re, err := regexp.Compile(*runRE)
		if err != nil {
			fmt.Fprintf(stderr, "roced conform: --run: %v\n", err)
			return 2
		}
		var sel []conform.Case
		for _, c := range cases {
			if re.MatchString(c.ID) {
				sel = append(sel, c)
			}
		}
		if len(sel) == 0 {
			fmt.Fprintf(stderr, "roced conform: --run %q matches no case\n", *runRE)
			return 2
		}
		cases = sel
	}
	if *list {
		for _, c := range cases {
			fmt.Fprintf(stdout, "%s\t%s\t%s\t%s\n", c.ID, c.Role, c.Rule, c.ExpectedString())
		}
		return 0
	}
	if !*self && host == "" {
		fmt.Fprintln(stderr, "roced conform: name the peer: --self (goroce against goroce) or a peer HOST")
		return 2
	}
	// Create the report files before the run, so that a bad name fails
	// at once.
	type report struct {
		f     *os.File
		write func(io.Writer, []conform.Result) error
	}
	var reports []report
	for _, r := range []struct {
		name  string
		write func(io.Writer, []conform.Result) error
	}{{*jsonFile, conform.WriteJSON}, {*htmlFile, conform.WriteHTML}} {
		if r.name == "" {
			continue
		}
		f, err := os.Create(r.name)
		if err != nil {
			fmt.Fprintln(stderr, "roced conform:", err)
			return 2
		}
		defer f.Close()
		reports = append(reports, report{f, r.write})
	}
	var rs []conform.Result
	if *self {
		rs = conform.RunSelf(cases, nil)
	} else {
		ep, err := endpoint.Open(endpoint.Config{Dev: *dev, GID: *gid, Peer: host})
		if err != nil {
			fmt.Fprintln(stderr, "roced conform:", err)
			return 2
		}
		// The suite sends through the link itself; the device over it
		// only took the link, so close the device and keep a link of
		// the suite's own on the same address.
		addr := ep.Addr
		ep.Close()
		link, err := udp.Open(udp.Config{Addr: addr})
		if err != nil {
			fmt.Fprintln(stderr, "roced conform:", err)
			return 2
		}
		defer link.Close()
		cfg := conform.PeerConfig{Link: link, Local: addr, Host: host, Prompt: stdout, Roced: *peerRoced, Python: *peerPython,
			Dev: *peerDev, GID: *peerGID, Port: *port, DeadWait: *deadWait, Start: *peerStart}
		if peerExec != nil {
			cfg.Exec = append([]string{}, strings.Fields(*peerExec)...)
		}
		rs = conform.RunPeer(cases, cfg, nil)
	}
	if err := conform.WriteText(stdout, rs); err != nil {
		fmt.Fprintln(stderr, "roced conform:", err)
		return 1
	}
	for _, r := range reports {
		err := r.write(r.f, rs)
		if cerr := r.f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			fmt.Fprintln(stderr, "roced conform:", err)
			return 1
		}
	}
	if d, e := conform.Deviations(rs); d+e > 0 {
		return 1
	}
	return 0
}
