// Package inet holds views of the IPv4, IPv6 and UDP headers that RoCEv2
// rides on: byte slices with the fields' offsets named once and read and
// written through accessors, as gVisor's tcpip/header views are, and the
// Internet checksum (RFC 1071) with the pseudo-headers UDP's covers. Package
// bth keeps the InfiniBand transport headers; a frame's outer headers are
// read and written here.
package inet

// Header lengths and the protocol number RoCEv2 needs.
const (
	IPv4HeaderLen = 20 // without options
	IPv6HeaderLen = 40 // without extension headers
	UDPHeaderLen  = 8
	ProtoUDP      = 17 // IPv4 protocol, IPv6 next header
)
