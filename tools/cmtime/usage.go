package cmtime

import (
	"fmt"
	"io"

	"github.com/goroce/goroce/tools/internal/serverwait"
)

// Usage prints cmtime's usage text (on stdout, for -h or any option
// getopt refuses) as rdma-core 56's cmtime prints it, the union of 44's
// and 56's flags, argv0 in place of "cmtime", then what roced adds.
func Usage(w io.Writer, argv0 string) {
	fmt.Fprintf(w, "usage: %s\n", argv0)
	fmt.Fprint(w, `	[-S] (run socket baseline test)
	[-s server_address]
	[-b bind_address]
	[-c connections]
	[-p port_number]
	[-q base_qpn]
	[-m mimic_qp_delay_us]
	[-n num_threads]
	[-r retries]
	[-t timeout_ms]

roced:
  -s and -b take IP addresses (cmtime also takes names); -S, -q, -m and -n are
  rdma-core 56's; the multi-peer cmtime's -B, -C, -L and -P are refused.
  --rdma-core=44|56|auto the cmtime whose exchange to speak (auto: a server goes by
                         what arrives first, a client by whether the TCP socket
                         answers)
  --dev=<if|addr>        the local interface or address
  --link=<link>          udp (default), afpacket or afxdp
  --pcap=<file>          write every RoCEv2 frame sent and received to <file>
`)
	fmt.Fprintln(w, serverwait.Usage)
	fmt.Fprintln(w, "                         (a client waits so with --rdma-core 56 only: under auto")
	fmt.Fprintln(w, "                         a refused socket means a 44 server)")
}
