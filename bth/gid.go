package bth

import (
	"encoding/hex"
	"net/netip"
)

// GID is a 16-byte InfiniBand global identifier. In RoCEv2 a GID is an IP
// address: an IPv6 address, or an IPv4 address in its IPv4-mapped form
// (::ffff:a.b.c.d).
type GID [16]byte

// GIDFromAddr returns the GID of an IP address.
func GIDFromAddr(a netip.Addr) GID { return GID(a.As16()) }

// Addr returns the IP address the GID stands for (IPv4-mapped GIDs unmap).
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// IsIPv4 reports whether the GID is IPv4-mapped.
func (g GID) IsIPv4() bool { return netip.AddrFrom16(g).Is4In6() }

// IsZero reports whether every byte is zero.
func (g GID) IsZero() bool { return g == GID{} }

// String formats the GID as ibv_devinfo does: the IPv6 notation.
func (g GID) String() string { return netip.AddrFrom16(g).String() }

// Hex returns the 32 lowercase hex digits, the GID field of the rdma-core
// examples' exchange.
func (g GID) Hex() string { return hex.EncodeToString(g[:]) }
