package inet

// ECN codepoints: the low two bits of the IPv4 TOS byte and of the IPv6
// traffic class (RFC 3168 section 5).
const (
	NotECT uint8 = 0b00 // the sender does not do ECN
	ECT1   uint8 = 0b01 // ECN-capable transport (1)
	ECT0   uint8 = 0b10 // ECN-capable transport (0): what RoCEv2 HCAs send
	CE     uint8 = 0b11 // congestion experienced: set by a congested queue
	// ECNMask selects the ECN bits of a TOS or traffic class byte.
	ECNMask uint8 = 0b11
)

// ECN returns the ECN codepoint of an IP datagram (IPv4 or IPv6), or
// NotECT when dg holds no IP header.
func ECN(dg []byte) uint8 {
	switch {
	case len(dg) >= IPv4HeaderLen && IPv4(dg).Version() == 4:
		return IPv4(dg).TOS() & ECNMask
	case len(dg) >= IPv6HeaderLen && IPv6(dg).Version() == 6:
		return IPv6(dg).TrafficClass() & ECNMask
	}
	return NotECT
}

// SetECN writes the ECN codepoint of an IP datagram, keeping the IPv4
// header checksum right, and reports whether dg held an IP header. The
// ICRC does not cover these bits (IBA A17.8: the TOS is masked), so a
// RoCEv2 packet stays valid.
func SetECN(dg []byte, ecn uint8) bool {
	switch {
	case len(dg) >= IPv4HeaderLen && IPv4(dg).Version() == 4:
		h := IPv4(dg)
		h.SetTOS(h.TOS()&^ECNMask | ecn&ECNMask)
		h.SetChecksum(h.CalculateChecksum())
		return true
	case len(dg) >= IPv6HeaderLen && IPv6(dg).Version() == 6:
		h := IPv6(dg)
		tc := h.TrafficClass()&^ECNMask | ecn&ECNMask
		h.SetVersionTrafficClassFlowLabel(tc, h.FlowLabel())
		return true
	}
	return false
}
