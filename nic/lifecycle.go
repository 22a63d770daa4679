package nic

import (
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// closing records that a link was closed: its teardown runs once and
// Send and Recv report ErrClosed from then on.
type closing struct {
	done atomic.Bool
	once sync.Once
}

func (c *closing) isClosed() bool { return c.done.Load() }

func (c *closing) closeOnce(teardown func()) {
	c.once.Do(func() {
		c.done.Store(true)
		teardown()
	})
}

// mmsgSend is one sendmmsg over msgs[off:n], run through a RawConn so that
// a full socket buffer parks the goroutine in the poller instead of a
// thread. fn is made once so that a call does not allocate a closure.
type mmsgSend struct {
	msgs   []unix.Mmsghdr
	off, n int
	sent   int
	errno  unix.Errno
	fn     func(fd uintptr) bool
}

func (m *mmsgSend) init(msgs []unix.Mmsghdr) {
	m.msgs = msgs
	m.fn = func(fd uintptr) bool {
		n, e := mmsg(unix.SYS_SENDMMSG, fd, m.msgs[m.off:m.n], 0)
		if e == unix.EAGAIN || e == unix.EINTR {
			return false
		}
		m.sent, m.errno = n, e
		if e != 0 {
			m.sent = 0
		}
		return true
	}
}
