package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"

	"github.com/goroce/goroce/conform"
)

func init() {
	register("conform", "run the specification-cited conformance suite (so far goroce against goroce: --self)", runConform)
}

// runConform runs the conformance suite. So far the peer is goroce itself
// (--self); it prints the table of results, writes them as JSON with
// --json, and exits 1 if any case is not a pass.
func runConform(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conform", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	self := fs.Bool("self", false, "run with goroce as the peer, in this process over the in-memory link")
	jsonFile := fs.String("json", "", "also write the results to `FILE` as {\"cases\": [...]}")
	htmlFile := fs.String("html", "", "also write the results to `FILE` as an HTML page, each case's packets as a ladder diagram")
	runRE := fs.String("run", "", "run only the cases whose id matches `REGEXP`")
	list := fs.Bool("list", false, "list the cases (id, role, rule, expected) and run none")
	fs.Usage = func() {} // an error is one line; -h prints the flags below
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, "usage: roced conform --self [--run REGEXP] [--json FILE] [--html FILE] | --list")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "roced conform: %v (roced conform -h lists the flags)\n", err)
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "roced conform: unexpected argument %q: a remote peer is not supported yet, only --self\n", fs.Arg(0))
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
	if !*self {
		fmt.Fprintln(stderr, "roced conform: name the peer: only --self (goroce against goroce) is supported so far")
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
	rs := conform.RunSelf(cases, nil)
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
