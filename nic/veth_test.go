package nic

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/netns"
	"golang.org/x/sys/unix"
)

// Namespace helpers for the link tests: a veth pair, links opened inside
// its namespaces, and a packet capture on a veth end.

func vethPair(t *testing.T, mtu int) *netns.Pair {
	t.Helper()
	return netns.New(t, netns.Config{MTU: mtu})
}

// openIn opens a link inside a namespace and closes it at the end of t.
func openIn[L Link](t *testing.T, e *netns.End, open func() (L, error)) L {
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

// capture is an AF_PACKET socket on one interface: what the wire carries.
type capture struct {
	fd int
}

func startCapture(t *testing.T, e *netns.End) *capture {
	t.Helper()
	var c capture
	err := e.Do(func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return fmt.Errorf("AF_PACKET socket (needs CAP_NET_RAW): %w", err)
		}
		c.fd = fd
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 32<<20)
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: e.Index})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(c.fd) })
	return &c
}

// roce returns the RoCEv2 frames captured within d, decoded.
func (c *capture) roce(t *testing.T, want int, d time.Duration) []bth.Frame {
	t.Helper()
	tv := unix.NsecToTimeval(int64(50 * time.Millisecond))
	unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	var out []bth.Frame
	deadline := time.Now().Add(d)
	for len(out) < want && time.Now().Before(deadline) {
		b := make([]byte, 70000)
		n, _, err := unix.Recvfrom(c.fd, b, 0)
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

func ipv4ID(f bth.Frame) (uint16, bool) {
	ip := f.IP()
	return binary.BigEndian.Uint16(ip[4:]), ip[6]&0x40 != 0
}

// count returns how many captured frames within d satisfy match.
func (c *capture) count(t *testing.T, match func([]byte) bool, d time.Duration) int {
	t.Helper()
	tv := unix.NsecToTimeval(int64(20 * time.Millisecond))
	unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	n := 0
	b := make([]byte, 70000)
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		k, _, err := unix.Recvfrom(c.fd, b, 0)
		if err == nil && match(b[:k]) {
			n++
		}
	}
	return n
}
