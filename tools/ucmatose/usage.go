package ucmatose

import (
	"fmt"
	"io"

	"github.com/goroce/goroce/tools/internal/cmflags"
)

// Usage prints cmatose's usage text as ucmatose prints it (on stdout, for
// -h or any option getopt refuses), argv0 in place of "ucmatose", then
// what roced adds.
func Usage(w io.Writer, argv0 string) {
	fmt.Fprintf(w, "usage: %s\n", argv0)
	fmt.Fprint(w, `	[-s server_address]
	[-b bind_address]
	[-f address_format]
	    name, ip, ipv6, or gid
	[-P port_space]
	    tcp or ib
	[-c connections]
	[-C message_count]
	[-S message_size]
	[-t type_of_service]
	[-p port_number]
	[-m(igrate)]
	[-a ack_timeout]
`)
	cmflags.Usage(w,
		"  -P ib and -a are refused: roced serves the TCP port space, and its CM sets the",
		"  ACK timeout; -m prints cmatose's line and moves nothing.")
}
