package main

import (
	"flag"
	"fmt"
	"io"
	"net"

	"github.com/goroce/goroce/internal/endpoint"
)

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
	fs.SetOutput(stderr)
	dev := fs.String("d", "", "interface name or local address, as the tools' -d (default: every Ethernet interface)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintln(stderr, "usage: roced gids [-d IFACE|ADDR]")
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
