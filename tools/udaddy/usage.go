package udaddy

import (
	"fmt"
	"io"

	"github.com/goroce/goroce/tools/internal/cmflags"
)

// Usage prints udaddy's usage text as udaddy prints it (on stdout, for -h
// or any option getopt refuses), argv0 in place of "udaddy", then what
// roced adds.
func Usage(w io.Writer, argv0 string) {
	fmt.Fprintf(w, "usage: %s\n", argv0)
	fmt.Fprint(w, `	[-s server_address]
	[-b bind_address]
	[-f address_format]
	    name, ip, ipv6, or gid
	[-P port_space]
	    udp or ipoib
	[-c connections]
	[-C message_count]
	[-S message_size]
	[-t type_of_service]
	[-p port_space - 0x111 for UDP (default), 0x2 for IPOIB]
`)
	cmflags.Usage(w,
		"  --port=<port>          the port the server listens on and the client resolves",
		"                         (udaddy's is 7174, and it has no flag for it)",
		"  -P ipoib (-p 0x2) is refused: roced serves the UDP port space.")
}
