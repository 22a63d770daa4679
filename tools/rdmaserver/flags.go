// Package rdmaserver is librdmacm's smallest example pair, rdma_server and
// rdma_client, as drop-in peers: their flags, their connection through the
// RDMA connection manager (package cm) and their output, so that either
// end can be roced.
//
// The exchange (librdmacm/examples/rdma_server.c, rdma_client.c): each
// side makes an RC QP of one send and one receive, posts a 16-byte
// receive before it connects or accepts; the client SENDs 16 bytes (zeros)
// once connected, the server SENDs 16 bytes back once the client's have
// arrived, and both disconnect. Each prints "NAME: start" and
// "NAME: end STATUS".
package rdmaserver

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/goroce/goroce/tools/internal/getopt"
	"github.com/goroce/goroce/tools/pingpong"
)

// The examples' defaults.
const (
	DefaultPort = 7471
	// DefaultServer is rdma_client's server without -s.
	DefaultServer = "127.0.0.1"
	// MsgLen is the size of both messages (send_msg, recv_msg).
	MsgLen = 16
)

// Config is either example's command line.
type Config struct {
	Server bool // rdma_server (else rdma_client)
	// Addr is -s: the client's server, or the address a server binds
	// (unset: every address, as rdma_getaddrinfo with no node and
	// RAI_PASSIVE gives).
	Addr netip.Addr
	Port uint16 // -p
	// Dev is goroce's --dev IFACE|ADDR: the local interface or address
	// (empty: the interface of the route to the server, or for a server
	// its -s address or else the default route's interface). The examples
	// have no such flag.
	Dev string
	// Link and Pcap are goroce's --link and --pcap.
	Link, Pcap string
	// AcceptDelay is goroce's --accept-delay DURATION (server only): the
	// server holds the connection request that long before it accepts,
	// as a program slow between rdma_get_request and rdma_accept is, so
	// that the connection manager's MRA can be seen at work (0: accept at
	// once).
	AcceptDelay time.Duration
}

// Name is the program's name, which starts its output lines.
func (c Config) Name() string {
	if c.Server {
		return "rdma_server"
	}
	return "rdma_client"
}

// ErrUsage wraps every command-line error; the examples print their usage
// then and exit with status 1.
var ErrUsage = errors.New("usage")

var goroceOptions = []getopt.Option{{Long: "link", Arg: getopt.RequiredArg}, {Long: "pcap", Arg: getopt.RequiredArg},
	{Long: "dev", Arg: getopt.RequiredArg}, {Long: "accept-delay", Arg: getopt.RequiredArg}}

// ParseFlags reads rdma_server's command line (server) or rdma_client's
// (without the program name). The examples hand -s and -p to
// rdma_getaddrinfo, which also takes host and service names; roced takes
// an IP address and a port number.
func ParseFlags(server bool, args []string) (Config, error) {
	c := Config{Server: server, Port: DefaultPort, Link: "udp"}
	fail := func(format string, a ...any) (Config, error) {
		return c, fmt.Errorf("%w: "+format, append([]any{ErrUsage}, a...)...)
	}
	// rdma_server takes -s too (the lab's rdma-core 44 and 56 do).
	opts := append([]getopt.Option{{Short: 'p', Arg: getopt.RequiredArg}, {Short: 's', Arg: getopt.RequiredArg}}, goroceOptions...)
	if !server {
		c.Addr = netip.MustParseAddr(DefaultServer)
	}
	found, operands, err := getopt.Parse(args, opts)
	if err != nil {
		return fail("%w", err)
	}
	if len(operands) > 0 {
		return fail("unexpected argument %q", operands[0])
	}
	for _, m := range found {
		switch m.Option.Name() {
		case "s":
			a, err := netip.ParseAddr(m.Value)
			if err != nil {
				return fail("-s %s: not an IP address", m.Value)
			}
			c.Addr = a.Unmap()
		case "p":
			n, err := strconv.ParseUint(m.Value, 10, 16)
			if err != nil || n == 0 {
				return fail("-p %s: not a port number (1-65535)", m.Value)
			}
			c.Port = uint16(n)
		case "link":
			l, err := pingpong.ParseLink(m.Value)
			if err != nil {
				return fail("%v", err)
			}
			c.Link = string(l)
		case "pcap":
			c.Pcap = m.Value
		case "dev":
			c.Dev = m.Value
		case "accept-delay":
			d, err := time.ParseDuration(m.Value)
			switch {
			case !server:
				return fail("--accept-delay is the server's")
			case err != nil || d < 0:
				return fail("--accept-delay %s: not a duration (such as 8s)", m.Value)
			}
			c.AcceptDelay = d
		}
	}
	if !server && c.Addr.IsUnspecified() { // a server's -s 0.0.0.0 is any
		return fail("-s %v: a client needs the server's address", c.Addr)
	}
	return c, nil
}
