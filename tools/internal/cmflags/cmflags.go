// Package cmflags reads what the command lines of librdmacm's examples
// ucmatose (cmatose.c) and udaddy (udaddy.c) share, the way they read it:
// -s (the server; without it the tool serves), -b (the address to bind),
// -f (the address format), -c/-C/-S (counts, as atoi reads them), and
// goroce's --dev, --link and --pcap.
package cmflags

import (
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/goroce/goroce/internal/endpoint"
	"github.com/goroce/goroce/tools/internal/getopt"
	"github.com/goroce/goroce/tools/pingpong"
	"github.com/goroce/goroce/transport"
)

// MaxConnections bounds -c: rxe's max_qp (RXE_MAX_QP, 0x10000), past
// which the tools cannot make their QPs on rxe either.
const MaxConnections = 1 << 16

// Common is the part of the command line the tools share.
type Common struct {
	// Addr is -s: the server the client connects to; unset, this side
	// is the server (the tools' dst_addr decides the role).
	Addr netip.Addr
	// Bind is -b: the address a server listens on (unset: every address,
	// as rdma_getaddrinfo with RAI_PASSIVE and no node gives), or the one
	// a client connects from.
	Bind        netip.Addr
	Connections int // -c (1)
	Count       int // -C: messages each way on each QP (10)
	Size        int // -S: bytes in each (100)
	// Dev is goroce's --dev IFACE|ADDR: the local interface or address
	// (empty: -b, else the interface of the route to the server, or for a
	// server the default route's). The tools have no such flag.
	Dev string
	// Link and Pcap are goroce's --link and --pcap.
	Link, Pcap string
	// Warnings are the lines the tool prints on stderr for an -f or -P it
	// does not know, then goes on; the caller prints them.
	Warnings []string
}

// The tools' defaults for Common.
const (
	DefaultConnections = 1
	DefaultCount       = 10
	DefaultSize        = 100
)

// New returns Common with the tools' defaults.
func New() Common {
	return Common{Connections: DefaultConnections, Count: DefaultCount, Size: DefaultSize, Link: "udp"}
}

// IsServer reports whether this side is the server (no -s).
func (c Common) IsServer() bool { return !c.Addr.IsValid() }

// Options are the getopt options of Common, short then long.
var Options = []getopt.Option{
	{Short: 's', Arg: getopt.RequiredArg}, {Short: 'b', Arg: getopt.RequiredArg},
	{Short: 'f', Arg: getopt.RequiredArg}, {Short: 'c', Arg: getopt.RequiredArg},
	{Short: 'C', Arg: getopt.RequiredArg}, {Short: 'S', Arg: getopt.RequiredArg},
	{Long: "dev", Arg: getopt.RequiredArg}, {Long: "link", Arg: getopt.RequiredArg},
	{Long: "pcap", Arg: getopt.RequiredArg},
}

// errNotMine says Take does not read the option.
var errNotMine = errors.New("not a common option")

// Take reads m if it is one of Options and reports whether it was. -c, -C
// and -S are read as atoi reads them, but one that is no number at all,
// or negative, is refused (the tools would fail to allocate or to make
// their CQs); -C is bounded by what a queue holds. -s and -b take IP
// addresses (the tools also take host names); -f gid (AF_IB) is refused,
// an unknown -f is a warning.
func (c *Common) Take(m getopt.Match) (bool, error) {
	err := c.take(m)
	if errors.Is(err, errNotMine) {
		return false, nil
	}
	return true, err
}

func (c *Common) take(m getopt.Match) error {
	var err error
	switch m.Option.Name() {
	case "s", "b":
		a, err := netip.ParseAddr(m.Value)
		if err != nil {
			return fmt.Errorf("-%s %s: not an IP address", m.Option.Name(), m.Value)
		}
		if m.Option.Short == 's' {
			c.Addr = a.Unmap()
		} else {
			c.Bind = a.Unmap()
		}
	case "f":
		// "ip..." numeric host, "gid..." AF_IB, "name..." names; anything
		// else is a warning and changes nothing.
		switch v := m.Value; {
		case getopt.HasPrefixFold(v, "gid"):
			return fmt.Errorf("-f %s: AF_IB (GID) addressing is not supported by roced: give IP addresses", v)
		case getopt.HasPrefixFold(v, "ip"), getopt.HasPrefixFold(v, "name"):
		default:
			c.Warnings = append(c.Warnings, "Warning: unknown address format")
		}
	case "c":
		c.Connections, err = num(m, "not a number of connections", MaxConnections)
	case "C":
		// Each QP's queues hold -C work requests (the tools size them
		// so): more than a queue may hold cannot be made.
		c.Count, err = num(m, "not a message count", transport.MaxWR)
	case "S":
		c.Size, err = num(m, "not a message size", transport.MaxMsgSize-1)
	case "dev":
		c.Dev = m.Value
	case "link":
		l, err := pingpong.ParseLink(m.Value)
		if err != nil {
			return err
		}
		c.Link = string(l)
	case "pcap":
		c.Pcap = m.Value
	default:
		return errNotMine
	}
	return err
}

func num(m getopt.Match, what string, max int) (int, error) {
	n, ok := getopt.Atoi(m.Value)
	if !ok || n < 0 || n > max {
		return 0, fmt.Errorf("-%s %s: %s (0-%d)", m.Option.Name(), m.Value, what, max)
	}
	return n, nil
}

// Check checks the addresses together, once every option is read.
func (c Common) Check() error {
	switch {
	case c.Addr.IsValid() && c.Addr.IsUnspecified():
		return fmt.Errorf("-s %v: a client needs the server's address", c.Addr)
	case c.Addr.IsValid() && c.Bind.IsValid() && c.Addr.Is4() != c.Bind.Is4():
		return fmt.Errorf("-b %v and -s %v are not of one family", c.Bind, c.Addr)
	case c.Addr.IsValid() && c.Bind.IsValid() && c.Bind.IsUnspecified():
		return fmt.Errorf("-b %v: a client binds one of its addresses", c.Bind)
	}
	return nil
}

// ListenAddr is where a server listens on port: -b, or every address.
// It fails as rdma_bind_addr does when -b is none of dev's addresses.
func (c Common) ListenAddr(dev *transport.Device, port uint16) (netip.AddrPort, error) {
	a := c.Bind
	if !a.IsValid() {
		return netip.AddrPortFrom(netip.IPv4Unspecified(), port), nil
	}
	if _, ok := dev.GIDIndex(a); !ok && !a.IsUnspecified() {
		return netip.AddrPort{}, notLocal(a)
	}
	return netip.AddrPortFrom(a, port), nil
}

// LocalAddr is where a client sends from: -b, or (invalid) the device's
// default address, for the connection manager to choose. It fails as
// rdma_resolve_addr does when -b is none of dev's addresses.
func (c Common) LocalAddr(dev *transport.Device) (netip.AddrPort, error) {
	a := c.Bind
	if !a.IsValid() {
		return netip.AddrPort{}, nil
	}
	if _, ok := dev.GIDIndex(a); !ok {
		return netip.AddrPort{}, notLocal(a)
	}
	return netip.AddrPortFrom(a, 0), nil
}

func notLocal(a netip.Addr) error {
	return fmt.Errorf("Cannot assign requested address (%v is none of the device's addresses)", a)
}

// Parse reads a tool's command line (without the program name): the
// options Common reads (Options) with Take, the tool's own (own) with
// tool, in their order; an operand is refused (the tools ignore them;
// roced says so rather than guess); Check ends it.
func (c *Common) Parse(args []string, own []getopt.Option, tool func(getopt.Match) error) error {
	found, operands, err := getopt.Parse(args, append(append([]getopt.Option(nil), Options...), own...))
	if err != nil {
		return err
	}
	if len(operands) > 0 {
		return fmt.Errorf("unexpected argument %q", operands[0])
	}
	for _, m := range found {
		ok, err := c.Take(m)
		if !ok {
			err = tool(m)
		}
		if err != nil {
			return err
		}
	}
	return c.Check()
}

// Endpoint says which device the tool opens: the server binds -b; the
// client reaches -s from -b if given; --dev, --link and --pcap as goroce's
// other commands take them.
func (c Common) Endpoint() endpoint.Config {
	ec := endpoint.Config{Link: c.Link, GID: -1, Pcap: c.Pcap, Dev: c.Dev}
	if !c.IsServer() {
		ec.Peer = c.Addr.String()
	}
	if ec.Dev == "" && c.Bind.IsValid() && !c.Bind.IsUnspecified() {
		ec.Dev = c.Bind.String()
	}
	return ec
}

// PrintWarnings prints the warnings the tool prints as it reads its
// options, one a line.
func (c Common) PrintWarnings(w io.Writer) {
	for _, l := range c.Warnings {
		fmt.Fprintln(w, l)
	}
}
