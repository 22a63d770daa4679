package bth

import (
	"encoding/binary"
	"hash/crc32"
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
// of the packet is hashed in a single call.

// icrcSeed is the CRC state after the 8 bytes of 0xff.
var icrcSeed = crc32.Update(0, crc32.IEEETable, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})

// maxMaskedLen bounds the masked prefix: IPv4 with 40 bytes of options or
// IPv6 (60), UDP (8), BTH (12).
const maxMaskedLen = 60 + UDPHeaderLen + BTHLen

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
	n += copy(m[n:], udp[:UDPHeaderLen])
	m[n-2] = 0xff // UDP checksum
	m[n-1] = 0xff
	n += copy(m[n:], roce[:BTHLen])
	m[n-BTHLen+4] = 0xff // BTH FECN, BECN, reserved
	crc := crcSmall(icrcSeed, m[:n])
	return crc32.Update(crc, crc32.IEEETable, roce[BTHLen:])
}

// crcSmall is crc32.Update for the short masked prefix. crc32.Update
// reaches its implementation through a function variable, so a stack array
// passed to it escapes and every ICRC would allocate (80 bytes, measured);
// this slicing-by-8 loop keeps m on the stack and costs about what the
// library does for under 64 bytes, where it does not use carry-less
// multiplication either.
func crcSmall(crc uint32, b []byte) uint32 {
	t := &slicing8
	crc = ^crc
	for ; len(b) >= 8; b = b[8:] {
		crc ^= binary.LittleEndian.Uint32(b)
		crc = t[7][byte(crc)] ^ t[6][byte(crc>>8)] ^ t[5][byte(crc>>16)] ^ t[4][crc>>24] ^
			t[3][b[4]] ^ t[2][b[5]] ^ t[1][b[6]] ^ t[0][b[7]]
	}
	for _, v := range b {
		crc = t[0][byte(crc)^v] ^ crc>>8
	}
	return ^crc
}

// slicing8[k][v] is the CRC register after byte v followed by k zero bytes.
var slicing8 = func() (t [8][256]uint32) {
	t[0] = *crc32.IEEETable
	for k := 1; k < 8; k++ {
		for i := range 256 {
			p := t[k-1][i]
			t[k][i] = p>>8 ^ t[0][byte(p)]
		}
	}
	return t
}()

func getICRC(b []byte) uint32    { return binary.LittleEndian.Uint32(b) }
func putICRC(b []byte, v uint32) { binary.LittleEndian.PutUint32(b, v) }
