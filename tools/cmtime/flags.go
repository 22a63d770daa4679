// Package cmtime is librdmacm's cmtime (librdmacm/examples/cmtime.c) as a
// drop-in peer: its flags, its connection-setup steps timed on goroce's
// RDMA connection manager (package cm), and its report, so that either end
// of a cmtime run can be roced.
//
// cmtime changed across rdma-core releases, and roced speaks both that the
// lab's guests run:
//
//   - rdma-core 44 (Debian bookworm), "legacy" here: no out-of-band
//     socket. The server (no -s) listens on port -p of the RDMA CM's TCP
//     port space, accepts every connection, disconnects and destroys it
//     when the client disconnects, prints nothing and runs until it is
//     killed. The client makes -c connections step by step (create id,
//     bind, resolve addr, resolve route, create qp, connect, disconnect,
//     destroy) and prints one table in milliseconds.
//   - rdma-core 56 (Debian trixie): both sides meet on a TCP socket on the
//     same port number first, and step through three rounds in lockstep
//     over it (a one-connection warm-up, -c connections with QPs, -c
//     without), each side printing a table in microseconds for the last
//     two. -S instead times -c plain TCP connections.
//
// A roced server tells the two apart by what comes first: a TCP
// connection (56) or an RDMA CM connection (44). A roced client tries the
// TCP socket and, when nothing listens there, speaks 44; --rdma-core
// chooses instead.
package cmtime

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/goroce/goroce/tools/internal/getopt"
	"github.com/goroce/goroce/tools/pingpong"
)

// cmtime.c's defaults.
const (
	DefaultPort        = 7471
	DefaultConnections = 100
	DefaultBaseQPN     = 1000
	DefaultRetries     = 2
	DefaultTimeoutMS   = 2000
	// MaxConnections bounds -c: rxe's max_qp (RXE_MAX_QP, 0x10000), past
	// which cmtime cannot make its QPs on rxe either.
	MaxConnections = 1 << 16
	// MaxThreads bounds -n.
	MaxThreads = 1024
)

// Version is the rdma-core release whose cmtime a run speaks.
type Version int

// The versions roced speaks; Auto decides at run time (package doc).
const (
	Auto Version = 0
	V44  Version = 44
	V56  Version = 56
)

// Config is cmtime's command line.
type Config struct {
	// Addr is -s: the server the client connects to; unset, this side is
	// the server (cmtime.c: dst_addr decides the role).
	Addr netip.Addr
	// Bind is -b: the address a server listens on (unset: every
	// address), or the one a client binds its IDs to (its "bind addr"
	// step; unset, the step is skipped).
	Bind        netip.Addr
	Port        uint16 // -p (7471): the RDMA CM port, and (56) the TCP socket's
	Connections int    // -c (100)
	Retries     int    // -r (2): the resolutions' retries; 44's REQ retry count
	TimeoutMS   int    // -t (2000): the resolutions' timeout
	// BaseQPN is -q (1000): the QPN the tests without QPs start from; 0
	// gives QPs to those tests too, as in cmtime.
	BaseQPN uint32
	// MimicDelay is -m (µs): the QP test makes no QPs and sleeps this
	// long instead of each QP verb.
	MimicDelay int
	Mimic      bool // -m was given
	Threads    int  // -n (1): the work queue's threads
	Socket     bool // -S: time plain TCP connections instead
	// Version is --rdma-core (goroce's): 44, 56 or Auto.
	Version Version
	// Dev, Link and Pcap are goroce's --dev, --link and --pcap.
	Dev, Link, Pcap string
	// only56 is the first flag given that rdma-core 44's cmtime lacks: a
	// client that finds a 44 server refuses to run with it.
	only56 string
}

// IsServer reports whether this side is the server (no -s).
func (c Config) IsServer() bool { return !c.Addr.IsValid() }

// ErrUsage wraps every command-line error; cmtime prints its usage then
// and exits with status 1.
var ErrUsage = errors.New("usage")

// The union of cmtime.c's optstrings: 44 has "s:b:c:p:r:t:", 56
// "s:b:c:m:n:p:q:r:St:"; later releases' multi-peer cmtime adds
// B:, C:, L and P:, which roced knows only to refuse. Then goroce's long
// options.
var options = []getopt.Option{
	{Short: 's', Arg: getopt.RequiredArg}, {Short: 'b', Arg: getopt.RequiredArg},
	{Short: 'c', Arg: getopt.RequiredArg}, {Short: 'm', Arg: getopt.RequiredArg},
	{Short: 'n', Arg: getopt.RequiredArg}, {Short: 'p', Arg: getopt.RequiredArg},
	{Short: 'q', Arg: getopt.RequiredArg}, {Short: 'r', Arg: getopt.RequiredArg},
	{Short: 'S', Arg: getopt.NoArg}, {Short: 't', Arg: getopt.RequiredArg},
	{Short: 'B', Arg: getopt.RequiredArg}, {Short: 'C', Arg: getopt.RequiredArg},
	{Short: 'L', Arg: getopt.NoArg}, {Short: 'P', Arg: getopt.RequiredArg},
	{Long: "rdma-core", Arg: getopt.RequiredArg},
	{Long: "dev", Arg: getopt.RequiredArg}, {Long: "link", Arg: getopt.RequiredArg},
	{Long: "pcap", Arg: getopt.RequiredArg},
}

// ParseFlags reads cmtime's command line (without the program name).
// Numbers are read as atoi reads them, but one that is no number at all,
// or out of range, is refused (cmtime would divide by a zero -c, or fail
// to allocate). -s and -b take IP addresses (cmtime also takes host
// names), -p a port number.
func ParseFlags(args []string) (Config, error) {
	c := Config{Port: DefaultPort, Connections: DefaultConnections, BaseQPN: DefaultBaseQPN,
		Retries: DefaultRetries, TimeoutMS: DefaultTimeoutMS, Threads: 1, Link: "udp"}
	fail := func(format string, a ...any) (Config, error) {
		return c, fmt.Errorf("%w: "+format, append([]any{ErrUsage}, a...)...)
	}
	found, operands, err := getopt.Parse(args, options)
	if err != nil {
		return fail("%w", err)
	}
	if len(operands) > 0 {
		return fail("unexpected argument %q", operands[0])
	}
	num := func(m getopt.Match, what string, lo, hi int) (int, error) {
		n, ok := getopt.Atoi(m.Value)
		if !ok || n < lo || n > hi {
			return 0, fmt.Errorf("-%s %s: not %s (%d-%d)", m.Option.Name(), m.Value, what, lo, hi)
		}
		return n, nil
	}
	var only56 []string // flags rdma-core 44's cmtime does not have
	for _, m := range found {
		name := m.Option.Name()
		var n int
		switch name {
		case "s", "b":
			a, err := netip.ParseAddr(m.Value)
			if err != nil {
				return fail("-%s %s: not an IP address", name, m.Value)
			}
			if name == "s" {
				c.Addr = a.Unmap()
			} else {
				c.Bind = a.Unmap()
			}
		case "c":
			n, err = num(m, "a number of connections", 1, MaxConnections)
			c.Connections = n
		case "r":
			n, err = num(m, "a number of retries", 0, 1<<20)
			c.Retries = n
		case "t":
			n, err = num(m, "a timeout in ms", 1, 1<<30)
			c.TimeoutMS = n
		case "q":
			n, err = num(m, "a QPN", 0, 0xffffff)
			c.BaseQPN = uint32(n)
			only56 = append(only56, "-q")
		case "m":
			n, err = num(m, "a delay in µs", 0, 1<<30)
			c.MimicDelay, c.Mimic = n, true
			only56 = append(only56, "-m")
		case "n":
			n, err = num(m, "a number of threads", 1, MaxThreads)
			c.Threads = n
			only56 = append(only56, "-n")
		case "S":
			c.Socket = true
			only56 = append(only56, "-S")
		case "p":
			p, perr := strconv.ParseUint(m.Value, 10, 16)
			if perr != nil || p == 0 {
				return fail("-p %s: not a port number (1-65535)", m.Value)
			}
			c.Port = uint16(p)
		case "B", "C", "L", "P":
			return fail("-%s is the multi-peer cmtime's (rdma-core 57 on), which roced does not speak: it speaks rdma-core 44's and 56's (-s/-b)", name)
		case "rdma-core":
			switch m.Value {
			case "44":
				c.Version = V44
			case "56":
				c.Version = V56
			case "auto":
				c.Version = Auto
			default:
				return fail("--rdma-core %s: roced speaks the cmtime of rdma-core 44 or 56 (or auto)", m.Value)
			}
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
		if err != nil {
			return fail("%v", err)
		}
	}
	switch {
	case c.Addr.IsValid() && c.Addr.IsUnspecified():
		return fail("-s %v: a client needs the server's address", c.Addr)
	case c.Addr.IsValid() && c.Bind.IsValid() && c.Addr.Is4() != c.Bind.Is4():
		return fail("-b %v and -s %v are not of one family", c.Bind, c.Addr)
	case c.Addr.IsValid() && c.Bind.IsValid() && c.Bind.IsUnspecified():
		return fail("-b %v: a client binds one of its addresses", c.Bind)
	case c.Version == V44 && len(only56) > 0:
		return fail("%s: rdma-core 44's cmtime has no such flag (--rdma-core 44)", only56[0])
	}
	if len(only56) > 0 {
		c.only56 = only56[0]
	}
	return c, nil
}
