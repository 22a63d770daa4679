package linkio

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// A group of sockets on one address and port 4791, joined in order, with
// the sharing program steering by QPN block: each packet reaches the
// socket its block is routed to, QP1 and unrouted blocks socket 0. When a
// socket leaves, the last one takes its index (ShareLeave), so its block
// must be routed to that index: the test pins the kernel's rule that the
// design of a shared port rests on.
func TestShareSteering(t *testing.T) {
	addr := netip.MustParseAddrPort("127.0.19.1:4791") // an address no other test binds
	const n = 4
	fds := make([]int, n)
	for i := range fds {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			t.Fatal(err)
		}
		if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().As4()}); err != nil {
			t.Fatal(err)
		}
		// A receive that waits forever would hang the test: a generous
		// bound, which only a lost packet reaches.
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 20}); err != nil {
			t.Fatal(err)
		}
		fds[i] = fd
	}
	// Socket i owns block i+4 (socket 0: QP1 and the rest).
	routes := []ShareRoute{{Block: 5, Index: 1}, {Block: 6, Index: 2}, {Block: 7, Index: 3}}
	if err := AttachShare(fds[0], routes); err != nil {
		t.Fatal(err)
	}
	tx, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	seq := 0
	// send sends a BTH whose second word (the reserved byte and the
	// destination QP) is qpn, or a packet of short bytes, and checks that
	// the socket fds[want] receives it.
	send := func(qpn uint32, short int, want int) {
		t.Helper()
		seq++
		b := make([]byte, 16)
		binary.BigEndian.PutUint32(b[4:], qpn)
		binary.BigEndian.PutUint32(b[12:], uint32(seq))
		if short > 0 {
			b = b[:short]
			b[0] = byte(seq)
		}
		if _, err := tx.Write(b); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		m, _, err := unix.Recvfrom(fds[want], buf, 0)
		if err != nil {
			t.Fatalf("QPN %#x (seq %d): socket %d received nothing: %v", qpn, seq, want, err)
		}
		got := int(buf[0])
		if m == 16 {
			got = int(binary.BigEndian.Uint32(buf[12:]))
		}
		if got != seq {
			t.Fatalf("QPN %#x: socket %d received packet %d, want %d", qpn, want, got, seq)
		}
	}
	for _, c := range []struct {
		qpn   uint32
		short int
		want  int
	}{
		{1, 0, 0}, // QP1: the CM's MADs
		{5<<QPNBlockShift | 0x11, 0, 1},
		{6<<QPNBlockShift + QPNBlockSize - 1, 0, 2},
		{7 << QPNBlockShift, 0, 3},
		{8 << QPNBlockShift, 0, 0}, // no one's block
		{0xff005011, 0, 1},         // the reserved byte set: only the 24-bit QPN counts
		{0, 3, 0},                  // too short to name a QP
	} {
		send(c.qpn, c.short, c.want)
	}
	// Socket 1 leaves: socket 3 moves to index 1.
	order := ShareLeave([]int{0, 1, 2, 3}, 1)
	if fmt.Sprint(order) != "[0 3 2]" {
		t.Fatalf("order after socket 1 left: %v", order)
	}
	unix.Close(fds[1])
	if err := AttachShare(fds[0], []ShareRoute{{Block: 6, Index: 2}, {Block: 7, Index: 1}}); err != nil {
		t.Fatal(err)
	}
	send(7<<QPNBlockShift|0x42, 0, 3)
	send(6<<QPNBlockShift, 0, 2)
	send(5<<QPNBlockShift, 0, 0) // the leaver's block: no one's now
}

// ShareProgram refuses what it cannot steer.
func TestShareProgramRefuses(t *testing.T) {
	for _, routes := range [][]ShareRoute{
		{{Block: 1 << (24 - QPNBlockShift), Index: 1}},
		{{Block: 3, Index: 1}, {Block: 3, Index: 2}},
		make([]ShareRoute, maxShareRoutes+1),
	} {
		if _, err := ShareProgram(routes); err == nil {
			t.Errorf("%d routes (first %+v): no error", len(routes), routes[0])
		}
	}
	p, err := ShareProgram(make([]ShareRoute, 0))
	if err != nil || len(p) != 4 || p[3].K != 0 {
		t.Fatalf("no routes: %v, %v", p, err)
	}
}
