package inet

import (
	"bytes"
	"encoding/hex"
	"net/netip"
	"testing"
)

// A header rxe sent (the first packet of the lab's capture
// rc_pingpong_s64.pcap: 198.51.100.1 to 198.51.100.2, ID 0x881c, DF, TTL
// 64, UDP), checksum included.
const linuxIPv4 = "4500006c881c400040115dfac6336401c6336402"

func TestIPv4Read(t *testing.T) {
	b, _ := hex.DecodeString(linuxIPv4)
	h := IPv4(b)
	if h.Version() != 4 || h.HeaderLen() != 20 || h.TOS() != 0 || h.TotalLength() != 0x6c || h.ID() != 0x881c ||
		h.Flags() != IPv4DontFragment || h.FragmentOffset() != 0 || h.IsFragment() || h.TTL() != 64 ||
		h.Protocol() != ProtoUDP || h.Src() != netip.MustParseAddr("198.51.100.1") || h.Dst() != netip.MustParseAddr("198.51.100.2") ||
		len(h.Options()) != 0 {
		t.Fatalf("fields of %s", linuxIPv4)
	}
	if !h.IsChecksumValid() {
		t.Fatalf("checksum %#x, calculated %#x", h.Checksum(), h.CalculateChecksum())
	}
	for bit := range 8 * IPv4HeaderLen {
		c := bytes.Clone(b)
		c[bit/8] ^= 1 << (bit % 8)
		if bit/8 != 0 && IPv4(c).IsChecksumValid() { // the IHL bits change what is summed
			t.Errorf("bit %d flipped, checksum still valid", bit)
		}
	}
}

// TestIPv4Write: the setters write what the accessors read back, and a
// header built field by field is Linux's, byte for byte.
func TestIPv4Write(t *testing.T) {
	h := IPv4(make([]byte, IPv4HeaderLen))
	h.SetVersionIHL(IPv4HeaderLen)
	h.SetTotalLength(0x6c)
	h.SetID(0x881c)
	h.SetFlagsFragmentOffset(IPv4DontFragment, 0)
	h.SetTTL(64)
	h.SetProtocol(ProtoUDP)
	h.SetSrc(netip.MustParseAddr("::ffff:198.51.100.1"))
	h.SetDst(netip.MustParseAddr("198.51.100.2"))
	h.SetChecksum(h.CalculateChecksum())
	if got := hex.EncodeToString(h); got != linuxIPv4 {
		t.Fatalf("built %s, want %s", got, linuxIPv4)
	}
	h.SetTOS(0x8a)
	h.SetID(0xbeef)
	h.SetFlagsFragmentOffset(IPv4MoreFragments, 0x1abc)
	if h.TOS() != 0x8a || h.ID() != 0xbeef || h.Flags() != IPv4MoreFragments || h.FragmentOffset() != 0x1abc || !h.IsFragment() {
		t.Fatalf("read back %x", []byte(h))
	}
	// Options are summed too.
	o := IPv4(make([]byte, 24))
	copy(o, h)
	o.SetVersionIHL(24)
	o[22] = 0x12
	if o.HeaderLen() != 24 || len(o.Options()) != 4 || o.CalculateChecksum() == h.CalculateChecksum() {
		t.Fatalf("options: %x", []byte(o))
	}
}
