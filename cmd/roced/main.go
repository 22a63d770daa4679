// Command roced is goroce's command-line tool: an RDMA peer for hosts with
// no RDMA NIC, speaking RoCEv2 to HCAs and Linux rxe.
//
// Usage:
//
//	roced COMMAND [flags] [args]
//
// Run `roced help` for the list of commands.
//
// GOROCE_CPUPROFILE=FILE writes a CPU profile of the whole run to FILE,
// GOROCE_BLOCKPROFILE=FILE a profile of where it waited (internal/profile;
// go tool pprof reads both): for a roced where no debugger reaches, such
// as inside the lab guest.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/goroce/goroce/internal/profile"
)

// command is one roced subcommand.
type command struct {
	summary string
	// run executes the command with the arguments after its name and
	// returns the process exit status.
	run func(args []string, stdout, stderr io.Writer) int
}

// commands holds every subcommand; each file registers its own in init.
var commands = map[string]command{}

func register(name, summary string, run func(args []string, stdout, stderr io.Writer) int) {
	if _, dup := commands[name]; dup {
		panic("roced: command registered twice: " + name)
	}
	commands[name] = command{summary: summary, run: run}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: roced COMMAND [flags] [args]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-14s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'roced COMMAND -h' for a command's flags.")
}

func main() {
	os.Exit(runProfiled(os.Args[1:], profile.FromEnv(), os.Stdout, os.Stderr))
}

// runProfiled runs the command under the profiles e asks for.
func runProfiled(args []string, e profile.Env, stdout, stderr io.Writer) int {
	stop := profile.Start(e, "roced", stderr)
	defer stop()
	return run(args, stdout, stderr)
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "roced: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	return c.run(args[1:], stdout, stderr)
}
