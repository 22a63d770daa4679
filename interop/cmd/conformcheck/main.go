// Command conformcheck holds a roced conform run against the rxe lab to
// the table the README publishes (interop/README.md, "rxe's
// conformance table"): every case must have the verdict published for
// that guest. interop-lab.sh runs it after roced conform on each guest.
//
//	conformcheck -readme interop/README.md -suite bookworm bookworm-conform.json
//
// It prints one line per case that differs and a summary, and exits 0
// when none differs, 1 when one does, 2 on a usage or input error.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/goroce/goroce/interop"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conformcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	readme := fs.String("readme", "interop/README.md", "the README with the published table")
	suite := fs.String("suite", "", "the guest the run was against: bookworm or trixie")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 || !slices.Contains(interop.ConformSuites, *suite) {
		fmt.Fprintln(stderr, "usage: conformcheck [-readme FILE] -suite bookworm|trixie REPORT.json")
		return 2
	}
	f, err := os.Open(*readme)
	if err != nil {
		fmt.Fprintln(stderr, "conformcheck:", err)
		return 2
	}
	t, err := interop.ParseConformTable(f)
	f.Close()
	if err != nil {
		fmt.Fprintln(stderr, "conformcheck:", err)
		return 2
	}
	rs, err := interop.ReadConformJSON(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, "conformcheck:", err)
		return 2
	}
	probs := interop.CheckConform(t, *suite, rs)
	for _, p := range probs {
		fmt.Fprintln(stdout, "DIFFERS", p)
	}
	fmt.Fprintf(stdout, "conform[%s]: %d cases run, %d differences from the published table\n", *suite, len(rs), len(probs))
	if len(probs) > 0 {
		return 1
	}
	return 0
}
