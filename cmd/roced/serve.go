package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

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
		fmt.Fprintln(w, "usage: roced serve")
		fmt.Fprintln(w, "Shares UDP port 4791 among this user's goroce programs: each has its own QPs")
		fmt.Fprintln(w, "on the same address, and the server relays each the packets of its QPs.")
		fmt.Fprintln(w, "Programs started while it runs use it; GOROCE_SHARE=0 keeps one off it.")
		fmt.Fprintln(w, "Its socket:", endpoint.SharePath())
	}
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
	ln, err := endpoint.ListenShare()
	if err != nil {
		fmt.Fprintln(stderr, "roced serve:", err)
		return 1
	}
	s := share.NewServer(ln, func(a netip.Addr) (nic.Link, error) { return udp.Open(udp.Config{Addr: a}) })
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	fmt.Fprintf(stdout, "roced serve: ready on %s\n", endpoint.SharePath())
	select {
	case <-sig:
		s.Close()
		err = <-done
	case err = <-done:
	}
	os.Remove(endpoint.SharePath())
	st := s.Stats()
	fmt.Fprintf(stdout, "roced serve: %d members joined, %d packets relayed (%d MADs); dropped: %d for no member, %d MADs unclaimed (%d requests refused), %d malformed, %d overflow\n",
		st.Joined, st.Relayed, st.MADs, st.NoMember, st.Unclaimed, st.Refused, st.Malformed, st.Overflow)
	if err != nil {
		fmt.Fprintln(stderr, "roced serve:", err)
		return 1
	}
	return 0
}
