// Package udaddy is librdmacm's udaddy (librdmacm/examples/udaddy.c) as a
// drop-in peer: its flags, its UD services resolved through the RDMA
// connection manager's UDP port space (package cm: SIDR_REQ and SIDR_REP)
// and its output, so that either end of a udaddy run can be roced.
//
// The exchange (udaddy.c): the server (no -s) listens on port 7174 of the
// UDP port space; for each of -c SIDR requests it makes a UD QP (Q_Key
// 0x01234567), posts -C receives of -S bytes plus the 40-byte GRH, and
// accepts the request with the QP's number. The client resolves -c
// services at once, each with its own QP and -C receives posted before its
// SIDR_REQ goes; once all are resolved it SENDs with immediate -C
// messages of -S bytes on each, the immediate being its QPN, and waits
// for -C replies. The server waits for the -C messages of each QP; the
// first one's GRH and immediate name the client's address and QP, to
// which it SENDs its -C replies (immediate: its own QPN) and waits for
// their completions. Both print their progress on stdout and end with
// "test complete" and "return status N". UD is unreliable: a datagram
// lost leaves the receiver waiting, in udaddy as here.
package udaddy

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/oob/internal/getopt"
	"github.com/goroce/goroce/oob/pingpong"
	"github.com/goroce/goroce/qp"
)

// udaddy.c's defaults.
const (
	// Port is udaddy's fixed port ("7174"; it has no flag to change it).
	Port               = 7174
	DefaultConnections = 1
	DefaultCount       = 10
	DefaultSize        = 100
	// MaxConnections bounds -c: rxe's max_qp (RXE_MAX_QP, 0x10000), past
	// which udaddy cannot make its QPs on rxe either.
	MaxConnections = 1 << 16
)

// Config is udaddy's command line.
type Config struct {
	// Addr is -s: the server the client resolves; unset, this side is
	// the server (udaddy.c: dst_addr decides the role).
	Addr netip.Addr
	// Bind is -b: the address a server listens on (unset: every address,
	// as rdma_getaddrinfo with RAI_PASSIVE and no node gives), or the one
	// a client sends from.
	Bind        netip.Addr
	Connections int // -c (1)
	Count       int // -C: messages each way on each QP (10)
	Size        int // -S: bytes in each (100)
	// Port is the port of the UDP port space the server listens on and
	// the client resolves: udaddy's 7174. roced's --port changes it (for
	// tests that must not meet another udaddy); udaddy has no such flag.
	Port uint16
	// Dev is goroce's --dev IFACE|ADDR: the local interface or address
	// (empty: -b, else the interface of the route to the server, or for a
	// server the default route's). udaddy has no such flag.
	Dev string
	// Link and Pcap are goroce's --link and --pcap.
	Link, Pcap string
	// Warnings are the lines udaddy prints on stderr for an -f or -P it
	// does not know, then goes on; the caller prints them.
	Warnings []string
}

// IsServer reports whether this side is the server (no -s).
func (c Config) IsServer() bool { return !c.Addr.IsValid() }

// ErrUsage wraps every command-line error; udaddy prints its usage then
// and exits with status 1.
var ErrUsage = errors.New("usage")

// udaddy.c's optstring "s:b:c:C:S:t:p:P:f:", then goroce's long options.
var options = []getopt.Option{
	{Short: 's', Arg: getopt.RequiredArg}, {Short: 'b', Arg: getopt.RequiredArg},
	{Short: 'c', Arg: getopt.RequiredArg}, {Short: 'C', Arg: getopt.RequiredArg},
	{Short: 'S', Arg: getopt.RequiredArg}, {Short: 't', Arg: getopt.RequiredArg},
	{Short: 'p', Arg: getopt.RequiredArg}, {Short: 'P', Arg: getopt.RequiredArg},
	{Short: 'f', Arg: getopt.RequiredArg},
	{Long: "port", Arg: getopt.RequiredArg},
	{Long: "dev", Arg: getopt.RequiredArg}, {Long: "link", Arg: getopt.RequiredArg},
	{Long: "pcap", Arg: getopt.RequiredArg},
}

// ParseFlags reads udaddy's command line (without the program name). -c,
// -C and -S are read as atoi reads them, but one that is no number at
// all, or negative, is refused (udaddy would fail to allocate or to make
// its CQs). -s and -b take IP addresses (udaddy also takes host names).
func ParseFlags(args []string) (Config, error) {
	c := Config{Connections: DefaultConnections, Count: DefaultCount, Size: DefaultSize, Port: Port, Link: "udp"}
	fail := func(format string, a ...any) (Config, error) {
		return c, fmt.Errorf("%w: "+format, append([]any{ErrUsage}, a...)...)
	}
	found, operands, err := getopt.Parse(args, options)
	if err != nil {
		return fail("%v", err)
	}
	if len(operands) > 0 {
		// udaddy ignores them; roced says so rather than guess.
		return fail("unexpected argument %q", operands[0])
	}
	num := func(m getopt.Match, what string, max int) (int, error) {
		n, ok := getopt.Atoi(m.Value)
		if !ok || n < 0 || n > max {
			return 0, fmt.Errorf("-%s %s: %s (0-%d)", m.Option.Name(), m.Value, what, max)
		}
		return n, nil
	}
	const ipoib = "-%s %s: the IPoIB port space is InfiniBand's; roced serves the UDP port space (-P udp, -p 0x111)"
	for _, m := range found {
		switch m.Option.Name() {
		case "s", "b":
			a, err := netip.ParseAddr(m.Value)
			if err != nil {
				return fail("-%s %s: not an IP address", m.Option.Name(), m.Value)
			}
			if m.Option.Short == 's' {
				c.Addr = a.Unmap()
			} else {
				c.Bind = a.Unmap()
			}
		case "f":
			// udaddy: "ip..." numeric host, "gid..." AF_IB, "name..."
			// names; anything else is a warning and changes nothing.
			switch v := m.Value; {
			case getopt.HasPrefixFold(v, "gid"):
				return fail("-f %s: AF_IB (GID) addressing is not supported by roced: give IP addresses", v)
			case getopt.HasPrefixFold(v, "ip"), getopt.HasPrefixFold(v, "name"):
			default:
				c.Warnings = append(c.Warnings, "Warning: unknown address format")
			}
		case "P":
			// udaddy: "ipoib..." RDMA_PS_IPOIB; "udp..." its default;
			// anything else a warning that leaves UDP.
			switch v := m.Value; {
			case getopt.HasPrefixFold(v, "ipoib"):
				return fail(ipoib, "P", v)
			case getopt.HasPrefixFold(v, "udp"):
			default:
				c.Warnings = append(c.Warnings, "Warning: unknown port space format")
			}
		case "p":
			// The port space as a number (strtol(optarg, NULL, 0)).
			ps, _ := getopt.Strtol(m.Value)
			switch mad.PortSpace(ps) {
			case mad.PortSpaceUDP:
			case mad.PortSpaceIPoIB:
				return fail(ipoib, "p", m.Value)
			default:
				return fail("-p %s: not a port space of UD (0x111 for UDP)", m.Value)
			}
		case "c":
			if c.Connections, err = num(m, "not a number of connections", MaxConnections); err != nil {
				return fail("%v", err)
			}
		case "C":
			// Each QP's queues hold -C work requests (udaddy sizes them
			// so): more than a queue may hold cannot be made.
			if c.Count, err = num(m, "not a message count", qp.MaxWR); err != nil {
				return fail("%v", err)
			}
		case "S":
			// A UD message is one packet: udaddy refuses one larger than
			// the active MTU once it knows the device (as does roced).
			if c.Size, err = num(m, "not a message size", qp.MaxMsgSize-1); err != nil {
				return fail("%v", err)
			}
		case "t":
			return fail("-t (type of service) is not supported by roced")
		case "port":
			n, ok := getopt.Atoi(m.Value)
			if !ok || n <= 0 || n > 0xffff {
				return fail("--port %s: not a port number (1-65535)", m.Value)
			}
			c.Port = uint16(n)
		case "dev":
			c.Dev = m.Value
		case "link":
			l, err := pingpong.ParseLink(m.Value)
			if err != nil {
				return fail("%v", err)
			}
			c.Link = string(l)
		case "pcap":
			c.Pcap = m.Value
		}
	}
	switch {
	case c.Addr.IsValid() && c.Addr.IsUnspecified():
		return fail("-s %v: a client needs the server's address", c.Addr)
	case c.Addr.IsValid() && c.Bind.IsValid() && c.Addr.Is4() != c.Bind.Is4():
		return fail("-b %v and -s %v are not of one family", c.Bind, c.Addr)
	case c.Addr.IsValid() && c.Bind.IsValid() && c.Bind.IsUnspecified():
		return fail("-b %v: a client binds one of its addresses", c.Bind)
	}
	return c, nil
}
