// Command roced is goroce's command-line tool: an RDMA peer for hosts with
// no RDMA NIC, speaking RoCEv2 to HCAs and Linux rxe.
//
// Usage:
//
//	roced COMMAND [flags] [args]
//
// Run `roced help` for the list of commands.
//
// GOROCE_CPUPROFILE=FILE writes a CPU profile of the whole run to FILE
// (go tool pprof reads it): for a roced where no debugger reaches, such
// as inside the lab guest.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"sort"
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
	os.Exit(profiled(os.Getenv("GOROCE_CPUPROFILE"), os.Stderr, func() int { return run(os.Args[1:], os.Stdout, os.Stderr) }))
}

// profiled runs fn under a CPU profile written to file (empty: none).
// A profile that cannot be started is reported and the run goes on.
func profiled(file string, stderr io.Writer, fn func() int) int {
	if file == "" {
		return fn()
	}
	f, err := os.Create(file)
	if err == nil {
		if err = pprof.StartCPUProfile(f); err != nil {
			f.Close()
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "roced: GOROCE_CPUPROFILE: %v\n", err)
		return fn()
	}
	code := fn()
	pprof.StopCPUProfile()
	if err := f.Close(); err != nil {
		fmt.Fprintf(stderr, "roced: GOROCE_CPUPROFILE: %v\n", err)
	}
	return code
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
