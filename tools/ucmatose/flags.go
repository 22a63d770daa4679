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
	"strconv"

	"github.com/goroce/goroce/tools/internal/cmflags"
	"github.com/goroce/goroce/tools/internal/getopt"
)

// cmatose.c's defaults.
const (
	DefaultPort        = 7471
	DefaultConnections = cmflags.DefaultConnections
	DefaultCount       = cmflags.DefaultCount
	DefaultSize        = cmflags.DefaultSize
	// MaxConnections bounds -c: rxe's max_qp (RXE_MAX_QP, 0x10000), past
	// which cmatose cannot make its QPs on rxe either.
	MaxConnections = cmflags.MaxConnections
)

// Config is ucmatose's command line: -s, -b, -c, -C, -S and goroce's
// --dev, --link and --pcap (cmflags.Common), -p and -m.
type Config struct {
	cmflags.Common
	Port uint16 // -p (7471)
	// Migrate is -m: cmatose moves its IDs to a new event channel before
	// it disconnects. roced has no event channels; it prints the line.
	Migrate bool
}

// ErrUsage wraps every command-line error; cmatose prints its usage then
// and exits with status 1.
var ErrUsage = errors.New("usage")

// cmatose.c's optstring "s:b:f:P:c:C:S:t:p:a:m" (older versions lack
// -a): those cmflags does not read.
var options = []getopt.Option{
	{Short: 'P', Arg: getopt.RequiredArg}, {Short: 't', Arg: getopt.RequiredArg},
	{Short: 'p', Arg: getopt.RequiredArg}, {Short: 'a', Arg: getopt.RequiredArg},
	{Short: 'm', Arg: getopt.NoArg},
}

// ParseFlags reads ucmatose's command line (without the program name),
// the common flags as cmflags.Common.Take reads them; -p takes a port
// number.
func ParseFlags(args []string) (Config, error) {
	c := Config{Common: cmflags.New(), Port: DefaultPort}
	err := c.Parse(args, options, func(m getopt.Match) error {
		switch m.Option.Name() {
		case "P":
			// cmatose: "tcp..." is RDMA_PS_TCP (its default), "ib..."
			// RDMA_PS_IB, anything else a warning that leaves TCP.
			switch v := m.Value; {
			case getopt.HasPrefixFold(v, "tcp"):
			case getopt.HasPrefixFold(v, "ib"):
				return fmt.Errorf("-P %s: roced's connection manager serves the TCP port space only (-P tcp)", v)
			case getopt.HasPrefixFold(v, "udp"):
				// cmatose would warn and run TCP; someone asking for UDP
				// wants UD: roced udaddy.
				return fmt.Errorf("-P %s: roced ucmatose makes RC connections in the TCP port space only (-P tcp); UD through the UDP port space is roced udaddy", v)
			default:
				c.Warnings = append(c.Warnings, "Warning: unknown port space format")
			}
		case "t":
			return errors.New("-t (type of service) is not supported by roced")
		case "a":
			return errors.New("-a (ACK timeout) is not supported by roced: its connection manager sets the QP's ACK timeout")
		case "p":
			n, err := strconv.ParseUint(m.Value, 10, 16)
			if err != nil || n == 0 {
				return fmt.Errorf("-p %s: not a port number (1-65535)", m.Value)
			}
			c.Port = uint16(n)
		case "m":
			c.Migrate = true
		}
		return nil
	})
	if err != nil {
		return c, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return c, nil
}
