package linkio

import (
	"errors"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestFD checks a socket taken out of the network poller: Read waits in
// ppoll until a datagram comes, Write sends, and Close wakes a Read that
// is waiting, after which every call reports ErrFDClosed.
func TestFD(t *testing.T) {
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.22.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	at := c.LocalAddr().(*net.UDPAddr).AddrPort()
	s, err := Dup(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatalf("Dup closed the net.UDPConn: %v", err)
	}
	c.Close() // the duplicate keeps the socket and its binding
	peer, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.22.2:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()

	// Read: the first try finds nothing (the socket is non-blocking), the
	// datagram sent after it wakes the wait.
	buf := make([]byte, 64)
	tried := make(chan struct{})
	got := make(chan error, 1)
	tries := 0
	go func() {
		got <- s.Read(func(fd uintptr) bool {
			tries++
			if tries == 1 {
				close(tried)
			}
			n, _, err := unix.Recvfrom(int(fd), buf, 0)
			if err == unix.EAGAIN {
				return false
			}
			buf = buf[:n]
			return true
		})
	}()
	<-tried
	if _, err := peer.WriteToUDPAddrPort([]byte("ppoll"), at); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil || string(buf) != "ppoll" {
		t.Fatalf("Read: %v, %q after %d tries", err, buf, tries)
	}

	// Write runs its function on the socket.
	to := &unix.SockaddrInet4{Port: int(peer.LocalAddr().(*net.UDPAddr).Port), Addr: [4]byte{127, 0, 22, 2}}
	var werr error
	if err := s.Write(func(fd uintptr) bool { werr = unix.Sendto(int(fd), []byte("back"), 0, to); return werr != unix.EAGAIN }); err != nil || werr != nil {
		t.Fatalf("Write: %v, %v", err, werr)
	}
	peer.SetReadDeadline(time.Now().Add(time.Minute))
	if n, _, err := peer.ReadFromUDPAddrPort(buf[:cap(buf)]); err != nil || string(buf[:n]) != "back" {
		t.Fatalf("peer read %q, %v", buf[:n], err)
	}

	// Close wakes a Read that waits for a datagram that never comes.
	waiting := make(chan struct{})
	first := true
	go func() {
		got <- s.Read(func(uintptr) bool {
			if first {
				first = false
				close(waiting)
			}
			return false
		})
	}()
	<-waiting
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; !errors.Is(err, ErrFDClosed) {
		t.Fatalf("Read after Close: %v", err)
	}
	if err := s.Control(func(uintptr) { t.Error("Control ran after Close") }); !errors.Is(err, ErrFDClosed) {
		t.Fatalf("Control after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestFDCloseDoesNotBlockCalls checks that a call made while Close waits
// for a call in progress fails at once rather than wait behind Close: a
// poller holding a link's queue calls Control while the queue's receiver,
// inside Read, waits for that queue, and Close waits for the receiver.
func TestFDCloseDoesNotBlockCalls(t *testing.T) {
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.22.3:0")))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Dup(c)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	inside, queue := make(chan struct{}), make(chan struct{})
	read := make(chan error, 1)
	go func() {
		read <- s.Read(func(uintptr) bool {
			close(inside)
			<-queue // the receiver waits for the queue the poller holds
			return true
		})
	}()
	<-inside
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	for !s.closed.Load() { // Close has begun, and waits for the Read
		runtime.Gosched()
	}
	if err := s.Control(func(uintptr) { t.Error("Control ran after Close began") }); !errors.Is(err, ErrFDClosed) {
		t.Fatalf("Control while Close waits: %v", err)
	}
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a Read was in progress", err)
	default:
	}
	close(queue) // the poller lets go of the queue
	if err := <-read; err != nil {
		t.Fatalf("Read: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
}
