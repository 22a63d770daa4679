// Package bth holds the RoCEv2 wire formats: the InfiniBand Base Transport
// Header and every extended transport header, the opcode table, 24-bit PSN
// arithmetic, the invariant CRC (ICRC), and the Ethernet/IP/UDP framing that
// carries them over UDP port 4791 (InfiniBand Architecture Specification
// volume 1, chapter 9, and Annex A17).
//
// Headers are byte-slice views with accessor methods in the style of gVisor's
// pkg/tcpip/header: a BTH is the 12 bytes it describes, reading a field
// reads the bytes, and nothing is copied or allocated per packet. Parse
// derives every header offset from the opcode table, as the specification
// does, and reports each way a packet can be malformed as a typed error.
//
// For tools and tests rather than the data path, Fields holds every field
// of a whole frame as plain values: DecodeFields fills it, Append builds a
// frame from it (lengths, checksum and ICRC computed) and AppendRaw writes
// it exactly as held. DecodeLink frames the link types captures come in.
package bth
