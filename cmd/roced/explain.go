package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/endpoint"
	"github.com/goroce/goroce/ladder"
	"github.com/goroce/goroce/transport"
)

func init() {
	register("explain", "why the QPs of running goroce programs entered ERR: the cause, its rule, their last packets as a ladder", runExplain)
}

// runExplain prints, for every running goroce process (or the one PID
// names), the QPs its devices saw die (the last 16 of each device): what
// moved each to ERR, the rule that makes that fatal, and the QP's last
// packets drawn as a ladder. Without -a the QPs the program moved to ERR
// itself (a disconnect) or left to the device's close are left out.
func runExplain(args []string, stdout, stderr io.Writer) int {
	var all *bool
	replies, rc := readStats("explain", "[-a] [PID]", "Why the QPs of running goroce programs entered ERR, read from the stats sockets in "+endpoint.StatsDir(),
		args, stdout, stderr, func(fs *flag.FlagSet) {
			all = fs.Bool("a", false, "also the QPs the program moved to ERR itself or closed")
		})
	if replies == nil {
		return rc
	}
	shown := 0
	for _, r := range replies {
		for _, d := range r.Devices {
			for _, death := range d.Deaths {
				if !*all && (death.Cause == transport.CauseModified.String() || death.Cause == transport.CauseDeviceClosed.String()) {
					continue
				}
				shown++
				fmt.Fprintf(stdout, "pid %d %s: %s\n  rule: %s\n", r.PID, d.Name, death.Summary, death.Rule)
				if death.Err != "" {
					fmt.Fprintf(stdout, "  error: %s\n", death.Err)
				}
				fmt.Fprintf(stdout, "  its last %d packets:\n", len(death.Trace))
				var b bytes.Buffer
				if err := traceLadder(death.Trace).WriteText(&b); err != nil {
					fmt.Fprintln(stderr, "roced explain:", err)
					return 1
				}
				for _, line := range strings.SplitAfter(b.String(), "\n") {
					if line != "" {
						fmt.Fprintf(stdout, "    %s", line)
					}
				}
			}
		}
	}
	if shown == 0 {
		fmt.Fprintln(stdout, "no QP has entered ERR (roced explain -a lists those the programs moved there themselves)")
	}
	return 0
}

// traceLadder lays a dead QP's last packets out as a ladder. The trace
// keeps each packet's headers (cut as a capture's snap length cuts them)
// and their order, not their times.
func traceLadder(trace []endpoint.TracedPacket) *ladder.Diagram {
	var l ladder.Ladder
	for i, t := range trace {
		b := make([]byte, max(t.Len, len(t.Head)))
		copy(b, t.Head)
		f, err := bth.DecodeSealed(b)
		if err != nil {
			continue // not a datagram the QP could have sent or taken
		}
		l.Add(ladder.Packet{Num: i + 1, Frame: f, Cut: len(t.Head) < t.Len})
	}
	return l.Diagram()
}
