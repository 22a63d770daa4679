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
	var js *bool
	all, rc := readStats("stats", "[-j] [PID]", "Reads the stats sockets in "+endpoint.StatsDir(), args, stdout, stderr,
		func(fs *flag.FlagSet) { js = fs.Bool("j", false, "JSON output, as rdma -j prints it") })
	if all == nil {
		return rc
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

// readStats is what roced stats and roced explain begin with: their flags
// (flags declares them), then at most one operand, a PID, then the stats
// sockets of the running goroce programs (that PID's only). -h prints the
// usage on stdout; a bad flag or operand is one line on stderr. It returns
// nil and the exit status when the command is done.
func readStats(name, synopsis, about string, args []string, stdout, stderr io.Writer, flags func(*flag.FlagSet)) ([]endpoint.StatsReply, int) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	flags(fs)
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "usage: roced %s %s\n", name, synopsis)
		fmt.Fprintln(w, about)
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
	fs.Usage = func() {} // an error is one line; -h prints the usage
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return nil, 0
		}
		fmt.Fprintf(stderr, "roced %s: %v (roced %s -h lists the flags)\n", name, err, name)
		return nil, 2
	}
	pid := 0
	switch fs.NArg() {
	case 0:
	case 1:
		n, err := strconv.Atoi(fs.Arg(0))
		if err != nil || n <= 0 {
			fmt.Fprintf(stderr, "roced %s: %q is not a PID\n", name, fs.Arg(0))
			return nil, 2
		}
		pid = n
	default:
		usage(stderr)
		return nil, 2
	}
	all, err := endpoint.AllStats(pid)
	if err != nil {
		fmt.Fprintf(stderr, "roced %s: %v\n", name, err)
		return nil, 1
	}
	if all == nil {
		all = []endpoint.StatsReply{} // none running: nothing to print, status 0
	}
	return all, 0
}
