package share

import (
	"net"
	"net/netip"
)

// JoinConn sends a join on c, a connection already made to a server.
func JoinConn(c *net.UnixConn, addrs []netip.Addr) (*Member, error) { return join(c, addrs) }
