// Package linkio holds the plumbing the socket links of package nic's
// subpackages share: their counters, their close-once state, batched
// sendmmsg and recvmmsg over arrays they keep, sockaddr and control
// message encoding, and the classic BPF programs they attach to sockets.
package linkio

import (
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Closing records that a link was closed: its teardown runs once and
// Send and Recv report ErrClosed from then on.
type Closing struct {
	done atomic.Bool
	once sync.Once
}

// IsClosed reports whether CloseOnce has run.
func (c *Closing) IsClosed() bool { return c.done.Load() }

// CloseOnce marks the link closed and runs teardown, the first time only.
func (c *Closing) CloseOnce(teardown func()) {
	c.once.Do(func() {
		c.done.Store(true)
		teardown()
	})
}

// MmsgSend is one sendmmsg over Msgs[Off:N], run through a RawConn so that
// a full socket buffer parks the goroutine in the poller instead of a
// thread. Fn is made once so that a call does not allocate a closure.
type MmsgSend struct {
	Msgs   []unix.Mmsghdr        // the messages, set by Init
	Off, N int                   // the messages to send: Msgs[Off:N]
	Sent   int                   // how many the last call sent
	Errno  unix.Errno            // its error, when it sent none
	Fn     func(fd uintptr) bool // for RawConn.Write
}

// Init sets the messages and makes Fn.
func (m *MmsgSend) Init(msgs []unix.Mmsghdr) {
	m.Msgs = msgs
	m.Fn = func(fd uintptr) bool {
		n, e := Mmsg(unix.SYS_SENDMMSG, fd, m.Msgs[m.Off:m.N], 0)
		if e == unix.EAGAIN || e == unix.EINTR {
			return false
		}
		m.Sent, m.Errno = n, e
		if e != 0 {
			m.Sent = 0
		}
		return true
	}
}
