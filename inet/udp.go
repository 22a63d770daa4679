package inet

import "encoding/binary"

// UDP is a view of a UDP header, UDPHeaderLen bytes.
type UDP []byte

// Field offsets (RFC 768).
const (
	udpSrcPort  = 0
	udpDstPort  = 2
	udpLength   = 4
	udpChecksum = 6
)

// SrcPort returns the source port.
func (u UDP) SrcPort() uint16 { return binary.BigEndian.Uint16(u[udpSrcPort:]) }

// DstPort returns the destination port (4791 for RoCEv2).
func (u UDP) DstPort() uint16 { return binary.BigEndian.Uint16(u[udpDstPort:]) }

// Length returns the UDP length: header and payload, in bytes.
func (u UDP) Length() uint16 { return binary.BigEndian.Uint16(u[udpLength:]) }

// Checksum returns the checksum (0: none, which RoCEv2 over IPv4 allows).
func (u UDP) Checksum() uint16 { return binary.BigEndian.Uint16(u[udpChecksum:]) }

// SetSrcPort sets the source port.
func (u UDP) SetSrcPort(p uint16) { binary.BigEndian.PutUint16(u[udpSrcPort:], p) }

// SetDstPort sets the destination port.
func (u UDP) SetDstPort(p uint16) { binary.BigEndian.PutUint16(u[udpDstPort:], p) }

// SetLength sets the UDP length.
func (u UDP) SetLength(n uint16) { binary.BigEndian.PutUint16(u[udpLength:], n) }

// SetChecksum sets the checksum.
func (u UDP) SetChecksum(c uint16) { binary.BigEndian.PutUint16(u[udpChecksum:], c) }
