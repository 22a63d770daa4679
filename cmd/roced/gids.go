package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"

	"github.com/goroce/goroce/nic"
)

func init() {
	register("gids", "list GID tables, indexed as Linux rxe indexes them", runGIDs)
}

// runGIDs prints each Ethernet interface's GID table (or one interface's,
// named or found by one of its addresses) in ibv_devinfo -v's format, with
// the netdev as show_gids adds it, so "-g N" can be read off as on rxe.
func runGIDs(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gids", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dev := fs.String("d", "", "interface name or one of its addresses (default: every Ethernet interface)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintln(stderr, "usage: roced gids [-d IFACE|ADDR]")
		return 2
	}
	var names []string
	switch a, err := netip.ParseAddr(*dev); {
	case *dev == "":
		ifs, err := net.Interfaces()
		if err != nil {
			fmt.Fprintln(stderr, "roced gids:", err)
			return 1
		}
		for _, i := range ifs {
			if len(i.HardwareAddr) == 6 { // Ethernet: what rxe can sit on
				names = append(names, i.Name)
			}
		}
	case err == nil:
		n, err := nic.NetdevOf(a.Unmap())
		if err != nil {
			fmt.Fprintln(stderr, "roced gids:", err)
			return 1
		}
		names = []string{n}
	default:
		names = []string{*dev}
	}
	for _, n := range names {
		tab, err := nic.GIDTable(n)
		if err != nil {
			fmt.Fprintln(stderr, "roced gids:", err)
			return 1
		}
		for _, g := range tab {
			fmt.Fprintf(stdout, "GID[%3d]: %s, RoCE v2  %s\n", g.Index, g, g.Netdev)
		}
	}
	return 0
}
