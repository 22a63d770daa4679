package share

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/nic"
)

// Member is this process's place on a server's ports: its block of QP
// numbers and CM IDs, its services, and the socket the server relays its
// packets to. It implements transport.Sharer.
type Member struct {
	ctl   *net.UnixConn
	data  *os.File // this process's end of the socket pair
	raw   syscall.RawConn
	block uint32

	mu     sync.Mutex // one control request at a time
	closed atomic.Bool
}

// joinWait bounds the wait for a server's answer to a join (a var for
// the tests).
var joinWait = 30 * time.Second

// ErrNoServer is Join's error when no server answers at the path.
var ErrNoServer = errors.New("share: no server (roced serve) is running")

// ErrRefused is Join's error when the server answers but cannot serve
// the addresses (it cannot bind one: it runs in another network
// namespace, or the address is not the host's) or is ending.
var ErrRefused = errors.New("share: join refused")

// Join joins the server at path on addrs: the server opens port 4791 on
// each (if it has not yet) and relays to this process the packets for
// its block. It returns ErrNoServer (wrapped) when no server answers,
// ErrRefused when one refuses.
func Join(path string, addrs []netip.Addr) (*Member, error) {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		// No socket, a stale one, a path that is no directory: whatever
		// keeps the dial from a server, there is none to join.
		return nil, fmt.Errorf("%w at %s: %v", ErrNoServer, path, err)
	}
	m, err := join(c, addrs)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return m, nil
}

// join sends the join on c, a connection to a server, and reads its
// answer; c is closed when it fails.
func join(c *net.UnixConn, addrs []netip.Addr) (*Member, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("share: socketpair: %w", err)
	}
	// Non-blocking, so that os.NewFile puts them in the runtime's poller
	// and a receive waits there.
	mine, theirs := os.NewFile(uintptr(fds[0]), "share data"), os.NewFile(uintptr(fds[1]), "share data")
	defer theirs.Close()
	fail := func(err error) (*Member, error) { c.Close(); mine.Close(); return nil, err }
	msg, err := encodeJoin(addrs)
	if err != nil {
		return fail(err)
	}
	// A server that ends (its last member gone, roced serve --auto) closes
	// the connections it has not answered: the join reached no server,
	// and the caller starts one as if none had been there. One that
	// neither answers nor closes (stopped, wedged) would hold the
	// program's device open for ever: joinWait bounds it.
	c.SetDeadline(time.Now().Add(joinWait))
	if _, _, err := c.WriteMsgUnix(msg, unix.UnixRights(int(theirs.Fd())), nil); err != nil {
		return fail(fmt.Errorf("%w: it ended before the join: %v", ErrNoServer, err))
	}
	ans := make([]byte, maxMsg)
	n, err := c.Read(ans)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fail(fmt.Errorf("share: the server did not answer the join within %v", joinWait))
	case err != nil || n == 0:
		return fail(fmt.Errorf("%w: it ended before answering the join: %v", ErrNoServer, err))
	case ans[0] == msgErr:
		return fail(fmt.Errorf("%w: %s", ErrRefused, ans[1:n]))
	case n != 3 || ans[0] != msgOK:
		return fail(errors.New("share: join: the server's answer does not parse"))
	}
	c.SetDeadline(time.Time{}) // Listen waits on it as long as it must
	raw, err := mine.SyscallConn()
	if err != nil {
		return fail(err)
	}
	raw.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20) != nil {
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
		}
	})
	return &Member{ctl: c, data: mine, raw: raw, block: uint32(binary.BigEndian.Uint16(ans[1:3]))}, nil
}

// Block returns the member's block (transport.Sharer).
func (m *Member) Block() uint32 { return m.block }

// Listen asks the server for the connection requests to a service
// (transport.Sharer).
func (m *Member) Listen(serviceID uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.ctl.Write(serviceMsg(msgListen, serviceID)); err != nil {
		return fmt.Errorf("share: listen: %w", err)
	}
	ans := make([]byte, maxMsg)
	n, err := m.ctl.Read(ans)
	switch {
	case err != nil:
		return fmt.Errorf("share: listen: %w", err)
	case n >= 1 && ans[0] == msgErr:
		return fmt.Errorf("share: %s", ans[1:n])
	case n != 1 || ans[0] != msgOK:
		return errors.New("share: listen: the server's answer does not parse")
	}
	return nil
}

// Unlisten gives a service back (transport.Sharer).
func (m *Member) Unlisten(serviceID uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ctl.Write(serviceMsg(msgUnlisten, serviceID))
}

// Close leaves the server: it forgets the block and the services.
func (m *Member) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	m.ctl.Close()
	return m.data.Close()
}

// Link is a member's link: it sends through tx (links that only send:
// udp.Config.NoRx, on the member's addresses) and receives what the server
// relays. Closing it closes tx and the member.
type Link struct {
	m    *Member
	tx   nic.Link
	info nic.Info
	bufs [][nic.BufSize]byte

	rxPackets, rxBytes atomic.Uint64
}

// NewLink makes the link of a member that sends through tx.
func NewLink(m *Member, tx nic.Link) *Link {
	info := tx.Info()
	info.Name = fmt.Sprintf("share block %d, %s", m.block, info.Name)
	return &Link{m: m, tx: tx, info: info}
}

// Send implements nic.Link: through tx.
func (l *Link) Send(frames []nic.Frame) (int, error) { return l.tx.Send(frames) }

// Recv implements nic.Link: what the server relayed, one datagram a
// frame, checked by the device as any received frame is.
func (l *Link) Recv(frames []nic.Frame) (int, error) {
	if len(frames) == 0 {
		return 0, nil
	}
	for len(l.bufs) < len(frames) {
		l.bufs = append(l.bufs, [nic.BufSize]byte{})
	}
	got := 0
	var rerr error
	err := l.m.raw.Read(func(fd uintptr) bool {
		for got < len(frames) {
			b := l.bufs[got][nic.Headroom:]
			n, _, _, _, err := unix.Recvmsg(int(fd), b, nil, unix.MSG_DONTWAIT)
			switch {
			case errors.Is(err, unix.EAGAIN):
				return got > 0 // nothing yet: wait for the socket
			case errors.Is(err, unix.EINTR):
				continue
			case err != nil:
				rerr = err
				return true
			case n == 0:
				rerr = errors.New("share: the server closed the member's socket")
				return true
			}
			frames[got] = nic.Frame{B: l.bufs[got][:nic.Headroom+n], Off: nic.Headroom}
			l.rxPackets.Add(1)
			l.rxBytes.Add(uint64(n))
			got++
		}
		return true
	})
	if got > 0 {
		return got, nil
	}
	if err != nil {
		return 0, net.ErrClosed
	}
	return 0, rerr
}

// Info implements nic.Link: tx's addresses and MTU.
func (l *Link) Info() nic.Info { return l.info }

// SrcPort implements nic.Link: tx's ports.
func (l *Link) SrcPort(qpn uint32) uint16 { return l.tx.SrcPort(qpn) }

// Stats implements nic.Link: tx's counters, with what the server relayed
// as received.
func (l *Link) Stats() nic.Stats {
	s := l.tx.Stats()
	s.RxPackets += l.rxPackets.Load()
	s.RxBytes += l.rxBytes.Load()
	return s
}

// Close implements nic.Link.
func (l *Link) Close() error {
	err := l.tx.Close()
	l.m.Close()
	return err
}
