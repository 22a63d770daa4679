package linkio

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/nic"
)

// Raw helpers for the batched socket calls. golang.org/x/net's ReadBatch
// and WriteBatch convert their messages on every call (allocating); these
// work on arrays the links keep, so a batch costs one system call and no
// allocation.

// Mmsg runs sendmmsg or recvmmsg on msgs.
func Mmsg(trap uintptr, fd uintptr, msgs []unix.Mmsghdr, flags int) (int, unix.Errno) {
	n, _, e := unix.Syscall6(trap, fd, uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), uintptr(flags), 0, 0)
	return int(n), e
}

// SockaddrLen is room for a sockaddr_in6, which also holds a sockaddr_in.
const SockaddrLen = unix.SizeofSockaddrInet6

// PutSockaddr writes addr:port as a sockaddr_in or sockaddr_in6 and returns
// its length. scope is the interface index for link-local IPv6.
func PutSockaddr(b *[SockaddrLen]byte, ap netip.AddrPort, scope uint32) uint32 {
	*b = [SockaddrLen]byte{}
	a := ap.Addr()
	if a.Is4() {
		binary.NativeEndian.PutUint16(b[0:], unix.AF_INET)
		binary.BigEndian.PutUint16(b[2:], ap.Port())
		v := a.As4()
		copy(b[4:8], v[:])
		return unix.SizeofSockaddrInet4
	}
	binary.NativeEndian.PutUint16(b[0:], unix.AF_INET6)
	binary.BigEndian.PutUint16(b[2:], ap.Port())
	v := a.As16()
	copy(b[8:24], v[:])
	binary.NativeEndian.PutUint32(b[24:], scope)
	return unix.SizeofSockaddrInet6
}

// SockaddrAddr reads the address and port of a sockaddr_in or sockaddr_in6.
func SockaddrAddr(b *[SockaddrLen]byte) (netip.AddrPort, bool) {
	port := binary.BigEndian.Uint16(b[2:])
	switch binary.NativeEndian.Uint16(b[0:]) {
	case unix.AF_INET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), true
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])), port), true
	}
	return netip.AddrPort{}, false
}

// CmsgSpace is CMSG_SPACE(4) on 64-bit Linux: a 16-byte header and 4
// bytes of data padded to 8. Every control message the links send or ask
// for carries an int or smaller.
const CmsgSpace = unix.SizeofCmsghdr + 8

// PutCmsg writes one control message with a 4-byte (int) or 2-byte value
// at b and returns the space it takes.
func PutCmsg(b []byte, level, typ int32, val uint32, size int) int {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level = level
	h.Type = typ
	h.SetLen(unix.SizeofCmsghdr + size)
	if size == 2 {
		binary.NativeEndian.PutUint16(b[unix.SizeofCmsghdr:], uint16(val))
	} else {
		binary.NativeEndian.PutUint32(b[unix.SizeofCmsghdr:], val)
	}
	return CmsgSpace
}

// ForCmsg calls fn with each control message's level, type and data.
func ForCmsg(b []byte, fn func(level, typ int32, data []byte)) {
	for len(b) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(b) {
			return
		}
		fn(h.Level, h.Type, b[unix.SizeofCmsghdr:l])
		sp := (l + 7) &^ 7
		if sp > len(b) {
			return
		}
		b = b[sp:]
	}
}

// CmsgInt reads a control message value the kernel delivers as an int or,
// for some options, a single byte.
func CmsgInt(d []byte) int {
	switch {
	case len(d) >= 4:
		return int(binary.NativeEndian.Uint32(d))
	case len(d) >= 2:
		return int(binary.NativeEndian.Uint16(d))
	case len(d) == 1:
		return int(d[0])
	}
	return 0
}

// AttachSteering attaches to a socket of a SO_REUSEPORT group the classic
// BPF program that picks the group's socket for each packet: the index
// nic.QueueOf gives for the packet's destination QP. For a UDP group the
// kernel runs it with the packet's data starting after the UDP header
// (net/core/sock_reuseport.c run_bpf_filter), so offset 4 is the BTH's
// reserved byte and 24-bit DestQP. A packet too short to hold them makes
// the load fail and the program return 0: the first socket, where the
// device counts it as malformed.
func AttachSteering(fd, n int) error {
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 4},
		{Code: unix.BPF_ALU | unix.BPF_AND | unix.BPF_K, K: 0xffffff},
		{Code: unix.BPF_ALU | unix.BPF_MOD | unix.BPF_K, K: uint32(n)},
		{Code: unix.BPF_RET | unix.BPF_A},
	}
	return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF, &unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]})
}

// The offsets the owner's steering program reads, from the start of the
// UDP payload (the BTH): a MAD to QP1 follows the BTH (12 bytes) and DETH
// (8); its attribute ID is 16 bytes into the MAD; the CM message after the
// MAD's 24-byte header starts with the sender's communication ID (or a
// SIDR message's request ID), then the receiver's, and a REQ's or
// SIDR_REQ's service ID is 8 bytes in (IBTA vol. 1 12.6.5, 12.6.8, 12.11.1).
const (
	offDestQP   = 4
	offAttrID   = 12 + 8 + 16
	offCMFirst  = 12 + 8 + 24
	offCMRemote = offCMFirst + 4
	offService  = offCMFirst + 8

	attrREQ     = 0x0010
	attrSIDRReq = 0x0017
	attrSIDRRep = 0x0018
)

// AttachOwnerSteering attaches to a socket of the SO_REUSEPORT group of a
// port that its owner shares (nic.MemberQPNBase) the classic BPF program
// that picks the group's socket for each packet: the owner's queues are
// sockets 0..n-1, a share server that joins later is socket n. A packet
// for a QP at or above MemberQPNBase goes to the server; a MAD to QP1 goes
// to the server when the communication ID it names is a member's (bit 31:
// a reply's receiver ID, a SIDR_REP's request ID), or when it is a REQ or
// SIDR_REQ for a service not in services (the owner's listens); the rest
// to the owner's queue of the QP (nic.QueueOf). Until a server joins,
// socket n does not exist and the kernel falls back to its hash over the
// owner's sockets: the owner gets every packet, as with no program. A
// packet too short for a load makes the program return 0: the owner's
// first socket, which counts it as malformed.
func AttachOwnerSteering(fd, n int, services []uint64) error {
	if len(services) > nic.MaxOwnerServices {
		return fmt.Errorf("%d services to steer, at most %d", len(services), nic.MaxOwnerServices)
	}
	type ins = unix.SockFilter
	ld := func(k uint32) ins { return ins{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: k} }
	ldh := func(k uint32) ins { return ins{Code: unix.BPF_LD | unix.BPF_H | unix.BPF_ABS, K: k} }
	ret := func(k uint32) ins { return ins{Code: unix.BPF_RET | unix.BPF_K, K: k} }
	// Jumps are written with symbolic targets and resolved at the end.
	type jmp struct {
		at     int
		op     uint16
		k      uint32
		jt, jf string
	}
	var prog []ins
	var jumps []jmp
	labels := map[string]int{}
	label := func(name string) { labels[name] = len(prog) }
	jump := func(op uint16, k uint32, jt, jf string) {
		jumps = append(jumps, jmp{len(prog), op, k, jt, jf})
		prog = append(prog, ins{})
	}
	next := ""
	server, owner1 := uint32(n), uint32(nic.QueueOf(1, n))

	prog = append(prog, ld(offDestQP), ins{Code: unix.BPF_ALU | unix.BPF_AND | unix.BPF_K, K: 0xffffff})
	jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, 1, "mad", next)
	jump(unix.BPF_JMP|unix.BPF_JGE|unix.BPF_K, nic.MemberQPNBase, "server", next)
	if n > 1 {
		prog = append(prog, ins{Code: unix.BPF_ALU | unix.BPF_MOD | unix.BPF_K, K: uint32(n)}, ins{Code: unix.BPF_RET | unix.BPF_A})
	} else {
		prog = append(prog, ret(0))
	}
	label("mad")
	prog = append(prog, ldh(offAttrID))
	jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, attrREQ, "request", next)
	jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, attrSIDRReq, "request", next)
	jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, attrSIDRRep, "sidrrep", next)
	prog = append(prog, ld(offCMRemote))
	jump(unix.BPF_JMP|unix.BPF_JSET|unix.BPF_K, 1<<31, "server", "owner")
	label("sidrrep")
	prog = append(prog, ld(offCMFirst))
	jump(unix.BPF_JMP|unix.BPF_JSET|unix.BPF_K, 1<<31, "server", "owner")
	label("request")
	for i, id := range services {
		miss := fmt.Sprintf("svc%d", i+1)
		prog = append(prog, ld(offService))
		jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, uint32(id>>32), next, miss)
		prog = append(prog, ld(offService+4))
		jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, uint32(id), "owner", miss)
		label(miss)
	}
	label("server")
	prog = append(prog, ret(server))
	label("owner")
	prog = append(prog, ret(owner1))
	for _, j := range jumps {
		off := func(l string) (uint8, error) {
			if l == "" {
				return 0, nil
			}
			d := labels[l] - j.at - 1
			if d < 0 || d > 255 {
				return 0, fmt.Errorf("steering program: jump to %s out of reach (%d)", l, d)
			}
			return uint8(d), nil
		}
		jt, err := off(j.jt)
		if err != nil {
			return err
		}
		jf, err := off(j.jf)
		if err != nil {
			return err
		}
		prog[j.at] = ins{Code: j.op, K: j.k, Jt: jt, Jf: jf}
	}
	return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF, &unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]})
}

// AttachDropAll installs a classic BPF filter that accepts nothing, so a
// socket that only sends (or only holds a port) never queues a packet.
func AttachDropAll(fd int) error {
	prog := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}
	return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: 1, Filter: &prog[0]})
}
