package main

import (
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/internal/endpoint"
	"github.com/goroce/goroce/transport"
)

// openCM opens the device a tool of librdmacm's runs on and starts its
// connection manager (QP1). The caller closes the manager, then the
// endpoint.
func openCM(ec endpoint.Config, stderr io.Writer, name string) (*endpoint.Endpoint, *cm.Manager, error) {
	ep, err := endpoint.Open(ec)
	if err != nil {
		return nil, nil, err
	}
	ep.WarnStats(stderr, name)
	m, err := cm.New(ep.Device, cm.Options{})
	if err != nil {
		ep.Close()
		return nil, nil, err
	}
	return ep, m, nil
}

// cmToolFlags is what the command line of a librdmacm example (ucmatose,
// udaddy) says about the device it runs on.
type cmToolFlags struct {
	Warnings   []string   // lines the tool prints on stderr as it reads its options, then goes on
	Server     bool       // no -s
	Addr, Bind netip.Addr // -s and -b
	Dev        string     // --dev
	Link, Pcap string     // --link, --pcap
}

// runCMTool is the frame of such a tool: a command-line error (parseErr,
// wrapping usage) is one line on stderr and exit status 1; else the
// warnings are printed, the device opened (the server binds -b; the
// client reaches -s from -b if given) and its connection manager
// started, and run's status is the tool's. A device that cannot be opened
// is -1 (255), as the tool's failed rdma_bind_addr or rdma_resolve_addr.
func runCMTool(name string, f cmToolFlags, parseErr, usage error, stderr io.Writer,
	run func(dev *transport.Device, m *cm.Manager) int) int {
	if parseErr != nil {
		fmt.Fprintf(stderr, "%s: %s\n", name, strings.TrimPrefix(parseErr.Error(), usage.Error()+": "))
		return exitUsage
	}
	for _, w := range f.Warnings {
		fmt.Fprintln(stderr, w)
	}
	ec := endpoint.Config{Link: f.Link, GID: -1, Pcap: f.Pcap, Dev: f.Dev}
	if !f.Server {
		ec.Peer = f.Addr.String()
	}
	if ec.Dev == "" && f.Bind.IsValid() && !f.Bind.IsUnspecified() {
		ec.Dev = f.Bind.String()
	}
	ep, m, err := openCM(ec, stderr, name)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitRunFail
	}
	defer ep.Close()
	defer m.Close()
	return run(ep.Device, m)
}
