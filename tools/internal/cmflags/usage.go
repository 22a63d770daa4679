package cmflags

import (
	"fmt"
	"io"

	"github.com/goroce/goroce/tools/internal/serverwait"
)

// Usage prints what roced adds to the usage texts of ucmatose and udaddy
// after the tool's own lines: the flags of Common only roced has, the
// tool's own lines (extra), and how long a client waits for its server.
func Usage(w io.Writer, extra ...string) {
	fmt.Fprint(w, `
roced:
  -s and -b take IP addresses (the tools also take names); -f gid and -t are refused.
  --dev=<if|addr>        the local interface or address (default: -b, else the
                         route to -s; for a server, the default route's interface)
  --link=<link>          udp (default), afpacket or afxdp
  --pcap=<file>          write every RoCEv2 frame sent and received to <file>
`)
	for _, l := range extra {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w, serverwait.Usage)
}
