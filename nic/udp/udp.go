// Package udp is the link through kernel UDP sockets, goroce's default:
// no privilege needed.
package udp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/internal/linkio"
	"golang.org/x/sys/unix"
)

// Config configures a UDP link.
type Config struct {
	// Addr is the local address: a specific IPv4 or IPv6 address (with its
	// zone for a link-local one). Several links on one host use several
	// addresses (127.0.0.1, 127.0.0.2, ...); each binds port 4791 on its own.
	Addr netip.Addr
	// SrcPorts is how many send sockets, each bound to one source port in
	// 0xC000..0xFFFF, spread the queue pairs' flows; 0 means 8.
	SrcPorts int
	// NoGSO and NoGRO turn UDP segmentation offload on send and receive
	// coalescing off (they are used when the kernel offers them).
	NoGSO, NoGRO bool
	// SocketBuf is SO_SNDBUF and SO_RCVBUF in bytes; 0 means 4 MiB. Root
	// may exceed the net.core.[rw]mem_max limits.
	SocketBuf int
	// RxQueues is how many receive queues the link has (nic.MultiQueue): that
	// many sockets bound to port 4791 in one SO_REUSEPORT group, whose BPF
	// program hands each packet to the socket of its destination QP
	// (nic.QueueOf), so that a device receives on one goroutine per queue and
	// every packet of a QP lands on the same one. 0 or 1 means one socket
	// without SO_REUSEPORT, where a second link on the same address fails
	// to bind; with several, another program of the same user could join
	// the group, but the steering never hands it a packet.
	RxQueues int
	// NoRx makes a link that only sends: its receive half is another's
	// (package share's, which hands the process its packets from the
	// server of a shared port). It has no receive queue.
	NoRx bool
	// BusyPoll is how long a receive that finds nothing keeps asking the
	// socket (yielding to other goroutines between tries) before it
	// sleeps in the runtime's poller until the kernel signals a packet:
	// an HCA's poll mode, bounded as Linux's SO_BUSY_POLL is. While
	// traffic flows it saves the poller's wake-up on every packet, several
	// microseconds of latency, at the cost of a core per receive queue;
	// when the link goes quiet, or the cores are oversubscribed, the
	// receive sleeps again. Pair it with polling the CQ
	// (transport.CQ.Poll in a loop) rather than waiting on it. 0 (the
	// default) busy-polls adaptively, for up to AdaptiveBusyPoll while
	// packets come closer together than that (where the clock is read in
	// user space: spin.Every); NoBusyPoll never busy-polls.
	BusyPoll time.Duration
	// NoNetpoll keeps the link's sockets out of the Go runtime's network
	// poller (linkio.FD): a receive or send that must wait blocks its
	// thread in ppoll. The runtime's poller thread wakes for every event
	// on a socket it watches, even one no goroutine waits for, so where
	// threads poll the link themselves (a device in poll mode, whose
	// receive goroutine stands aside) each packet they take, and each
	// send, would wake it and take a core they spin on, when the runtime
	// has idle Ps (C threads poll: libgoroce.so). A device in poll mode
	// takes an open link's sockets out itself when asked to
	// (transport.Options.LeaveNetpoll, LeaveNetpoll).
	NoNetpoll bool
	// Owner binds the receive sockets in an SO_REUSEPORT group that a share
	// server (roced serve --auto) may join later, as the group's socket
	// RxQueues, when a second process of the user opens the address: the
	// group's steering program (linkio.AttachOwnerSteering) keeps for this
	// link the packets of its QPs (below nic.MemberQPNBase) and its CM's,
	// and gives the server the rest. Without a server the link gets every
	// packet, as without Owner. Only the same user's sockets may join a
	// group (the kernel's rule for SO_REUSEPORT).
	Owner bool
	// Join binds the receive socket into an owner's group (Owner), where
	// the owner's program steers; with no owner it binds as a group of
	// one. The share server's links are opened so.
	Join bool
}

// Link is a link through kernel UDP sockets: no privilege needed.
//
// The kernel builds the IP and UDP headers, so Send checks that it will
// build what the engine wrote (source address and port, DF) and corrects
// the ICRC for the IPv4 identification the kernel will choose; Recv
// rebuilds the headers the kernel stripped and recovers the identification
// from the ICRC (bth.SolveIPv4ID).
//
// What decides the headers on the wire (Linux, net/ipv4/ip_output.c and
// include/net/ip.h ip_select_ident_segs): an unconnected socket with DF
// (IP_PMTUDISC_DO) sends identification 0; a UDP GSO send of n segments
// gives them identifications 0..n-1 (inet_gso_segment increments per
// segment). Both are checked on the wire by the tests.
type Link struct {
	cfg    Config
	v6     bool
	scope  uint32 // interface index for a link-local address
	info   nic.Info
	rxq    []udpQueue // receive sockets, one per queue
	tx     []udpSock
	txPort [64]uint16 // SrcPort answers from here; len(tx) entries used
	// txGSO says, per send socket, that it sends with UDP GSO: cleared
	// for that socket alone when the kernel refuses (its route or device
	// has no segmentation offload), the others keep it.
	txGSO [64]atomic.Bool
	gro   bool
	// detached: the sockets are out of the network poller (LeaveNetpoll)
	detached bool
	ctr      linkio.Counters
	txPool   sync.Pool
	closing  linkio.Closing
}

// udpQueue is one receive socket and its state (one Recv at a time).
type udpQueue struct {
	conn io.Closer
	r    udpRx
}

type udpSock struct {
	port uint16
	conn io.Closer
	raw  syscall.RawConn
}

// Open opens a UDP link.
func Open(cfg Config) (*Link, error) {
	if !cfg.Addr.IsValid() || cfg.Addr.IsUnspecified() {
		return nil, errors.New("nic: udp link needs a specific local address (the ICRC covers the destination address, and the GID names it)")
	}
	cfg.Addr = cfg.Addr.Unmap()
	if cfg.SrcPorts <= 0 {
		cfg.SrcPorts = 8
	}
	if cfg.SrcPorts > 64 {
		cfg.SrcPorts = 64
	}
	if cfg.SocketBuf <= 0 {
		cfg.SocketBuf = 4 << 20
	}
	if cfg.RxQueues <= 0 {
		cfg.RxQueues = 1
	}
	if cfg.RxQueues > nic.MaxRxQueues {
		return nil, fmt.Errorf("nic: udp link: %d receive queues, at most %d", cfg.RxQueues, nic.MaxRxQueues)
	}
	l := &Link{cfg: cfg, v6: cfg.Addr.Is6()}
	ifc := linkio.InterfaceOf(cfg.Addr)
	if cfg.Addr.Zone() != "" || cfg.Addr.IsLinkLocalUnicast() {
		if ifc == nil {
			return nil, fmt.Errorf("nic: no interface for link-local %v", cfg.Addr)
		}
		l.scope = uint32(ifc.Index)
	}
	l.info = nic.Info{Name: "udp " + cfg.Addr.String(), MTU: 1500, Addrs: []netip.Addr{cfg.Addr}}
	if ifc != nil {
		l.info.MTU = ifc.MTU
		if len(ifc.HardwareAddr) == 6 {
			l.info.MAC = ifc.HardwareAddr
		}
	}
	if cfg.NoRx {
		cfg.RxQueues = 0
	} else if err := l.openRx(); err != nil {
		l.Close()
		return nil, fmt.Errorf("nic: udp link on %v port 4791: %w", cfg.Addr, err)
	}
	if err := l.openTx(); err != nil {
		l.Close()
		return nil, err
	}
	if cfg.NoNetpoll {
		if err := l.LeaveNetpoll(); err != nil {
			l.Close()
			return nil, err
		}
	}
	l.txPool.New = func() any { return newUDPTx(l) }
	return l, nil
}

// openRx opens the receive sockets. Several join one SO_REUSEPORT group,
// and the group's steering program is attached through the first before
// the second joins, so no packet is ever spread by the kernel's own hash.
func (l *Link) openRx() error {
	// Allocated once: each queue's receive state is referred to by address.
	l.rxq = make([]udpQueue, 0, l.cfg.RxQueues)
	for i := range l.cfg.RxQueues {
		c, raw, err := l.listen(4791, false, l.cfg.RxQueues > 1 || l.cfg.Owner || l.cfg.Join)
		if err != nil {
			return err
		}
		l.rxq = append(l.rxq, udpQueue{conn: c})
		if i == 0 && l.cfg.Owner {
			if err := l.steer(raw, nil); err != nil {
				return err
			}
		} else if i == 0 && l.cfg.RxQueues > 1 && !l.cfg.Join {
			var serr error
			if err := raw.Control(func(fd uintptr) { serr = linkio.AttachSteering(int(fd), l.cfg.RxQueues) }); err != nil {
				return err
			}
			if serr != nil {
				return fmt.Errorf("steering %d receive queues (SO_ATTACH_REUSEPORT_CBPF): %w", l.cfg.RxQueues, serr)
			}
		}
		l.rxq[i].r.init(l, raw)
	}
	return nil
}

// steer attaches the owner's steering program through raw, a socket of
// the group, naming services.
func (l *Link) steer(raw syscall.RawConn, services []uint64) error {
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = linkio.AttachOwnerSteering(int(fd), l.cfg.RxQueues, services) }); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("steering port 4791 between its owner and a share server (SO_ATTACH_REUSEPORT_CBPF): %w", serr)
	}
	return nil
}

// SetServices replaces the CM services whose connection requests the
// steering program of an Owner link keeps for it (the rest go to a share
// server): the owner's listens. At most nic.MaxOwnerServices.
func (l *Link) SetServices(services []uint64) error {
	if !l.cfg.Owner || len(l.rxq) == 0 {
		return errors.New("nic: udp link: services are steered on an owner's link only")
	}
	return l.steer(l.rxq[0].r.raw, services)
}

// listen opens a socket bound to the link address and port with the
// options both kinds of socket need; tx sockets drop whatever they receive.
// It returns the socket's closer and its raw access.
func (l *Link) listen(port uint16, tx, reuse bool) (io.Closer, syscall.RawConn, error) {
	var serr error
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		err := c.Control(func(fd uintptr) {
			if serr = l.sockopts(int(fd), tx); serr == nil && reuse {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
			}
		})
		if err != nil {
			return err
		}
		return serr
	}}
	network := "udp4"
	if l.v6 {
		network = "udp6"
	}
	pc, err := lc.ListenPacket(nil, network, netip.AddrPortFrom(l.cfg.Addr, port).String())
	if err != nil {
		return nil, nil, err
	}
	c := pc.(*net.UDPConn)
	raw, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, raw, nil
}

func (l *Link) sockopts(fd int, tx bool) error {
	set := func(level, opt, v int) error { return unix.SetsockoptInt(fd, level, opt, v) }
	force, plain := unix.SO_RCVBUFFORCE, unix.SO_RCVBUF
	if tx {
		force, plain = unix.SO_SNDBUFFORCE, unix.SO_SNDBUF
	}
	if err := set(unix.SOL_SOCKET, force, l.cfg.SocketBuf); err != nil {
		// Without CAP_NET_ADMIN: the plain option, capped by the sysctl.
		_ = set(unix.SOL_SOCKET, plain, l.cfg.SocketBuf)
	}
	if l.v6 {
		// A zero UDP checksum is what rxe sends over IPv6 (its tunnel
		// socket is created with no_check6_tx and no_check6_rx, see
		// net/ipv6/ip6_udp_tunnel.c udp_sock_create6), so accept it.
		if err := set(unix.SOL_UDP, unix.UDP_NO_CHECK6_RX, 1); err != nil {
			return fmt.Errorf("UDP_NO_CHECK6_RX: %w", err)
		}
		if err := set(unix.IPPROTO_IPV6, unix.IPV6_DONTFRAG, 1); err != nil {
			return err
		}
		if err := set(unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO); err != nil {
			return err
		}
	} else {
		// DF on every packet, as rxe and HCAs send; it also makes the
		// kernel send identification 0 from an unconnected socket.
		if err := set(unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); err != nil {
			return err
		}
	}
	if tx {
		return linkio.AttachDropAll(fd)
	}
	if l.v6 {
		if err := set(unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1); err != nil {
			return err
		}
		if err := set(unix.IPPROTO_IPV6, unix.IPV6_RECVHOPLIMIT, 1); err != nil {
			return err
		}
	} else {
		if err := set(unix.IPPROTO_IP, unix.IP_RECVTOS, 1); err != nil {
			return err
		}
		if err := set(unix.IPPROTO_IP, unix.IP_RECVTTL, 1); err != nil {
			return err
		}
	}
	if !l.cfg.NoGRO {
		l.gro = set(unix.SOL_UDP, unix.UDP_GRO, 1) == nil
	}
	return nil
}

// openTx opens the send sockets, one per source port. Ports are taken in
// the order rxe's hash of QP numbers 0, 1, 2, ... gives them; a port
// another socket holds is skipped.
func (l *Link) openTx() error {
	seen := map[uint16]bool{}
	var lastErr error
	for k := uint32(0); len(l.tx) < l.cfg.SrcPorts && k < uint32(l.cfg.SrcPorts)*16+256; k++ {
		p := nic.RoCEv2SrcPort(k)
		if seen[p] {
			continue
		}
		seen[p] = true
		c, raw, err := l.listen(p, true, false)
		if err != nil {
			lastErr = err
			continue
		}
		l.txPort[len(l.tx)] = p
		l.tx = append(l.tx, udpSock{port: p, conn: c, raw: raw})
	}
	if len(l.tx) == 0 {
		return fmt.Errorf("nic: udp link on %v: no source port in 0xC000..0xFFFF could be bound: %w", l.cfg.Addr, lastErr)
	}
	if !l.cfg.NoGSO {
		// Setting the socket's default segment size to 0 succeeds where
		// the kernel has UDP GSO (4.18+); sends then ask per message.
		ok := true
		for _, s := range l.tx {
			var err error
			cerr := s.raw.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_SEGMENT, 0) })
			if cerr != nil || err != nil {
				ok = false
			}
		}
		for i := range l.tx {
			l.txGSO[i].Store(ok)
		}
	}
	return nil
}

// Info describes the link, with the offloads it uses now: GSO while a
// send socket still has it.
func (l *Link) Info() nic.Info {
	i := l.info
	i.Offload = nic.OffloadRxVerify
	if l.GSO() {
		i.Offload |= nic.OffloadGSO
	}
	if l.gro {
		i.Offload |= nic.OffloadGRO
	}
	return i
}

// GSO reports whether the link sends with UDP segmentation offload (one
// system call per message's equal-sized packets) on any of its send
// sockets; a socket whose sends the kernel refuses stops using it.
func (l *Link) GSO() bool {
	for i := range l.tx {
		if l.txGSO[i].Load() {
			return true
		}
	}
	return false
}

// GRO reports whether the link receives with UDP generic receive offload
// (the kernel coalesces packets of one flow into one read).
func (l *Link) GRO() bool { return l.gro }

// SrcPort spreads queue pairs over the source ports the link has sockets
// on. (An HCA would use 0xC000 plus a hash of the QPN; the link can only
// send from ports it holds.)
func (l *Link) SrcPort(qpn uint32) uint16 {
	h := qpn * 0x9e3779b1
	return l.txPort[uint64(h>>16)*uint64(len(l.tx))>>16]
}

// RxQueues returns how many receive queues the link has; see nic.MultiQueue.
func (l *Link) RxQueues() int { return len(l.rxq) }

// RxQueuePackets returns how many packets receive queue i has delivered
// (0 for a queue the link does not have).
func (l *Link) RxQueuePackets(i int) uint64 {
	if i < 0 || i >= len(l.rxq) {
		return 0
	}
	return l.rxq[i].r.packets.Load()
}

// Stats returns the link's counters.
func (l *Link) Stats() nic.Stats { return l.ctr.Snapshot() }

// LeaveNetpoll takes the link's sockets out of the Go runtime's network
// poller, as NoNetpoll opens them (nic.NetpollLeaver): a device in poll
// mode asks for it when it opens. The sockets stay the same (each is
// duplicated and its net.UDPConn closed), with their options, steering
// and bound ports. Call it before the link is first used. It is all or
// nothing: if a socket cannot be duplicated (out of descriptors), the
// link keeps every socket as it was, still usable, and says why.
func (l *Link) LeaveNetpoll() error {
	if l.detached {
		return nil
	}
	socks := make([]*io.Closer, 0, len(l.rxq)+len(l.tx))
	for i := range l.rxq {
		socks = append(socks, &l.rxq[i].conn)
	}
	for i := range l.tx {
		socks = append(socks, &l.tx[i].conn)
	}
	fds := make([]*linkio.FD, 0, len(socks))
	for _, c := range socks {
		u, ok := (*c).(*net.UDPConn)
		if !ok {
			return fmt.Errorf("nic: udp link: a socket of type %T cannot leave the network poller", *c)
		}
		fd, err := linkio.Dup(u)
		if err != nil {
			for _, d := range fds {
				d.Close()
			}
			return fmt.Errorf("nic: udp link on %v: taking its sockets out of the network poller: %w", l.cfg.Addr, err)
		}
		fds = append(fds, fd)
	}
	for i, c := range socks {
		(*c).Close()
		*c = fds[i]
	}
	for i := range l.rxq {
		l.rxq[i].r.raw = fds[i]
	}
	for i := range l.tx {
		l.tx[i].raw = fds[len(l.rxq)+i]
	}
	l.detached = true
	return nil
}

// PollFDs returns the receive sockets' descriptors (nic.FDPoller).
func (l *Link) PollFDs() []int {
	fds := make([]int, 0, len(l.rxq))
	for i := range l.rxq {
		if err := l.rxq[i].r.raw.Control(func(fd uintptr) { fds = append(fds, int(fd)) }); err != nil {
			return nil // closed: a poll would find nothing anyway
		}
	}
	return fds
}

// OnHeld implements nic.FDPoller: the link holds no frames but those a
// PollQueue or a Recv returned, which the caller knows of.
func (l *Link) OnHeld(func()) {}

// Close closes every socket; a blocked Recv returns nic.ErrClosed.
func (l *Link) Close() error {
	l.closing.CloseOnce(func() {
		for i := range l.rxq { // by index: a receiver is using the queue's state
			l.rxq[i].conn.Close()
		}
		for _, s := range l.tx {
			s.conn.Close()
		}
	})
	return nil
}
