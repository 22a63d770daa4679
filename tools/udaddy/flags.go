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

	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/tools/internal/cmflags"
	"github.com/goroce/goroce/tools/internal/getopt"
)

// Port is udaddy's fixed port ("7174"; it has no flag to change it).
const Port = 7174

// udaddy.c's defaults for -C and -S (-c: 1).
const (
	DefaultCount = cmflags.DefaultCount // 10
	DefaultSize  = cmflags.DefaultSize  // 100
)

// Config is udaddy's command line: -s, -b, -c, -C, -S, -f and goroce's
// --dev, --link and --pcap as ucmatose reads them (cmflags.Common), and
// the port.
type Config struct {
	cmflags.Common
	// Port is the port of the UDP port space the server listens on and
	// the client resolves: udaddy's 7174. roced's --port changes it (for
	// tests that must not meet another udaddy); udaddy has no such flag.
	Port uint16
}

// ErrUsage wraps every command-line error; udaddy prints its usage then
// and exits with status 1.
var ErrUsage = errors.New("usage")

// udaddy.c's optstring "s:b:c:C:S:t:p:P:f:" (those cmflags does not
// read), then roced's --port.
var options = []getopt.Option{
	{Short: 't', Arg: getopt.RequiredArg}, {Short: 'p', Arg: getopt.RequiredArg},
	{Short: 'P', Arg: getopt.RequiredArg}, {Long: "port", Arg: getopt.RequiredArg},
}

// ParseFlags reads udaddy's command line (without the program name), the
// common flags as cmflags.Common.Take reads them.
func ParseFlags(args []string) (Config, error) {
	c := Config{Common: cmflags.New(), Port: Port}
	const ipoib = "-%s %s: the IPoIB port space is InfiniBand's; roced serves the UDP port space (-P udp, -p 0x111)"
	err := c.Parse(args, options, func(m getopt.Match) error {
		switch m.Option.Name() {
		case "P":
			// udaddy: "ipoib..." RDMA_PS_IPOIB; "udp..." its default;
			// anything else a warning that leaves UDP.
			switch v := m.Value; {
			case getopt.HasPrefixFold(v, "ipoib"):
				return fmt.Errorf(ipoib, "P", v)
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
				return fmt.Errorf(ipoib, "p", m.Value)
			default:
				return fmt.Errorf("-p %s: not a port space of UD (0x111 for UDP)", m.Value)
			}
		case "t":
			return errors.New("-t (type of service) is not supported by roced")
		case "port":
			n, ok := getopt.Atoi(m.Value)
			if !ok || n <= 0 || n > 0xffff {
				return fmt.Errorf("--port %s: not a port number (1-65535)", m.Value)
			}
			c.Port = uint16(n)
		}
		return nil
	})
	if err != nil {
		return c, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return c, nil
}
