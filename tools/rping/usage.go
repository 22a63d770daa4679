package rping

import (
	"fmt"
	"io"

	"github.com/goroce/goroce/tools/internal/serverwait"
)

// Usage prints rping's usage text as rping prints it (on stdout, for -h
// or any option getopt refuses), argv0 in place of "rping", with the
// flags roced refuses left out, then what roced adds.
func Usage(w io.Writer, argv0 string) {
	fmt.Fprintf(w, "%s -s [-vVd] [-S size] [-C count] [-a addr] [-p port]\n", argv0)
	fmt.Fprintf(w, "%s -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]\n", argv0)
	fmt.Fprint(w, `	-c		client side
	-I		Source address to bind to for client.
	-s		server side.  To bind to any address with IPv6 use -a ::0
	-v		display ping data to stdout
	-V		validate ping data
	-d		debug printfs
	-S size 	ping data size
	-C count	ping count times
	-a addr		address
	-p port		port
	-q		use self-created, self-modified QP

roced:
  -a and -I take IP addresses (rping also takes host names); -P (persistent
  server) and -t (type of service) are refused.
  --link=<link>          udp (default), afpacket or afxdp
  --pcap=<file>          write every RoCEv2 frame sent and received to <file>
`)
	fmt.Fprintln(w, serverwait.Usage)
}
