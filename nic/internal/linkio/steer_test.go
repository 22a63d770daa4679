package linkio

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/nic"
)

// TestOwnerSteering sends datagrams to a port 4791 whose owner has two
// queues and a share server joined as the group's third socket, and checks
// which socket each lands on: the owner's QPs by nic.QueueOf, the members'
// QPs (at and above nic.MemberQPNBase) the server's; MADs to QP1 by the
// communication ID they name, REQs and SIDR_REQs by whether the owner
// listens on the service. Before the server joins, the owner gets all.
// It binds port 4791 on 127.0.18.12: run under flock /tmp/goroce-4791.lock.
func TestOwnerSteering(t *testing.T) {
	const owned = 0x0000000001060000 | 7471 // an rdma_cm TCP port's service ID
	sa := &unix.SockaddrInet4{Port: 4791, Addr: [4]byte{127, 0, 18, 12}}
	closed := map[int]bool{}
	closeFD := func(fd int) {
		if !closed[fd] {
			closed[fd] = true
			unix.Close(fd)
		}
	}
	open := func() int {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeFD(fd) })
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			t.Fatal(err)
		}
		if err := unix.Bind(fd, sa); err != nil {
			t.Fatal(err)
		}
		return fd
	}
	q0 := open()
	if err := AttachOwnerSteering(q0, 2, []uint64{0x0000000001060000 | 1, owned}); err != nil {
		t.Fatal(err)
	}
	q1 := open()
	tx, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(tx)
	// which sends p and returns the index of the socket it arrived on.
	which := func(p []byte, fds ...int) int {
		t.Helper()
		if err := unix.Sendto(tx, p, 0, sa); err != nil {
			t.Fatal(err)
		}
		pfd := make([]unix.PollFd, len(fds))
		for i, fd := range fds {
			pfd[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
		}
		if n, err := unix.Poll(pfd, 10000); err != nil || n != 1 {
			t.Fatalf("poll: %d ready (%v), want one socket", n, err)
		}
		for i, fd := range fds {
			if pfd[i].Revents&unix.POLLIN != 0 {
				unix.Read(fd, make([]byte, 512))
				return i
			}
		}
		panic("unreachable")
	}
	packet := func(qpn uint32) []byte {
		p := make([]byte, 256)
		binary.BigEndian.PutUint32(p[offDestQP:], qpn)
		return p
	}
	mad := func(attr uint16, first, remote uint32, service uint64) []byte {
		p := packet(1)
		binary.BigEndian.PutUint16(p[offAttrID:], attr)
		binary.BigEndian.PutUint32(p[offCMFirst:], first)
		binary.BigEndian.PutUint32(p[offCMRemote:], remote)
		binary.BigEndian.PutUint64(p[offService:], service)
		return p
	}
	const member = nic.MemberQPNBase | 0x12
	// Without a server: whatever the program says, the owner.
	if got := which(packet(member), q0, q1); got > 1 {
		t.Fatalf("a member's packet with no server: socket %d", got)
	}
	srv := open()
	for _, c := range []struct {
		what string
		p    []byte
		want int
	}{
		{"owner's QP 0x12", packet(0x12), nic.QueueOf(0x12, 2)},
		{"owner's QP 0x13", packet(0x13), nic.QueueOf(0x13, 2)},
		{"owner's highest QP", packet(nic.MemberQPNBase - 1), nic.QueueOf(nic.MemberQPNBase-1, 2)},
		{"a member's QP", packet(member), 2},
		{"REQ for the owner's service", mad(attrREQ, 0x1234, 0, owned), nic.QueueOf(1, 2)},
		{"REQ for another service", mad(attrREQ, 0x1234, 0, owned+1), 2},
		{"SIDR_REQ for the owner's service", mad(attrSIDRReq, 0x1234, 0, owned), nic.QueueOf(1, 2)},
		{"SIDR_REQ for another service", mad(attrSIDRReq, 0x1234, 0, 0x0000000001110000|9), 2},
		{"REP to the owner's ID", mad(0x0013, 0x80000005, 0x00000007, 0), nic.QueueOf(1, 2)},
		{"REP to a member's ID", mad(0x0013, 0x00000005, 0x80000007, 0), 2},
		{"SIDR_REP to the owner's request", mad(attrSIDRRep, 0x00000009, 0, 0), nic.QueueOf(1, 2)},
		{"SIDR_REP to a member's request", mad(attrSIDRRep, 0x80000009, 0, 0), 2},
	} {
		if got := which(c.p, q0, q1, srv); got != c.want {
			t.Errorf("%s: socket %d, want %d", c.what, got, c.want)
		}
	}
	// The owner gone, the server is the group: it gets everything.
	closeFD(q0)
	closeFD(q1)
	for _, p := range [][]byte{packet(0x12), packet(member), mad(attrREQ, 1, 0, owned)} {
		if got := which(p, srv); got != 0 {
			t.Fatalf("after the owner: socket %d", got)
		}
	}
}
