package inet

import (
	"math/rand/v2"
	"net"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

func TestChecksumRFC1071(t *testing.T) {
	// RFC 1071 section 3's example: the words sum to 0x2ddf0, folded 0xddf2.
	b := []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}
	if got := Fold(Sum(0, b)); got != 0xddf2 {
		t.Errorf("Fold(Sum) = %#04x, want 0xddf2", got)
	}
	if got := Checksum(b); got != ^uint16(0xddf2) {
		t.Errorf("Checksum = %#04x, want %#04x", got, ^uint16(0xddf2))
	}
	// An odd last byte is padded with zero; the order of the words does
	// not matter; eight at a time equals two at a time.
	if Fold(Sum(0, []byte{0xab})) != 0xab00 || Fold(Sum(Sum(0, b[4:]), b[:4])) != 0xddf2 {
		t.Error("odd byte or order")
	}
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 40; n++ {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(r.Uint32())
		}
		var slow uint64
		for i := 0; i < n; i += 2 {
			w := uint64(p[i]) << 8
			if i+1 < n {
				w |= uint64(p[i+1])
			}
			slow += w
		}
		if Fold(Sum(0, p)) != Fold(slow) {
			t.Errorf("len %d: %#x, want %#x", n, Fold(Sum(0, p)), Fold(slow))
		}
	}
}

// TestUDPChecksum checks CalculateChecksum against gopacket's UDP
// serialisation (an independent implementation) over IPv4 and IPv6, odd
// and even lengths, and checks that a datagram carrying it verifies.
func TestUDPChecksum(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, v6 := range []bool{false, true} {
		for _, n := range []int{0, 1, 2, 27, 28, 255, 1024, 1025} {
			pay := make([]byte, n)
			for i := range pay {
				pay[i] = byte(r.Uint32())
			}
			udp := &layers.UDP{SrcPort: 49152 + layers.UDPPort(n), DstPort: 4791}
			var ip gopacket.SerializableLayer
			if v6 {
				l := &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolUDP, HopLimit: 64,
					SrcIP: net.ParseIP("fe80::1:2:3:4"), DstIP: net.ParseIP("2001:db8::ffff:9")}
				udp.SetNetworkLayerForChecksum(l)
				ip = l
			} else {
				l := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP,
					SrcIP: net.IPv4(192, 0, 2, 1), DstIP: net.IPv4(198, 18, 15, 200)}
				udp.SetNetworkLayerForChecksum(l)
				ip = l
			}
			buf := gopacket.NewSerializeBuffer()
			if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
				ip, udp, gopacket.Payload(pay)); err != nil {
				t.Fatal(err)
			}
			b := buf.Bytes()
			var pseudo uint64
			var u UDP
			if v6 {
				pseudo, u = IPv6(b).PseudoHeaderSum(UDPHeaderLen+n), UDP(b[IPv6HeaderLen:])
			} else {
				pseudo, u = IPv4(b).PseudoHeaderSum(UDPHeaderLen+n), UDP(b[IPv4HeaderLen:])
			}
			want := u.Checksum()
			if got := u.CalculateChecksum(pseudo); got != want {
				t.Errorf("v6 %v, %d bytes: %#04x, gopacket says %#04x", v6, n, got, want)
			}
			// The receiver's check: everything summed, checksum included, is all ones.
			if s := Fold(pseudo + Sum(0, u)); s != 0xffff {
				t.Errorf("v6 %v, %d bytes: the datagram sums to %#04x", v6, n, s)
			}
			u.SetChecksum(0xdead) // the field is taken as zero
			if got := u.CalculateChecksum(pseudo); got != want {
				t.Errorf("v6 %v, %d bytes: the old field counted", v6, n)
			}
		}
	}
}

// A datagram whose checksum computes to zero carries all ones (RFC 768).
func TestUDPChecksumZeroIsAllOnes(t *testing.T) {
	ip := IPv4(make([]byte, IPv4HeaderLen))
	ip.SetVersionIHL(IPv4HeaderLen)
	ip.SetProtocol(ProtoUDP)
	u := UDP(make([]byte, UDPHeaderLen+2))
	u.SetSrcPort(1)
	u.SetDstPort(4791)
	u.SetLength(uint16(len(u)))
	pseudo := ip.PseudoHeaderSum(len(u))
	// The payload word that brings the sum to 0xffff.
	w := 0xffff - Fold(pseudo+Sum(0, u))
	u[8], u[9] = byte(w>>8), byte(w)
	if got := u.CalculateChecksum(pseudo); got != 0xffff {
		t.Errorf("checksum %#04x, want 0xffff", got)
	}
}
