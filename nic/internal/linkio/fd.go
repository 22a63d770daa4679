package linkio

import (
	"errors"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// FD is a socket kept out of the Go runtime's network poller, used through
// the syscall.RawConn methods a net.UDPConn's SyscallConn offers. Every
// socket in the network poller wakes the runtime's poller thread for
// each event on it, whether or not a goroutine waits: each packet a
// polling thread takes off the socket itself, each send's freed buffer
// space. Where threads busy-poll the sockets (a device in poll mode),
// those wake-ups take the cores they spin on. A goroutine that must wait
// for an FD blocks its thread in ppoll instead, until the socket is ready
// or Close wakes it.
type FD struct {
	fd   int
	wake int // an eventfd Close makes readable: it ends every wait
	// refs counts the Control, Read and Write calls in progress: Close
	// waits for them (on cond) before it closes the descriptor, so that
	// its number is not reused under a call using it. A call that starts
	// once Close has begun fails at once rather than wait for it: a
	// poller holding a link's queue may call Control while the queue's
	// receiver, inside Read, waits for that queue.
	refs   atomic.Int64
	closed atomic.Bool
	mu     sync.Mutex
	cond   sync.Cond
}

// ErrFDClosed is what an FD's methods return once it is closed.
var ErrFDClosed = errors.New("linkio: socket closed")

// Dup returns a duplicate of c's socket as an FD, out of the network
// poller: the duplicate was never registered with it. The socket keeps
// its options, binding and non-blocking mode. c stays open; the caller
// closes it (Go's close removes it from the poller) once it no longer
// needs the original, so that a caller taking several sockets out can
// give up halfway with every original intact.
func Dup(c syscall.Conn) (*FD, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd, derr := -1, error(nil)
	if err := raw.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		derr = err
	}
	if derr != nil {
		return nil, derr
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	s := &FD{fd: fd, wake: wake}
	s.cond.L = &s.mu
	return s, nil
}

// acquire counts a call in, unless Close has begun.
func (s *FD) acquire() bool {
	s.refs.Add(1)
	if s.closed.Load() {
		s.release()
		return false
	}
	return true
}

// release counts a call out, waking Close after the last.
func (s *FD) release() {
	if s.refs.Add(-1) == 0 && s.closed.Load() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

// Control runs f on the descriptor; see syscall.RawConn.
func (s *FD) Control(f func(fd uintptr)) error {
	if !s.acquire() {
		return ErrFDClosed
	}
	defer s.release()
	f(uintptr(s.fd))
	return nil
}

// Read runs f until it returns true, waiting for the socket to be readable
// between calls; see syscall.RawConn.
func (s *FD) Read(f func(fd uintptr) bool) error { return s.until(f, unix.POLLIN) }

// Write runs f until it returns true, waiting for the socket to be
// writable between calls; see syscall.RawConn.
func (s *FD) Write(f func(fd uintptr) bool) error { return s.until(f, unix.POLLOUT) }

func (s *FD) until(f func(fd uintptr) bool, events int16) error {
	if !s.acquire() {
		return ErrFDClosed
	}
	defer s.release()
	for {
		if s.closed.Load() {
			return ErrFDClosed
		}
		if f(uintptr(s.fd)) {
			return nil
		}
		p := [2]unix.PollFd{{Fd: int32(s.fd), Events: events}, {Fd: int32(s.wake), Events: unix.POLLIN}}
		if _, err := unix.Ppoll(p[:], nil, nil); err != nil && err != unix.EINTR {
			return err
		}
	}
}

// Close wakes every goroutine waiting on the socket, waits for the calls
// in progress to return and closes it. Later calls return ErrFDClosed.
func (s *FD) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	// The eventfd is never read: it stays readable, so a wait that starts
	// after this write ends at once too.
	one := [8]byte{1}
	_, _ = unix.Write(s.wake, one[:])
	s.mu.Lock()
	for s.refs.Load() != 0 {
		s.cond.Wait()
	}
	s.mu.Unlock()
	unix.Close(s.wake)
	return unix.Close(s.fd)
}
