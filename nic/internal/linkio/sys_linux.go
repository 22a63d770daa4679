package linkio

import (
	"encoding/binary"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
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

// AttachDropAll installs a classic BPF filter that accepts nothing, so a
// socket that only sends (or only holds a port) never queues a packet.
func AttachDropAll(fd int) error {
	prog := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}
	return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: 1, Filter: &prog[0]})
}
