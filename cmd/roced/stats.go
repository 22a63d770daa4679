package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/goroce/goroce/internal/endpoint"
)

func init() {
	register("stats", "counters of every running roced instance, as rdma statistic show link prints them", runStats)
}

// runStats prints the counters every running goroce instance serves on its
// stats socket (see internal/endpoint), one line per device in the format
// of "rdma statistic show link rxe0/1": the device and port, then name
// value pairs, engine counters first (rxe's names) and the link's after
// them, then a line per listening CM ID of a program on libgoroce.so;
// -j prints rdma -j's JSON, one object per device.
func runStats(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	js := fs.Bool("j", false, "JSON output, as rdma -j prints it")
	usage := func(w io.Writer) {
		fmt.Fprintln(w, "usage: roced stats [-j] [PID]")
		fmt.Fprintln(w, "Reads the stats sockets in", endpoint.StatsDir())
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
	fs.Usage = func() {} // an error is one line; -h prints the usage
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return 0
		}
		fmt.Fprintf(stderr, "roced stats: %v (roced stats -h lists the flags)\n", err)
		return 2
	}
	pid := 0
	switch fs.NArg() {
	case 0:
	case 1:
		n, err := strconv.Atoi(fs.Arg(0))
		if err != nil || n <= 0 {
			fmt.Fprintf(stderr, "roced stats: %q is not a PID\n", fs.Arg(0))
			return 2
		}
		pid = n
	default:
		usage(stderr)
		return 2
	}
	all, err := endpoint.AllStats(pid)
	if err != nil {
		fmt.Fprintln(stderr, "roced stats:", err)
		return 1
	}
	if *js {
		stdout.Write(statsJSON(all))
		return 0
	}
	for _, r := range all {
		for _, d := range r.Devices {
			var b bytes.Buffer
			fmt.Fprintf(&b, "link %s/%d pid %d netdev %s", d.Name, d.Port, r.PID, d.Netdev)
			for _, c := range d.Counters {
				fmt.Fprintf(&b, " %s %d", c.Name, c.Value)
			}
			b.WriteByte('\n')
			stdout.Write(b.Bytes())
		}
		// The listening CM IDs of a program on libgoroce.so or of a
		// roced tool, as "rdma resource show cm_id" prints the kernel's.
		for _, c := range r.CMIDs {
			fmt.Fprintf(stdout, "link %s/1 cm_id state %s ps %s pid %d netdev %s src-addr %s\n",
				c.Dev, c.State, c.PS, r.PID, c.Netdev, c.Src)
		}
	}
	return 0
}

// statsJSON writes one object per device, the counters as members in
// their order (a map would sort them), as rdma -j does.
func statsJSON(all []endpoint.StatsReply) []byte {
	var b bytes.Buffer
	str := func(s string) []byte { q, _ := json.Marshal(s); return q }
	b.WriteByte('[')
	first := true
	for _, r := range all {
		for _, d := range r.Devices {
			if !first {
				b.WriteByte(',')
			}
			first = false
			fmt.Fprintf(&b, `{"ifname":%s,"port":%d,"pid":%d,"command":%s,"netdev":%s,"link":%s,"gid":%s`,
				str(d.Name), d.Port, r.PID, str(r.Command), str(d.Netdev), str(d.Link), str(d.GID))
			for _, c := range d.Counters {
				fmt.Fprintf(&b, ",%s:%d", str(c.Name), c.Value)
			}
			b.WriteByte('}')
		}
	}
	b.WriteString("]\n")
	return b.Bytes()
}
