package rdmaserver

import (
	"fmt"
	"io"

	"github.com/goroce/goroce/tools/internal/serverwait"
)

// Usage prints the example's usage text as rdma_server and rdma_client
// print it (on stdout, for -h or any option getopt refuses), argv0 in
// place of the program's name, then what roced adds.
func Usage(w io.Writer, server bool, argv0 string) {
	fmt.Fprintf(w, "usage: %s\n\t[-s server_address]\n\t[-p port_number]\n", argv0)
	fmt.Fprint(w, `
roced:
  -s takes an IP address and -p a port number (the examples also take names).
  --dev=<if|addr>        the local interface or address (default: the route to
                         -s; for a server, -s or the default route's interface)
  --link=<link>          udp (default), afpacket or afxdp
  --pcap=<file>          write every RoCEv2 frame sent and received to <file>
`)
	if server {
		fmt.Fprintln(w, "  --accept-delay=<d>     hold each connection request this long before accepting")
		fmt.Fprintln(w, "                         it (such as 8s), so that the CM's MRA can be seen")
	} else {
		fmt.Fprintln(w, serverwait.Usage)
	}
}
