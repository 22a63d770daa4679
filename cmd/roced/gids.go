package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"

	"github.com/goroce/goroce/internal/endpoint"
)

// gidsUsage is the first line of roced gids -h.
const gidsUsage = "usage: roced gids [-d IFACE|ADDR]\nLists the GID table of each Ethernet interface (or of -d's) as ibv_devinfo -v does,\nindexed as Linux rxe indexes it: the -g/-x index the tools take."

func init() {
	register("gids", "list GID tables, indexed as Linux rxe indexes them", runGIDs)
}

// runGIDs prints each Ethernet interface's GID table (or the table of the
// device -d names, exactly as the tools resolve -d) in ibv_devinfo -v's
// format, with the netdev as show_gids adds it, so "-g N" can be read off
// as on rxe. Like ibv_devinfo, it leaves out an empty slot (the default
// GID of an interface without a MAC).
func runGIDs(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gids", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dev := fs.String("d", "", "interface name or local `address`, as the tools' -d (default: every Ethernet interface)")
	fs.Usage = func() {} // an error is one line; -h prints the usage below
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, gidsUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "roced gids: %v (roced gids -h lists the flags)\n", err)
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "roced gids: unexpected argument %q\n%s\n", fs.Arg(0), gidsUsage)
		return 2
	}
	names := []string{*dev}
	if *dev == "" {
		ifs, err := net.Interfaces()
		if err != nil {
			fmt.Fprintln(stderr, "roced gids:", err)
			return 1
		}
		names = nil
		for _, i := range ifs {
			if len(i.HardwareAddr) == 6 { // Ethernet: what rxe can sit on
				names = append(names, i.Name)
			}
		}
	}
	for _, n := range names {
		d, err := endpoint.LookupDev(n)
		if err != nil {
			fmt.Fprintln(stderr, "roced gids:", err)
			return 1
		}
		for _, g := range d.GIDs {
			if !g.Empty() {
				fmt.Fprintf(stdout, "GID[%3d]: %s, RoCE v2  %s\n", g.Index, g, g.Netdev)
			}
		}
	}
	return 0
}
