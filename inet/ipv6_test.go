package inet

import (
	"net/netip"
	"testing"
)

func TestIPv6(t *testing.T) {
	h := IPv6(make([]byte, IPv6HeaderLen))
	src, dst := netip.MustParseAddr("fe80::1"), netip.MustParseAddr("2001:db8::2")
	h.SetVersionTrafficClassFlowLabel(0x8a, 0x12345|0xfff00000) // only the low 20 bits of a flow label
	h.SetPayloadLength(1064)
	h.SetNextHeader(ProtoUDP)
	h.SetHopLimit(63)
	h.SetSrc(src)
	h.SetDst(dst)
	if h.Version() != 6 || h.TrafficClass() != 0x8a || h.FlowLabel() != 0x12345 || h.PayloadLength() != 1064 ||
		h.NextHeader() != ProtoUDP || h.HopLimit() != 63 || h.Src() != src || h.Dst() != dst {
		t.Fatalf("read back %x", []byte(h))
	}
	if h[0] != 0x68 || h[1] != 0xa1 || h[2] != 0x23 || h[3] != 0x45 {
		t.Fatalf("first word %x, want 68a12345", h[:4])
	}
}
