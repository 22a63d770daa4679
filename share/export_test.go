package share

import (
	"net"
	"net/netip"
	"time"
)

// SetJoinWait sets how long a join waits for its answer, returning the
// old bound.
func SetJoinWait(d time.Duration) time.Duration { old := joinWait; joinWait = d; return old }

// JoinConn sends a join on c, a connection already made to a server.
func JoinConn(c *net.UnixConn, addrs []netip.Addr) (*Member, error) { return join(c, addrs) }
