// Package rping is librdmacm's rping as a drop-in peer: its flags, its
// connection through the RDMA connection manager (package cm), its
// buffer-advertisement loop and its output, so that either end of an
// rping run can be roced.
//
// The loop, per ping (rping.c): the client SENDs {addr, rkey, size} of
// its start buffer (16 bytes, big-endian); the server READs that buffer
// into its own and SENDs a go-ahead; the client SENDs {addr, rkey, size}
// of its sink buffer; the server WRITEs the ping back into it and SENDs a
// go-ahead. The client then checks (-V) and prints (-v) what came back.
package rping

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/tools/internal/getopt"
	"github.com/goroce/goroce/tools/pingpong"
)

// rping.c's limits and defaults.
const (
	DefaultPort = 7174
	DefaultSize = 64
	// MinSize is RPING_MIN_BUFSIZE: sizeof("2147483647") +
	// sizeof("rdma-ping-%d: ").
	MinSize = 11 + 15
	// MaxSize is RPING_BUFSIZE - 1.
	MaxSize = 64*1024 - 1
)

// Config is rping's command line.
type Config struct {
	Server   bool       // -s (else -c)
	Addr     netip.Addr // -a: the server's address (a server: the one it binds, unset: any)
	Source   netip.Addr // -I: the client's source address
	Port     uint16     // -p (7174)
	Count    int        // -C: pings (0: without end)
	Size     int        // -S: the ping's size in bytes (64)
	Verbose  bool       // -v: print the ping data
	Validate bool       // -V: check that the echo is the ping
	Debug    bool       // -d: rping's debug lines
	SelfQP   bool       // -q: rping makes and moves its QP itself; the wire is the same
	// Link and Pcap are goroce's --link and --pcap.
	Link, Pcap string
}

// ErrUsage wraps every command-line error; rping answers those with its
// usage text and EINVAL (22) as its exit status.
var ErrUsage = errors.New("usage")

var options = []getopt.Option{
	{Short: 'a', Arg: getopt.RequiredArg}, {Short: 'I', Arg: getopt.RequiredArg},
	{Short: 'P', Arg: getopt.NoArg}, {Short: 'p', Arg: getopt.RequiredArg},
	{Short: 'C', Arg: getopt.RequiredArg}, {Short: 'S', Arg: getopt.RequiredArg},
	{Short: 't', Arg: getopt.RequiredArg}, {Short: 's', Arg: getopt.NoArg},
	{Short: 'c', Arg: getopt.NoArg}, {Short: 'v', Arg: getopt.NoArg},
	{Short: 'V', Arg: getopt.NoArg}, {Short: 'd', Arg: getopt.NoArg},
	{Short: 'q', Arg: getopt.NoArg},
	{Long: "link", Arg: getopt.RequiredArg}, {Long: "pcap", Arg: getopt.RequiredArg}, // goroce
}

// ParseFlags reads rping's command line (without the program name) with
// rping's defaults and checks. Numbers are read as atoi reads them, but a
// port, count or size that is no number at all is refused. -a and -I take
// IP addresses (rping also takes host names).
func ParseFlags(args []string) (Config, error) {
	c := Config{Port: DefaultPort, Size: DefaultSize, Link: "udp"}
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
	role := -1
	num := func(m getopt.Match) (int, bool) { return getopt.Atoi(m.Value) }
	for _, m := range found {
		switch m.Option.Name() {
		case "a", "I":
			a, err := netip.ParseAddr(m.Value)
			if err != nil {
				return fail("-%s %s: not an IP address", m.Option.Name(), m.Value)
			}
			if m.Option.Short == 'a' {
				c.Addr = a.Unmap()
			} else {
				c.Source = a.Unmap()
			}
		case "P":
			return fail("-P (persistent server) is not supported by roced")
		case "t":
			return fail("-t (type of service) is not supported by roced")
		case "p":
			n, ok := num(m)
			if !ok || n < 0 || n > 65535 {
				return fail("invalid port %s (-p)", m.Value)
			}
			c.Port = uint16(n)
		case "C":
			n, ok := num(m)
			if !ok || n < 0 {
				return fail("Invalid count %s (-C)", m.Value)
			}
			c.Count = n
		case "S":
			n, ok := num(m)
			if !ok || n < MinSize || n > MaxSize {
				return fail("Invalid size %s (-S; valid range is %d to %d)", m.Value, MinSize, MaxSize+1)
			}
			c.Size = n
		case "s":
			role = 1
		case "c":
			role = 0
		case "v":
			c.Verbose = true
		case "V":
			c.Validate = true
		case "d":
			c.Debug = true
		case "q":
			c.SelfQP = true
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
	case role < 0:
		return fail("one of -s (server) and -c (client) is needed")
	case role == 0 && !c.Addr.IsValid():
		return fail("a client needs the server's address (-a)")
	case c.Source.IsValid() && c.Addr.IsValid() && c.Source.Is4() != c.Addr.Is4():
		return fail("-I %v and -a %v are not of one family", c.Source, c.Addr)
	}
	c.Server = role == 1
	return c, nil
}
