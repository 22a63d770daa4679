// Package afpacket is the link that sends and receives whole Ethernet
// frames on one interface through AF_PACKET sockets (CAP_NET_RAW).
package afpacket

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/internal/linkio"
	"github.com/goroce/goroce/nic/netdev"
	"golang.org/x/sys/unix"
)

// Config configures an AF_PACKET link.
type Config struct {
	// Interface is the network interface the link sends and receives on.
	Interface string
	// Addrs are the local addresses the link answers for; nil means every
	// address in the interface's GID table.
	Addrs []netip.Addr
	// VLAN, if 1..4094, tags sent frames with this VLAN ID and Priority
	// (802.1p PCP, 0..7). Received frames are accepted tagged or not.
	VLAN     uint16
	Priority uint8 // 802.1p PCP of tagged frames
	// NoGuard leaves out the UDP sockets that keep the host from answering
	// the peers' packets with ICMP port unreachable (for tests that show
	// the ICMP happens without them).
	NoGuard bool
}

// Link is a link sending and receiving whole Ethernet frames on one
// interface through AF_PACKET sockets (CAP_NET_RAW).
//
// Batched sendmmsg/recvmmsg rather than a PACKET_MMAP ring: one system
// call per batch either way; a TPACKET_V3 receive ring hands blocks over
// only when full or when its retire timer fires (milliseconds), which
// costs latency at low rates, and V2 rings need a poll per wake-up too.
// The sockets cost one kernel copy per packet, small beside the ICRC at
// 4 KiB. The send socket skips the qdisc (PACKET_QDISC_BYPASS) and the
// receive socket ignores our own outgoing frames.
//
// The host's stack still sees every received frame. It would answer each
// RoCEv2 packet with ICMP port unreachable (no socket on port 4791), so
// the link holds, for each local address, a UDP socket bound to port 4791
// whose BPF filter drops everything: the stack delivers to it, the filter
// discards, no ICMP is sent.
type Link struct {
	cfg     Config
	ifindex int
	mac     [6]byte
	info    nic.Info
	rxf     *os.File
	txf     *os.File
	rxRaw   syscall.RawConn
	txRaw   syscall.RawConn
	eth     netdev.EthPath
	ctr     linkio.Counters
	txPool  sync.Pool
	r       afpRx
	closing linkio.Closing
	statsMu sync.Mutex
}

// Open opens an AF_PACKET link on an interface.
func Open(cfg Config) (*Link, error) {
	ifc, err := net.InterfaceByName(cfg.Interface)
	if err != nil {
		return nil, fmt.Errorf("nic: afpacket: %w", err)
	}
	if len(ifc.HardwareAddr) != 6 {
		return nil, fmt.Errorf("nic: afpacket: %s is not an Ethernet interface", cfg.Interface)
	}
	if cfg.VLAN > 4094 || cfg.Priority > 7 {
		return nil, fmt.Errorf("nic: afpacket: VLAN %d priority %d out of range", cfg.VLAN, cfg.Priority)
	}
	l := &Link{cfg: cfg, ifindex: ifc.Index, mac: [6]byte(ifc.HardwareAddr)}
	if cfg.Addrs == nil {
		tab, err := netdev.GIDTable(cfg.Interface)
		if err != nil {
			return nil, err
		}
		for _, g := range tab {
			cfg.Addrs = append(cfg.Addrs, g.Addr)
		}
		l.cfg.Addrs = cfg.Addrs
	}
	// The receive socket takes UDP GSO super-frames with their virtio
	// header and cuts them (PACKET_VNET_HDR): GRO, in nic.Offload's terms.
	l.info = nic.Info{Name: "afpacket " + cfg.Interface, MTU: ifc.MTU, Addrs: cfg.Addrs, MAC: ifc.HardwareAddr, Offload: nic.OffloadGRO}
	if err := l.open(); err != nil {
		l.Close()
		return nil, err
	}
	if l.eth.Hops, err = netdev.NewNextHops(cfg.Interface, ifc.Index); err != nil {
		l.Close()
		return nil, err
	}
	if !cfg.NoGuard {
		if l.eth.Guards, err = netdev.GuardPort(cfg.Addrs, cfg.Interface); err != nil {
			l.Close()
			return nil, err
		}
	}
	l.r.init(l)
	l.txPool.New = func() any { return newAFPTx(l) }
	return l, nil
}

func (l *Link) open() error {
	prog, err := roceFilter(l.cfg.Addrs)
	if err != nil {
		return err
	}
	// Receive socket: filter first, then bind to ETH_P_ALL, so no
	// unfiltered frame is ever queued.
	rx, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("nic: afpacket needs CAP_NET_RAW: %w", err)
		}
		return fmt.Errorf("nic: afpacket socket: %w", err)
	}
	l.rxf = os.NewFile(uintptr(rx), "afpacket-rx")
	if err := attachFilter(rx, prog); err != nil {
		return fmt.Errorf("nic: afpacket filter: %w", err)
	}
	_ = unix.SetsockoptInt(rx, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
	_ = unix.SetsockoptInt(rx, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1)
	// A virtio_net_hdr before each frame says when it is a UDP GSO
	// super-frame, which Recv then cuts (see afpRx).
	if err := unix.SetsockoptInt(rx, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
		return fmt.Errorf("nic: afpacket PACKET_VNET_HDR: %w", err)
	}
	if err := unix.Bind(rx, &unix.SockaddrLinklayer{Protocol: htons16(unix.ETH_P_ALL), Ifindex: l.ifindex}); err != nil {
		return fmt.Errorf("nic: afpacket bind %s: %w", l.cfg.Interface, err)
	}
	// Send socket: protocol 0 receives nothing; the kernel takes the
	// frame's protocol from its Ethernet header.
	tx, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("nic: afpacket socket: %w", err)
	}
	l.txf = os.NewFile(uintptr(tx), "afpacket-tx")
	_ = unix.SetsockoptInt(tx, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 8<<20)
	_ = unix.SetsockoptInt(tx, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1)
	if err := unix.Bind(tx, &unix.SockaddrLinklayer{Protocol: 0, Ifindex: l.ifindex}); err != nil {
		return fmt.Errorf("nic: afpacket bind %s: %w", l.cfg.Interface, err)
	}
	if l.rxRaw, err = l.rxf.SyscallConn(); err != nil {
		return err
	}
	l.txRaw, err = l.txf.SyscallConn()
	return err
}

// Info describes the link.
func (l *Link) Info() nic.Info { return l.info }

// SrcPort returns the port rxe would use: any port can be sent from here.
func (l *Link) SrcPort(qpn uint32) uint16 { return nic.RoCEv2SrcPort(qpn) }

// Stats returns the counters, including the kernel's receive drops
// (PACKET_STATISTICS, which resets on every read, so it is accumulated).
func (l *Link) Stats() nic.Stats {
	l.statsMu.Lock()
	defer l.statsMu.Unlock()
	var st unix.TpacketStats
	sz := uint32(unsafe.Sizeof(st))
	if l.rxRaw != nil {
		_ = l.rxRaw.Control(func(fd uintptr) {
			_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_PACKET, unix.PACKET_STATISTICS, uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&sz)), 0)
			if e == 0 {
				l.ctr.RxKernelDrops.Add(uint64(st.Drops))
			}
		})
	}
	return l.ctr.Snapshot()
}

// Close closes the sockets and stops the resolver.
func (l *Link) Close() error {
	l.closing.CloseOnce(func() {
		if l.rxf != nil {
			l.rxf.Close()
		}
		if l.txf != nil {
			l.txf.Close()
		}
		l.eth.Close()
	})
	return nil
}

func htons16(v uint16) uint16 { return v<<8 | v>>8 }
