// Package ucmatose is librdmacm's ucmatose (librdmacm/examples/cmatose.c)
// as a drop-in peer: its flags, its connections through the RDMA
// connection manager (package cm) and its output, so that either end of a
// ucmatose run can be roced.
//
// The exchange (cmatose.c): the server (no -s) listens and accepts -c
// connections; the client (-s ADDR) starts -c connections at once. Each
// side posts -C receives of -S bytes on every connection before it
// accepts or connects. Once all are established the server SENDs -C
// messages of -S bytes on each and waits for their completions, then for
// the client's; the client waits for the server's messages, then SENDs
// its -C replies. The server then disconnects every connection and the
// client waits for that. Both print their progress on stdout and end with
// "test complete" and "return status N".
package ucmatose

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/goroce/goroce/oob/internal/getopt"
	"github.com/goroce/goroce/oob/pingpong"
	"github.com/goroce/goroce/qp"
)

// cmatose.c's defaults.
const (
	DefaultPort        = 7471
	DefaultConnections = 1
	DefaultCount       = 10
	DefaultSize        = 100
	// MaxConnections bounds -c: rxe's max_qp (RXE_MAX_QP, 0x10000), past
	// which cmatose cannot make its QPs on rxe either.
	MaxConnections = 1 << 16
)

// Config is ucmatose's command line.
type Config struct {
	// Addr is -s: the server the client connects to; unset, this side
	// is the server (cmatose.c: dst_addr decides the role).
	Addr netip.Addr
	// Bind is -b: the address a server listens on (unset: every address,
	// as rdma_getaddrinfo with RAI_PASSIVE and no node gives), or the one
	// a client connects from.
	Bind        netip.Addr
	Port        uint16 // -p (7471)
	Connections int    // -c (1)
	Count       int    // -C: messages each way on each connection (10)
	Size        int    // -S: bytes in each (100)
	// Migrate is -m: cmatose moves its IDs to a new event channel before
	// it disconnects. roced has no event channels; it prints the line.
	Migrate bool
	// Dev is goroce's --dev IFACE|ADDR: the local interface or address
	// (empty: -b, else the interface of the route to the server, or for a
	// server the default route's). cmatose has no such flag.
	Dev string
	// Link and Pcap are goroce's --link and --pcap.
	Link, Pcap string
	// Warnings are the lines cmatose prints on stderr for an -f or -P it
	// does not know, then goes on; the caller prints them.
	Warnings []string
}

// IsServer reports whether this side is the server (no -s).
func (c Config) IsServer() bool { return !c.Addr.IsValid() }

// ErrUsage wraps every command-line error; cmatose prints its usage then
// and exits with status 1.
var ErrUsage = errors.New("usage")

// cmatose.c's optstring "s:b:f:P:c:C:S:t:p:a:m" (older versions lack
// -a), then goroce's long options.
var options = []getopt.Option{
	{Short: 's', Arg: getopt.RequiredArg}, {Short: 'b', Arg: getopt.RequiredArg},
	{Short: 'f', Arg: getopt.RequiredArg}, {Short: 'P', Arg: getopt.RequiredArg},
	{Short: 'c', Arg: getopt.RequiredArg}, {Short: 'C', Arg: getopt.RequiredArg},
	{Short: 'S', Arg: getopt.RequiredArg}, {Short: 't', Arg: getopt.RequiredArg},
	{Short: 'p', Arg: getopt.RequiredArg}, {Short: 'a', Arg: getopt.RequiredArg},
	{Short: 'm', Arg: getopt.NoArg},
	{Long: "dev", Arg: getopt.RequiredArg}, {Long: "link", Arg: getopt.RequiredArg},
	{Long: "pcap", Arg: getopt.RequiredArg},
}

// ParseFlags reads ucmatose's command line (without the program name).
// -c, -C and -S are read as atoi reads them, but one that is no number at
// all, or negative, is refused (cmatose would fail to allocate or to make
// its CQs). -s and -b take IP addresses (cmatose also takes host names),
// -p a port number.
func ParseFlags(args []string) (Config, error) {
	c := Config{Port: DefaultPort, Connections: DefaultConnections, Count: DefaultCount,
		Size: DefaultSize, Link: "udp"}
	fail := func(format string, a ...any) (Config, error) {
		return c, fmt.Errorf("%w: "+format, append([]any{ErrUsage}, a...)...)
	}
	found, operands, err := getopt.Parse(args, options)
	if err != nil {
		return fail("%v", err)
	}
	if len(operands) > 0 {
		// cmatose ignores them; roced says so rather than guess.
		return fail("unexpected argument %q", operands[0])
	}
	num := func(m getopt.Match, what string, max int) (int, error) {
		n, ok := getopt.Atoi(m.Value)
		if !ok || n < 0 || n > max {
			return 0, fmt.Errorf("-%s %s: %s (0-%d)", m.Option.Name(), m.Value, what, max)
		}
		return n, nil
	}
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
			// cmatose: "ip..." numeric host, "gid..." AF_IB, "name..."
			// names; anything else is a warning and changes nothing.
			switch v := m.Value; {
			case getopt.HasPrefixFold(v, "gid"):
				return fail("-f %s: AF_IB (GID) addressing is not supported by roced: give IP addresses", v)
			case getopt.HasPrefixFold(v, "ip"), getopt.HasPrefixFold(v, "name"):
			default:
				c.Warnings = append(c.Warnings, "Warning: unknown address format")
			}
		case "P":
			// cmatose: "tcp..." is RDMA_PS_TCP (its default), "ib..."
			// RDMA_PS_IB, anything else a warning that leaves TCP.
			switch v := m.Value; {
			case getopt.HasPrefixFold(v, "tcp"):
			case getopt.HasPrefixFold(v, "ib"):
				return fail("-P %s: roced's connection manager serves the TCP port space only (-P tcp)", v)
			case getopt.HasPrefixFold(v, "udp"):
				// cmatose would warn and run TCP; someone asking for UDP
				// wants UD, which roced's CM does not do (RC only).
				return fail("-P %s: roced's connection manager serves RC connections in the TCP port space only (-P tcp)", v)
			default:
				c.Warnings = append(c.Warnings, "Warning: unknown port space format")
			}
		case "c":
			if c.Connections, err = num(m, "not a number of connections", MaxConnections); err != nil {
				return fail("%v", err)
			}
		case "C":
			// Each QP's queues hold -C work requests (cmatose sizes them
			// so): more than a queue may hold cannot be made.
			if c.Count, err = num(m, "not a message count", qp.MaxWR); err != nil {
				return fail("%v", err)
			}
		case "S":
			if c.Size, err = num(m, "not a message size", qp.MaxMsgSize-1); err != nil {
				return fail("%v", err)
			}
		case "t":
			return fail("-t (type of service) is not supported by roced")
		case "a":
			return fail("-a (ACK timeout) is not supported by roced: its connection manager sets the QP's ACK timeout")
		case "p":
			n, err := strconv.ParseUint(m.Value, 10, 16)
			if err != nil || n == 0 {
				return fail("-p %s: not a port number (1-65535)", m.Value)
			}
			c.Port = uint16(n)
		case "m":
			c.Migrate = true
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
