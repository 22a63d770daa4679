package linktest

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/nic"
	"golang.org/x/sys/unix"
)

// Namespace helpers for the link tests: a veth pair, links opened inside
// its namespaces, and a packet capture on a veth end.

// VethPair makes a veth pair of this MTU, each end in its own network
// namespace, removed at the end of t.
func VethPair(t *testing.T, mtu int) *netns.Pair {
	t.Helper()
	return netns.New(t, netns.Config{MTU: mtu})
}

// OpenIn opens a link inside a namespace and closes it at the end of t.
func OpenIn[L nic.Link](t *testing.T, e *netns.End, open func() (L, error)) L {
	t.Helper()
	var l L
	err := e.Do(func() (err error) {
		l, err = open()
		return
	})
	if err != nil {
		t.Fatalf("open link in namespace: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// Capture is an AF_PACKET socket on one interface: what the wire carries.
type Capture struct {
	FD int // the AF_PACKET socket
}

// StartCapture opens a capture on e's veth end, closed at the end of t.
func StartCapture(t *testing.T, e *netns.End) *Capture {
	t.Helper()
	var c Capture
	err := e.Do(func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return fmt.Errorf("AF_PACKET socket (needs CAP_NET_RAW): %w", err)
		}
		c.FD = fd
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 32<<20)
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: e.Index})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(c.FD) })
	return &c
}

// RoCE returns the RoCEv2 frames captured within d, decoded: at most want.
func (c *Capture) RoCE(t *testing.T, want int, d time.Duration) []bth.Frame {
	t.Helper()
	tv := unix.NsecToTimeval(int64(50 * time.Millisecond))
	unix.SetsockoptTimeval(c.FD, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	var out []bth.Frame
	deadline := time.Now().Add(d)
	for len(out) < want && time.Now().Before(deadline) {
		b := make([]byte, 70000)
		n, _, err := unix.Recvfrom(c.FD, b, 0)
		if err != nil {
			continue
		}
		f, err := bth.DecodeEthernet(b[:n])
		if err != nil {
			continue
		}
		out = append(out, f)
	}
	return out
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// IPv4ID returns a frame's IPv4 identification and whether DF is set.
func IPv4ID(f bth.Frame) (uint16, bool) {
	ip := f.IP()
	return binary.BigEndian.Uint16(ip[4:]), ip[6]&0x40 != 0
}

// Count returns how many captured frames within d satisfy match.
func (c *Capture) Count(t *testing.T, match func([]byte) bool, d time.Duration) int {
	t.Helper()
	tv := unix.NsecToTimeval(int64(20 * time.Millisecond))
	unix.SetsockoptTimeval(c.FD, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	n := 0
	b := make([]byte, 70000)
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		k, _, err := unix.Recvfrom(c.FD, b, 0)
		if err == nil && match(b[:k]) {
			n++
		}
	}
	return n
}

// Open opens a link and closes it at the end of t.
func Open[L nic.Link](t *testing.T, open func() (L, error)) L {
	t.Helper()
	l, err := open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// IsPortUnreachable reports whether an Ethernet frame is ICMP destination
// (port) unreachable, v4 or v6.
func IsPortUnreachable(b []byte) bool {
	if len(b) < 14+40+2 {
		return false
	}
	switch uint16(b[12])<<8 | uint16(b[13]) {
	case 0x0800:
		ihl := int(b[14]&0xf) * 4
		return b[14+9] == unix.IPPROTO_ICMP && len(b) > 14+ihl+1 && b[14+ihl] == 3 && b[14+ihl+1] == 3
	case 0x86dd:
		return b[14+6] == unix.IPPROTO_ICMPV6 && b[14+40] == 1 && b[14+41] == 4
	}
	return false
}
