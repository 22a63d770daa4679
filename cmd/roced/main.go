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
	"runtime"
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

// oneProc names the commands that run the Go runtime on one P unless
// GOMAXPROCS says otherwise: the latency tests, one QP's ping-pong, where
// the receive goroutine and the program take turns on one thread (the
// program's reply taking the ACK along, as the kernel's own ping-pong
// runs on one). With a second P the runtime wakes and spins a second
// thread at each hand-off between them, and two such processes on a
// 2-core host then keep four threads runnable on two cores: roced
// send_lat 64 B across a veth, p99 120-157 µs with two Ps, 44-60 with
// one, t_typical 12.1-12.4 and 11.8-12.0.
var oneProc = map[string]bool{}

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
	if n := procsFor(os.Args[1:], os.Getenv("GOMAXPROCS")); n > 0 {
		runtime.GOMAXPROCS(n)
	}
	os.Exit(runProfiled(os.Args[1:], profile.FromEnv(), os.Stdout, os.Stderr))
}

// procsFor is the GOMAXPROCS the command in args runs with, given the
// environment's GOMAXPROCS value (env): 1 for the commands of oneProc,
// unless env sets one; 0, the runtime's own choice, for the others.
func procsFor(args []string, env string) int {
	if len(args) == 0 || env != "" || !oneProc[args[0]] {
		return 0
	}
	return 1
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
