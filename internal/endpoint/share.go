package endpoint

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

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

// EnvRoced names the roced a device starts as its address's share server
// (roced serve --auto) when another process holds the port; unset: roced
// itself when the program is roced, else the roced beside libgoroce's
// engine (bin/), else roced on PATH.
const EnvRoced = "GOROCE_ROCED"

// openUDP opens the device's udp link on addr, as rxe's one device serves
// every process of a host:
//   - through a running share server (roced serve), which relays this
//     process the packets of its QPs;
//   - else as the port's owner (udp.Config.Owner): the process binds port
//     4791 itself, the single-process path, in a group a server may join
//     later;
//   - else, the port being another process's, it starts roced serve --auto,
//     which joins the owner's group, and joins it.
//
// GOROCE_SHARE=0 binds the port plainly, failing where it is taken.
// The owners' links are returned too, for the services their steering
// keeps (ownerShare).
func openUDP(addr netip.Addr, ucfg udp.Config) (nic.Link, *share.Member, []*udp.Link, error) {
	if os.Getenv(EnvShare) == "0" {
		l, err := udp.Open(ucfg)
		if err != nil {
			return nil, nil, nil, err
		}
		return l, nil, nil, nil
	}
	link, m, err := openShared(addr)
	if link != nil || err != nil {
		return link, m, nil, err
	}
	path, err := SharePath()
	if err != nil {
		return nil, nil, nil, err
	}
	// One process of the user at a time decides between owning the port
	// and starting a server: between the probe and the group's bind no
	// other owner may slip in, nor two servers start.
	unlock, err := lockFile(path + ".lock")
	if err != nil {
		// The user's goroce directory is refused (StatsDir): no server
		// can share the port, so it is bound plainly, as GOROCE_SHARE=0.
		l, oerr := udp.Open(ucfg)
		if oerr != nil {
			return nil, nil, nil, fmt.Errorf("%w (no share server: %v)", oerr, err)
		}
		return l, nil, nil, nil
	}
	defer unlock()
	if link, m, err := openShared(addr); link != nil || err != nil {
		return link, m, nil, err // a server started meanwhile
	}
	free, err := portFree(addr)
	if err != nil {
		return nil, nil, nil, err
	}
	if free {
		ucfg.Owner = true
		l, err := udp.Open(ucfg)
		if err != nil {
			return nil, nil, nil, err
		}
		return l, nil, []*udp.Link{l}, nil
	}
	if err := startServer(); err != nil {
		return nil, nil, nil, fmt.Errorf("%w: another process holds port 4791 on %v, and a share server for both could not start: %v", syscall.EADDRINUSE, addr, err)
	}
	link, m, err = openShared(addr)
	if link == nil && err == nil {
		err = fmt.Errorf("%w: another process holds port 4791 on %v, and the share server started cannot open it", syscall.EADDRINUSE, addr)
	}
	return link, m, nil, err
}

// portFree reports whether no socket holds UDP port 4791 on addr: a
// plain bind (no SO_REUSEPORT, which would join another owner's group)
// succeeds.
func portFree(addr netip.Addr) (bool, error) {
	network := "udp4"
	if addr.Is6() {
		network = "udp6"
	}
	c, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 4791)))
	if errors.Is(err, syscall.EADDRINUSE) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("nic: udp link on %v port 4791: %w", addr, err)
	}
	c.Close()
	return true, nil
}

// lockFile takes an exclusive flock on path, returning its release.
func lockFile(path string) (func(), error) {
	if err := ownDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// startServer runs roced serve --auto, which returns once its server
// listens.
func startServer() error {
	roced, err := rocedPath()
	if err != nil {
		return err
	}
	out, err := exec.Command(roced, "serve", "--auto").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s serve --auto: %v: %s", roced, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// rocedPath finds the roced to start (EnvRoced).
func rocedPath() (string, error) {
	if p := os.Getenv(EnvRoced); p != "" {
		return p, nil
	}
	if exe, err := os.Executable(); err == nil && filepath.Base(exe) == "roced" {
		return exe, nil
	}
	if f, err := os.Open("/proc/self/maps"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) == 6 && strings.HasPrefix(filepath.Base(fs[5]), "libgoroce") {
				p := filepath.Join(filepath.Dir(fs[5]), "roced")
				if _, err := os.Stat(p); err == nil {
					return p, nil
				}
			}
		}
	}
	p, err := exec.LookPath("roced")
	if err != nil {
		return "", fmt.Errorf("no roced to start (set %s): %w", EnvRoced, err)
	}
	return p, nil
}

// ownerShare is the Sharer of a port's owner (udp.Config.Owner): block 0,
// and the services it listens on steered to it by its links' programs.
type ownerShare struct {
	links    []*udp.Link
	mu       sync.Mutex
	services []uint64
}

func (o *ownerShare) Block() uint32 { return 0 }

func (o *ownerShare) Listen(id uint64) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if slices.Contains(o.services, id) {
		return nil
	}
	if len(o.services) == nic.MaxOwnerServices {
		return fmt.Errorf("this process listens on %d services, the most its port's steering names", nic.MaxOwnerServices)
	}
	return o.set(append(slices.Clone(o.services), id))
}

func (o *ownerShare) Unlisten(id uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if i := slices.Index(o.services, id); i >= 0 {
		o.set(slices.Delete(slices.Clone(o.services), i, i+1))
	}
}

// set steers services on every link; called with o.mu held.
func (o *ownerShare) set(services []uint64) error {
	for _, l := range o.links {
		if err := l.SetServices(services); err != nil {
			return err
		}
	}
	o.services = services
	return nil
}

// openShared opens a udp link on addr through the share server, when one
// runs: the server relays this process the packets of its QPs, and the
// link sends from sockets of its own. It returns a nil link, and no
// error, when no server answers or the server cannot open the address.
func openShared(addr netip.Addr) (nic.Link, *share.Member, error) {
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
