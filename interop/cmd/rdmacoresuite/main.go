// Command rdmacoresuite prints the shell script that runs rdma-core's
// test suite on a device (interop.RdmaCoreSuiteScript), so that
// interop/rdmacore-suite.sh runs in the lab guest the very script the
// interop stage and TestRdmaCoreSuite run:
//
//	rdmacoresuite script rxe0
//
// A bad operand is a one-line error and exit status 2.
package main

import (
	"fmt"
	"io"
	"os"
	"regexp"

	"github.com/goroce/goroce/interop"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// devRe is what a device name may be: it lands in a shell script.
var devRe = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 || args[0] != "script" || !devRe.MatchString(args[1]) {
		fmt.Fprintln(stderr, "usage: rdmacoresuite script DEVICE (DEVICE: letters, digits, _)")
		return 2
	}
	fmt.Fprintln(stdout, interop.RdmaCoreSuiteScript(args[1]))
	return 0
}
