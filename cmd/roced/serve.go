package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/endpoint"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/udp"
	"github.com/goroce/goroce/share"
)

func init() {
	register("serve", "share port 4791 among this user's goroce programs, as one rxe device serves every process of a host", runServe)
}

// runServe runs the share server (package share) until SIGINT or SIGTERM:
// every goroce program of the user started while it runs (roced's tools,
// programs on libgoroce.so, Go programs through internal/endpoint) opens
// its device through it, so that any number of them use one address at
// once. It prints one line when it is ready, and its counters when it
// stops.
func runServe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	usage := func(w io.Writer) {
		fmt.Fprintln(w, "usage: roced serve [--background]")
		fmt.Fprintln(w, "Shares UDP port 4791 among this user's goroce programs: each has its own QPs")
		fmt.Fprintln(w, "on the same address, and the server relays each the packets of its QPs.")
		fmt.Fprintln(w, "Programs started while it runs use it; GOROCE_SHARE=0 keeps one off it.")
		if path, err := endpoint.SharePath(); err == nil {
			fmt.Fprintln(w, "Its socket (one per network namespace):", path)
		} else {
			fmt.Fprintln(w, "Its socket: unknown here:", err)
		}
		fmt.Fprintln(w, "  --background  run detached; return once it listens, printing its PID (kill PID stops it)")
		fmt.Fprintln(w, "  --auto        as --background, joining the port of a process that holds it (its owner),")
		fmt.Fprintln(w, "                and ending when its last member leaves: what a goroce program starts")
		fmt.Fprintln(w, "                when it finds the port taken")
	}
	background := fs.Bool("background", false, "")
	auto := fs.Bool("auto", false, "")
	fs.Usage = func() {} // an error is one line; -h prints the usage
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return 0
		}
		fmt.Fprintf(stderr, "roced serve: %v (roced serve -h lists the flags)\n", err)
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "roced serve: takes no operand, not %q\n", fs.Arg(0))
		return 2
	}
	child := os.Getenv(autoEnv) == "1"
	os.Unsetenv(autoEnv)
	if (*background || *auto) && !child {
		return serveBackground(*auto, stdout, stderr)
	}
	ln, err := endpoint.ListenShare()
	if err != nil {
		fmt.Fprintln(stderr, "roced serve:", err)
		return 1
	}
	// The server joins the SO_REUSEPORT group of a process that holds the
	// port (its owner, udp.Config.Owner), whose steering program gives it
	// the packets of its members' QPs.
	s := share.NewServer(ln, func(a netip.Addr) (nic.Link, error) { return udp.Open(udp.Config{Addr: a, Join: true}) })
	var idle <-chan struct{}
	if child {
		s.EndWhenIdle()
		idle = s.Idle()
		// The program that started it joins next; one that died first
		// must not leave a server behind.
		nobody := make(chan struct{})
		time.AfterFunc(autoFirstJoin, func() {
			if s.Stats().Joined == 0 {
				close(nobody)
			}
		})
		idle = anyOf(idle, nobody)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	path := ln.Addr().String()
	ready := fmt.Sprintf("roced serve: ready on %s", path)
	if f := readyFile(); f != nil {
		// A --background parent waits for this line and prints it.
		fmt.Fprintln(f, ready)
		f.Close()
	} else {
		fmt.Fprintln(stdout, ready)
	}
	select {
	case <-sig:
		s.Close()
		err = <-done
	case <-idle:
		s.Close()
		err = <-done
	case err = <-done:
		s.Close()
	}
	st := s.Stats()
	fmt.Fprintf(stdout, "roced serve: %d members joined, %d packets relayed (%d MADs); dropped: %d for no member, %d MADs unclaimed (%d requests refused), %d malformed, %d overflow\n",
		st.Joined, st.Relayed, st.MADs, st.NoMember, st.Unclaimed, st.Refused, st.Malformed, st.Overflow)
	if err != nil {
		fmt.Fprintln(stderr, "roced serve:", err)
		return 1
	}
	return 0
}

// autoEnv marks the server process that --auto starts.
const autoEnv = "ROCED_SERVE_AUTO"

// autoFirstJoin is how long an auto server waits for its first member.
const autoFirstJoin = 30 * time.Second

// anyOf is closed when a or b is.
func anyOf(a, b <-chan struct{}) <-chan struct{} {
	c := make(chan struct{})
	go func() {
		select {
		case <-a:
		case <-b:
		}
		close(c)
	}()
	return c
}

// readyEnv names the descriptor on which a server started by
// --background tells its parent it is ready.
const readyEnv = "ROCED_SERVE_READY_FD"

// readyFile is the descriptor readyEnv names, taken once (a program the
// server starts must not inherit it), or nil.
func readyFile() *os.File {
	v, ok := os.LookupEnv(readyEnv)
	if !ok {
		return nil
	}
	os.Unsetenv(readyEnv)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil
	}
	return os.NewFile(uintptr(fd), "ready")
}

// serveBackground starts the server as a process of its own, in a session
// of its own (a terminal's ^C to the shell's job does not reach it), and
// returns once it listens: a script's next line then finds it, where
// "roced serve &" races the programs started after it, which bind the
// port themselves when no server answers yet. The server keeps this
// process's standard output and error (its counters at SIGTERM go
// there).
//
// With auto, the server is an auto one (autoEnv) and writes nothing: it is
// started by a goroce program (internal/endpoint), whose standard output
// is the program's own.
func serveBackground(auto bool, stdout, stderr io.Writer) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "roced serve:", err)
		return 1
	}
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Fprintln(stderr, "roced serve:", err)
		return 1
	}
	cmd := exec.Command(exe, "serve")
	cmd.Env = append(os.Environ(), readyEnv+"=3")
	cmd.ExtraFiles = []*os.File{w}
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if auto {
		// Not the program's own output, nor a pipe that would outlive
		// this call: the caller learns only whether it is ready.
		cmd.Env = append(cmd.Env, autoEnv+"=1")
		cmd.Stdout, cmd.Stderr = nil, nil
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(stderr, "roced serve:", err)
		return 1
	}
	w.Close()
	b, _ := io.ReadAll(r) // the ready line, or nothing when it ended first
	r.Close()
	if line := strings.TrimSpace(string(b)); strings.HasPrefix(line, "roced serve: ready") {
		fmt.Fprintf(stdout, "%s (pid %d)\n", line, cmd.Process.Pid)
		cmd.Process.Release()
		return 0
	}
	err = cmd.Wait() // it said why on the standard error it shares
	fmt.Fprintf(stderr, "roced serve: the server ended before it was ready (%v)\n", err)
	return 1
}
