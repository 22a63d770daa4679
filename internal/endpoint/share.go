package endpoint

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/udp"
	"github.com/goroce/goroce/share"
)

// EnvShare set to 0 keeps a process off a running share server: it binds
// port 4791 itself, and fails where another process holds it.
const EnvShare = "GOROCE_SHARE"

// SharePath is where roced serve listens and devices look for it: the
// user's goroce directory (StatsDir), so one user's programs share, and a
// socket per network namespace (share.Path), so each namespace has its
// own server.
func SharePath() (string, error) { return share.Path(StatsDir()) }

// ListenShare opens the share server's socket for roced serve. A socket
// left by a server that died is replaced; one a live server answers on
// is an error.
func ListenShare() (*net.UnixListener, error) {
	dir := StatsDir()
	if err := ownDir(dir); err != nil {
		return nil, err
	}
	path, err := SharePath()
	if err != nil {
		return nil, err
	}
	if c, err := net.Dial("unixpacket", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("a share server already answers at %s", path)
	}
	os.Remove(path)
	return net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
}

// openShared opens a udp link on addr through the share server, when one
// runs (and GOROCE_SHARE is not 0): the server relays this process the
// packets of its QPs, and the link sends from sockets of its own. It
// returns a nil link, and no error, when no server answers or the server
// cannot open the address.
func openShared(addr netip.Addr) (nic.Link, *share.Member, error) {
	if os.Getenv(EnvShare) == "0" {
		return nil, nil, nil
	}
	path, err := SharePath()
	if err != nil {
		return nil, nil, err
	}
	m, err := share.Join(path, []netip.Addr{addr})
	if errors.Is(err, share.ErrNoServer) || errors.Is(err, share.ErrRefused) {
		// No server, or one that cannot bind this address (it runs in
		// another network namespace): bind port 4791 here.
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	tx, err := udp.Open(udp.Config{Addr: addr, NoRx: true})
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	return share.NewLink(m, tx), m, nil
}
