// Package afxdp is the link through an AF_XDP socket on one queue of an
// interface, fed by an XDP program that redirects RoCEv2 frames to it.
package afxdp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/internal/linkio"
	"github.com/goroce/goroce/nic/netdev"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Config configures an AF_XDP link.
type Config struct {
	Interface string       // the network interface
	Queue     int          // receive queue to bind; see Queues
	Addrs     []netip.Addr // nil: every address in the interface's GID table
	// Native attaches the XDP program in driver mode (XDP_FLAGS_DRV_MODE);
	// otherwise generic (SKB) mode, which every driver has.
	Native bool
	// ZeroCopy binds with XDP_ZEROCOPY (drivers that support it; not veth).
	ZeroCopy bool
	// Frames is the number of 4 KiB UMEM chunks, half for receiving and
	// half for sending; 0 means 4096 (16 MiB).
	Frames int

	noSG bool // bind without XDP_USE_SG, as on a kernel before 6.6 (tests)
}

// Link is a link through an AF_XDP socket on one queue of an interface.
//
// Received RoCEv2 frames are redirected by an XDP program (see
// xdpprog.go) into a UMEM shared with the kernel and lent to the caller in
// place, without a copy in copy mode's second half or a system call per
// packet. Frames longer than a 4 KiB chunk (MTU 4096 paths) arrive split
// over two chunks (XDP_USE_SG multi-buffer) and are copied into one buffer
// per frame. Send copies each frame, behind its Ethernet header, into
// UMEM chunks (two for a long frame, the first marked XDP_PKT_CONTD) and
// kicks the kernel once per batch. Before Linux 6.6 a socket has no
// multi-buffer frames: the link's MTU is then what one chunk holds (3826
// bytes of IP packet), and a path's MTU at most 2048.
//
// The link is a nic.Poller: a poll reads the rx ring's indexes, and makes
// no system call unless frames are there.
//
// Next hops are resolved as for afpacket.Link. Frames the program steers
// to us never reach the stack, so they draw no ICMP; but a frame arriving
// on another queue is passed to the stack, so the link holds the same UDP
// port 4791 guard sockets as afpacket.Link. On a multi-queue NIC, steer
// RoCEv2 to the bound queue (ethtool -N ... udp4 dst-port 4791 action Q).
type Link struct {
	cfg     Config
	ifindex int
	mac     [6]byte
	info    nic.Info
	fd      int
	file    *os.File
	raw     syscall.RawConn
	umem    []byte
	fill    xskRing
	comp    xskRing
	rx      xskRing
	tx      xskRing
	xsks    *ebpf.Map
	prog    *ebpf.Program
	xlink   link.Link
	eth     netdev.EthPath
	ctr     linkio.Counters
	txMu    sync.Mutex
	txFree  []uint64 // free tx chunk addresses
	xr      xdpRx
	frags   bool // the XDP program is frags-aware
	sg      bool // the socket takes frames over several chunks (XDP_USE_SG)
	closing linkio.Closing
	kickFn  func(fd uintptr) // l.kickFD (kick)
	statsMu sync.Mutex
	// unmapOnce: the rings and UMEM are unmapped by Close or by the
	// holder of the rx ring that lets go after it (see Close).
	unmapOnce sync.Once
}

const xdpChunk = 4096

// maxSingleChunkMTU is the largest IP packet a socket without XDP_USE_SG
// receives: copy mode writes a frame XDP_PACKET_HEADROOM (256) bytes into
// its chunk, behind which its Ethernet header takes 14.
const maxSingleChunkMTU = xdpChunk - 256 - 14

// Queues returns how many receive queues an interface has: netlink's
// IFLA_NUM_RX_QUEUES, else the rx-N entries of /sys/class/net/IF/queues.
// Netlink comes first because sysfs shows the namespace it was mounted in,
// not the caller's: inside a network namespace it may list another
// interface of the same name, or none.
func Queues(ifname string) (int, error) {
	if l, err := netlink.LinkByName(ifname); err == nil && l.Attrs().NumRxQueues > 0 {
		return l.Attrs().NumRxQueues, nil
	}
	m, err := filepath.Glob(filepath.Join("/sys/class/net", ifname, "queues", "rx-*"))
	if err != nil || len(m) == 0 {
		return 0, fmt.Errorf("nic: no receive queues found for %s (netlink or /sys/class/net)", ifname)
	}
	return len(m), nil
}

// Open opens an AF_XDP link.
func Open(cfg Config) (*Link, error) {
	ifc, err := net.InterfaceByName(cfg.Interface)
	if err != nil {
		return nil, fmt.Errorf("nic: afxdp %s: %w", cfg.Interface, err)
	}
	if len(ifc.HardwareAddr) != 6 {
		return nil, fmt.Errorf("nic: afxdp: %s is not an Ethernet interface", cfg.Interface)
	}
	nq, err := Queues(cfg.Interface)
	if err != nil {
		return nil, err
	}
	if cfg.Queue < 0 || cfg.Queue >= nq {
		return nil, fmt.Errorf("nic: afxdp: %s has %d receive queues; queue %d does not exist", cfg.Interface, nq, cfg.Queue)
	}
	if cfg.Frames <= 0 {
		cfg.Frames = 4096
	}
	cfg.Frames = 1 << bitsFor(cfg.Frames) // rings are powers of two
	if cfg.Addrs == nil {
		tab, err := netdev.GIDTable(cfg.Interface)
		if err != nil {
			return nil, err
		}
		for _, g := range tab {
			cfg.Addrs = append(cfg.Addrs, g.Addr)
		}
	}
	l := &Link{cfg: cfg, ifindex: ifc.Index, mac: [6]byte(ifc.HardwareAddr), fd: -1}
	mode := "generic"
	if cfg.Native {
		mode = "native"
	}
	l.info = nic.Info{Name: fmt.Sprintf("afxdp %s/%d %s", cfg.Interface, cfg.Queue, mode), MTU: ifc.MTU, Addrs: cfg.Addrs, MAC: ifc.HardwareAddr,
		PollNoSyscall: true} // a poll reads the rx ring's indexes
	if err := l.open(nq); err != nil {
		l.Close()
		return nil, err
	}
	if l.eth.Hops, err = netdev.NewNextHops(cfg.Interface, ifc.Index); err != nil {
		l.Close()
		return nil, err
	}
	if l.eth.Guards, err = netdev.GuardPort(cfg.Addrs, cfg.Interface); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

func bitsFor(n int) int {
	b := 0
	for 1<<b < n {
		b++
	}
	return b
}

func (l *Link) open(nq int) error {
	var err error
	l.xsks, l.prog, l.frags, err = loadRoCEXDP(nq)
	if err != nil {
		return err
	}
	l.fd, err = unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("nic: afxdp socket needs CAP_NET_RAW: %w", err)
		}
		return fmt.Errorf("nic: afxdp socket (kernel without CONFIG_XDP_SOCKETS?): %w", err)
	}
	n := l.cfg.Frames
	l.umem, err = unix.Mmap(-1, 0, n*xdpChunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("nic: afxdp UMEM: %w", err)
	}
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&l.umem[0]))), Len: uint64(len(l.umem)), Size: xdpChunk}
	if _, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(l.fd), unix.SOL_XDP, unix.XDP_UMEM_REG, uintptr(unsafe.Pointer(&reg)), unsafe.Sizeof(reg), 0); e != 0 {
		var rl unix.Rlimit
		_ = unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl)
		return fmt.Errorf("nic: afxdp: registering %d MiB of UMEM failed (RLIMIT_MEMLOCK is %d bytes; a process with CAP_IPC_LOCK is not bound by it; or use afxdp.Config.Frames to register less): %w", len(l.umem)>>20, rl.Cur, e)
	}
	half := uint32(n / 2)
	for _, o := range []struct{ opt, size int }{
		{unix.XDP_UMEM_FILL_RING, int(half)}, {unix.XDP_UMEM_COMPLETION_RING, int(half)},
		{unix.XDP_RX_RING, int(half)}, {unix.XDP_TX_RING, int(half)},
	} {
		if err := unix.SetsockoptInt(l.fd, unix.SOL_XDP, o.opt, o.size); err != nil {
			return fmt.Errorf("nic: afxdp ring size: %w", err)
		}
	}
	var off unix.XDPMmapOffsets
	sz := uint32(unsafe.Sizeof(off))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(l.fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS, uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&sz)), 0); e != 0 {
		return fmt.Errorf("nic: afxdp mmap offsets: %w", e)
	}
	desc := unsafe.Sizeof(unix.XDPDesc{})
	if l.fill, err = mapRing(l.fd, unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, half, 8); err != nil {
		return err
	}
	if l.comp, err = mapRing(l.fd, unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, half, 8); err != nil {
		return err
	}
	if l.rx, err = mapRing(l.fd, unix.XDP_PGOFF_RX_RING, off.Rx, half, desc); err != nil {
		return err
	}
	if l.tx, err = mapRing(l.fd, unix.XDP_PGOFF_TX_RING, off.Tx, half, desc); err != nil {
		return err
	}
	// First half of the UMEM receives (all of it in the fill ring), the
	// second half sends.
	for i := uint32(0); i < half; i++ {
		*l.fill.addr(*l.fill.prod + i) = uint64(i) * xdpChunk
	}
	l.fill.produce(half)
	l.txFree = make([]uint64, 0, half)
	for i := half; i < uint32(n); i++ {
		l.txFree = append(l.txFree, uint64(i)*xdpChunk)
	}
	flags := uint16(unix.XDP_COPY)
	if l.cfg.ZeroCopy {
		flags = unix.XDP_ZEROCOPY
	}
	l.sg = l.frags && !l.cfg.noSG
	if l.sg {
		flags |= unix.XDP_USE_SG
	}
	sa := &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(l.ifindex), QueueID: uint32(l.cfg.Queue)}
	bind := func() error {
		// A socket closed on this queue a moment ago releases it from a
		// kernel work queue (the buffer pool's deferred release): EBUSY
		// until then.
		err := unix.Bind(l.fd, sa)
		for deadline := time.Now().Add(2 * time.Second); errors.Is(err, unix.EBUSY) && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
			err = unix.Bind(l.fd, sa)
		}
		return err
	}
	err = bind()
	if errors.Is(err, unix.EINVAL) && l.sg {
		// Multi-buffer AF_XDP sockets came in Linux 6.6 (6.1 answers
		// EINVAL): without, a frame must fit one chunk.
		l.sg = false
		sa.Flags &^= unix.XDP_USE_SG
		err = bind()
	}
	if !l.sg {
		l.info.MTU = min(l.info.MTU, maxSingleChunkMTU)
	}
	if err != nil {
		hint := ""
		if l.cfg.ZeroCopy {
			hint = " (zero-copy needs driver support; veth has none)"
		}
		return fmt.Errorf("nic: afxdp bind %s queue %d%s: %w", l.cfg.Interface, l.cfg.Queue, hint, err)
	}
	if err := l.xsks.Update(uint32(l.cfg.Queue), uint32(l.fd), ebpf.UpdateAny); err != nil {
		return bpfErr("adding the socket to the XSKMAP", err)
	}
	mode := link.XDPGenericMode
	if l.cfg.Native {
		mode = link.XDPDriverMode
	}
	if l.xlink, err = link.AttachXDP(link.XDPOptions{Program: l.prog, Interface: l.ifindex, Flags: mode}); err != nil {
		hint := ""
		if l.cfg.Native && !l.frags {
			hint = " (native XDP above about 3400 bytes of MTU needs a frags-aware program, which this kernel refused)"
		}
		return bpfErr(fmt.Sprintf("attaching the XDP program to %s in %s mode%s", l.cfg.Interface, map[bool]string{true: "native", false: "generic"}[l.cfg.Native], hint), err)
	}
	if err := unix.SetNonblock(l.fd, true); err != nil {
		return err
	}
	l.file = os.NewFile(uintptr(l.fd), "afxdp")
	l.raw, err = l.file.SyscallConn()
	l.kickFn = l.kickFD
	l.xr.init(l)
	return err
}

// Info describes the link.
func (l *Link) Info() nic.Info { return l.info }

// SrcPort returns the port rxe would use.
func (l *Link) SrcPort(qpn uint32) uint16 { return nic.RoCEv2SrcPort(qpn) }

// Stats returns the counters; kernel drops come from XDP_STATISTICS (rx
// dropped, rx ring full, fill ring empty).
func (l *Link) Stats() nic.Stats {
	l.statsMu.Lock()
	defer l.statsMu.Unlock()
	s := l.ctr.Snapshot()
	if l.raw != nil {
		var st unix.XDPStatistics
		sz := uint32(unsafe.Sizeof(st))
		_ = l.raw.Control(func(fd uintptr) {
			_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_XDP, unix.XDP_STATISTICS, uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&sz)), 0)
			if e == 0 {
				s.RxKernelDrops = st.Rx_dropped + st.Rx_ring_full + st.Rx_fill_ring_empty_descs
			}
		})
	}
	return s
}

// Close detaches the program and frees the socket, rings and UMEM. The
// rings and UMEM are unmapped once nobody holds the rx ring: frames a
// receiver or a poller holds stay readable until it lets go (its next
// Recv, EndPoll or EndRecv), which then unmaps them.
func (l *Link) Close() error {
	l.closing.CloseOnce(func() {
		if l.xlink != nil {
			l.xlink.Close()
		}
		// Closing the file waits for a receiver inside Read's function,
		// which reads the ring's indexes without the hold.
		if l.file != nil {
			l.file.Close()
		} else if l.fd >= 0 {
			unix.Close(l.fd)
		}
		if l.xr.hold.TryLock() {
			l.unmap()
			l.xr.hold.Unlock()
		}
		if l.prog != nil {
			l.prog.Close()
		}
		if l.xsks != nil {
			l.xsks.Close()
		}
		l.eth.Close()
	})
	return nil
}

// unmap frees the rings and the UMEM, once (under the rx ring's hold; it
// takes txMu, which a Send holds while it uses the tx rings).
func (l *Link) unmap() {
	l.unmapOnce.Do(func() {
		l.txMu.Lock()
		defer l.txMu.Unlock()
		for _, r := range []*xskRing{&l.fill, &l.comp, &l.rx, &l.tx} {
			r.unmap()
		}
		if l.umem != nil {
			unix.Munmap(l.umem)
			l.umem = nil
		}
	})
}
