package inet

import (
	"net/netip"
	"testing"
)

func TestSetECN(t *testing.T) {
	v4 := make([]byte, IPv4HeaderLen)
	h := IPv4(v4)
	h.SetVersionIHL(IPv4HeaderLen)
	h.SetTOS(0xb8) // DSCP 46, Not-ECT
	h.SetSrc(netip.MustParseAddr("192.0.2.1"))
	h.SetDst(netip.MustParseAddr("192.0.2.2"))
	h.SetChecksum(h.CalculateChecksum())
	if ECN(v4) != NotECT {
		t.Fatalf("ECN %b", ECN(v4))
	}
	if !SetECN(v4, CE) || ECN(v4) != CE || h.TOS() != 0xbb || !h.IsChecksumValid() {
		t.Fatalf("IPv4 after SetECN(CE): tos %#x checksum valid %v", h.TOS(), h.IsChecksumValid())
	}
	v6 := make([]byte, IPv6HeaderLen)
	g := IPv6(v6)
	g.SetVersionTrafficClassFlowLabel(0x28|ECT0, 0x12345)
	if ECN(v6) != ECT0 {
		t.Fatalf("IPv6 ECN %b", ECN(v6))
	}
	if !SetECN(v6, CE) || g.TrafficClass() != 0x2b || g.FlowLabel() != 0x12345 {
		t.Fatalf("IPv6 after SetECN(CE): tclass %#x flow %#x", g.TrafficClass(), g.FlowLabel())
	}
	if SetECN([]byte{0x00}, CE) || ECN(nil) != NotECT {
		t.Fatal("SetECN or ECN took a datagram with no IP header")
	}
}
