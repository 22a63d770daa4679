package bth

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/goroce/goroce/inet"
)

// The ICRC (IBA vol 1 9.8.2, Annex A17.3.3) is CRC-32 as Ethernet and zlib
// compute it (reflected polynomial 0xEDB88320, not Castagnoli) over:
//
//   - 8 bytes of 0xff standing for the LRH that RoCEv2 does not carry;
//   - the IP header with its variant fields set to ones: IPv4 TOS, TTL and
//     header checksum; IPv6 traffic class, flow label and hop limit;
//   - the UDP header with its checksum set to ones;
//   - the BTH with byte 4 (FECN, BECN and six reserved bits) set to ones;
//   - every extended header, the payload and the pad.
//
// It is stored least significant byte first, like an Ethernet FCS.
// hash/crc32 with IEEETable is hardware accelerated and fastest over long
// spans, so the masked headers are copied to one small buffer and the rest
// of the packet is hashed in a single call. The buffer is hashed here, by
// slicing-by-8 (which is also what hash/crc32 does below 64 bytes): handing
// a stack buffer to hash/crc32 makes it escape to the heap, because the
// IEEE implementation is called through a function variable, and that cost
// an allocation per packet.

// icrcSeed is the CRC state after the 8 bytes of 0xff.
var icrcSeed = crc32.Update(0, crc32.IEEETable, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})

// maxMaskedLen bounds the masked prefix: IPv4 with 40 bytes of options or
// IPv6 (60), UDP (8), BTH (12).
const maxMaskedLen = 60 + inet.UDPHeaderLen + BTHLen

// ICRC computes the invariant CRC of a packet whose IP header is ip, UDP
// header udp, and transport bytes roce (BTH through pad, without the ICRC).
// ip must be an IPv4 header (with any options) or a 40-byte IPv6 header.
func ICRC(ip, udp, roce []byte) uint32 {
	var m [maxMaskedLen]byte
	n := copy(m[:], ip)
	if ip[0]>>4 == 6 {
		m[0] |= 0x0f // traffic class, high nibble
		m[1] = 0xff  // traffic class low nibble, flow label
		m[2] = 0xff
		m[3] = 0xff
		m[7] = 0xff // hop limit
	} else {
		m[1] = 0xff  // TOS: DSCP and ECN
		m[8] = 0xff  // TTL
		m[10] = 0xff // header checksum
		m[11] = 0xff
	}
	n += copy(m[n:], udp[:inet.UDPHeaderLen])
	m[n-2] = 0xff // UDP checksum
	m[n-1] = 0xff
	n += copy(m[n:], roce[:BTHLen])
	m[n-BTHLen+4] = 0xff // BTH FECN, BECN, reserved
	crc := slicing8(icrcSeed, m[:n])
	return crcUpdate(crc, roce[BTHLen:])
}

// crcTable8[k][b] is the CRC-32 (IEEE) state change of byte b followed by
// k zero bytes: eight lookups then advance the CRC by eight bytes at once.
var crcTable8 = func() (t [8][256]uint32) {
	t[0] = *crc32.IEEETable
	for b := range 256 {
		c := t[0][b]
		for k := 1; k < 8; k++ {
			c = t[0][c&0xff] ^ c>>8
			t[k][b] = c
		}
	}
	return
}()

// slicing8 continues the CRC-32 (IEEE) crc over p, as crc32.Update does.
func slicing8(crc uint32, p []byte) uint32 {
	t := &crcTable8
	crc = ^crc
	for ; len(p) >= 8; p = p[8:] {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = t[7][crc&0xff] ^ t[6][crc>>8&0xff] ^ t[5][crc>>16&0xff] ^ t[4][crc>>24] ^
			t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]]
	}
	for _, b := range p {
		crc = t[0][byte(crc)^b] ^ crc>>8
	}
	return ^crc
}

func getICRC(b []byte) uint32    { return binary.LittleEndian.Uint32(b) }
func putICRC(b []byte, v uint32) { binary.LittleEndian.PutUint32(b, v) }

// Seal computes the ICRC of a packet and stores it in the last four bytes
// of roce (BTH through ICRC), given the IP and UDP headers it travels with.
func Seal(ip, udp, roce []byte) {
	n := len(roce) - ICRCLen
	putICRC(roce[n:], ICRC(ip, udp, roce[:n]))
}
