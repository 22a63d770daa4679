package vnet

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/goroce/goroce/inet"
)

// frame builds an Ethernet/IP/UDP frame with gopacket, checksums computed:
// the independent oracle for what the kernel would put on the wire.
func frame(t *testing.T, v6, vlan bool, id uint16, payload []byte) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}
	var ls []gopacket.SerializableLayer
	ls = append(ls, eth)
	udp := &layers.UDP{SrcPort: 0xc001, DstPort: 4791}
	if vlan {
		eth.EthernetType = layers.EthernetTypeDot1Q
		ls = append(ls, &layers.Dot1Q{VLANIdentifier: 5, Type: layers.EthernetTypeIPv4})
		if v6 {
			ls[1].(*layers.Dot1Q).Type = layers.EthernetTypeIPv6
		}
	}
	if v6 {
		if !vlan {
			eth.EthernetType = layers.EthernetTypeIPv6
		}
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP,
			SrcIP: net.ParseIP("fd00::1"), DstIP: net.ParseIP("fd00::2")}
		udp.SetNetworkLayerForChecksum(ip)
		ls = append(ls, ip)
	} else {
		if !vlan {
			eth.EthernetType = layers.EthernetTypeIPv4
		}
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Id: id, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolUDP,
			SrcIP: net.IP{198, 18, 0, 1}, DstIP: net.IP{198, 18, 0, 2}}
		udp.SetNetworkLayerForChecksum(ip)
		ls = append(ls, ip)
	}
	ls = append(ls, udp, gopacket.Payload(payload))
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// partial turns a frame's UDP checksum into what a CHECKSUM_PARTIAL skb
// carries: the folded pseudo-header sum, and returns the header saying so.
func partial(f []byte, v6, vlan bool) Hdr {
	l3 := 14
	if vlan {
		l3 = 18
	}
	ihl := 20
	if v6 {
		ihl = 40
	}
	l4 := l3 + ihl
	ulen := uint64(binary.BigEndian.Uint16(f[l4+4:]))
	var ps uint64
	if v6 {
		ps = inet.Sum(0, f[l3+8:l3+40])
	} else {
		ps = inet.Sum(0, f[l3+12:l3+20])
	}
	binary.BigEndian.PutUint16(f[l4+6:], inet.Fold(ps+17+ulen))
	return Hdr{Flags: FlagNeedsCsum, CsumStart: uint16(l4), CsumOffset: 6, HdrLen: uint16(l4 + 8)}
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

func TestHeaderRoundTrip(t *testing.T) {
	h := Hdr{Flags: FlagNeedsCsum, GSOType: GSOUDPL4, HdrLen: 42, GSOSize: 1080, CsumStart: 34, CsumOffset: 6}
	var b [HdrLen]byte
	h.Put(b[:])
	if Parse(b[:]) != h || !h.IsUDPGSO() {
		t.Fatalf("%+v -> % x -> %+v", h, b, Parse(b[:]))
	}
}

func TestCompleteChecksum(t *testing.T) {
	for _, c := range []struct {
		name     string
		v6, vlan bool
		n        int
	}{{"ipv4", false, false, 1000}, {"ipv4-odd", false, false, 1001}, {"ipv6", true, false, 4096},
		{"ipv6-vlan", true, true, 7}, {"ipv4-vlan-empty", false, true, 0}} {
		t.Run(c.name, func(t *testing.T) {
			want := frame(t, c.v6, c.vlan, 0, pattern(c.n))
			got := bytes.Clone(want)
			h := partial(got, c.v6, c.vlan)
			if bytes.Equal(got, want) {
				t.Fatal("partial checksum equals the full one: the test proves nothing")
			}
			if err := CompleteChecksum(got, h); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("checksum %#x, gopacket's %#x", got[h.CsumStart+6:h.CsumStart+8], want[h.CsumStart+6:h.CsumStart+8])
			}
		})
	}
}

// TestUDPSegment cuts super-frames of several sizes and compares every
// datagram with the one gopacket builds for the same payload slice.
func TestUDPSegment(t *testing.T) {
	for _, c := range []struct {
		name     string
		v6, vlan bool
		gso, n   int
	}{
		{"ipv4-even", false, false, 1040, 1040 * 5},
		{"ipv4-short-last", false, false, 1040, 1040*3 + 17},
		{"ipv4-one", false, false, 4112, 100},
		{"ipv6", true, false, 4112, 4112*2 + 1},
		{"ipv6-vlan", true, true, 1000, 3000},
		{"ipv4-vlan", false, true, 512, 513},
	} {
		t.Run(c.name, func(t *testing.T) {
			const id0 = 0xfffe // identifications wrap
			pay := pattern(c.n)
			super := frame(t, c.v6, c.vlan, id0, pay)
			h := partial(super, c.v6, c.vlan)
			h.GSOType, h.GSOSize = GSOUDPL4, uint16(c.gso)
			n, hl, err := UDPSegments(super, h)
			if err != nil {
				t.Fatal(err)
			}
			if want := (c.n + c.gso - 1) / c.gso; n != want || hl != int(h.CsumStart)+8 {
				t.Fatalf("%d segments, header %d; want %d, %d", n, hl, want, h.CsumStart+8)
			}
			dst := make([]byte, hl+c.gso)
			for i := range n {
				k, err := UDPSegment(dst, super, h, i)
				if err != nil {
					t.Fatal(err)
				}
				want := frame(t, c.v6, c.vlan, id0+uint16(i), pay[i*c.gso:min((i+1)*c.gso, c.n)])
				want = want[:hl+min(c.gso, c.n-i*c.gso)] // gopacket pads to Ethernet's 60 bytes; segments are not padded
				if !bytes.Equal(dst[:k], want) {
					t.Fatalf("segment %d:\n got % x\nwant % x", i, dst[:min(k, 64)], want[:min(len(want), 64)])
				}
			}
			if _, err := UDPSegment(dst, super, h, n); err == nil {
				t.Fatal("segment past the end accepted")
			}
		})
	}
}

func TestMalformed(t *testing.T) {
	f := frame(t, false, false, 0, pattern(100))
	for _, h := range []Hdr{
		{Flags: FlagNeedsCsum, CsumStart: 400, CsumOffset: 6},
		{Flags: FlagNeedsCsum, CsumStart: 34, CsumOffset: 200},
	} {
		if CompleteChecksum(f, h) == nil {
			t.Errorf("%+v accepted", h)
		}
	}
	if _, _, err := UDPSegments(f, Hdr{GSOType: GSOUDPL4, GSOSize: 10}); err == nil {
		t.Error("GSO without a checksum offset accepted")
	}
	if _, _, err := UDPSegments(f[:10], Hdr{Flags: FlagNeedsCsum, GSOType: GSOUDPL4, GSOSize: 10, CsumStart: 34, CsumOffset: 6}); err == nil {
		t.Error("truncated frame accepted")
	}
}

func TestNoAllocs(t *testing.T) {
	super := frame(t, false, false, 1, pattern(1040*8))
	h := partial(super, false, false)
	h.GSOType, h.GSOSize = GSOUDPL4, 1040
	dst := make([]byte, 2000)
	if a := testing.AllocsPerRun(100, func() {
		n, _, _ := UDPSegments(super, h)
		for i := range n {
			UDPSegment(dst, super, h, i)
		}
	}); a != 0 {
		t.Fatalf("%v allocations", a)
	}
}

func TestFixUDPChecksum(t *testing.T) {
	for _, c := range []struct {
		name     string
		v6, vlan bool
	}{{"ipv4", false, false}, {"ipv6", true, false}, {"ipv6-vlan", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			pay := pattern(301)
			got := frame(t, c.v6, c.vlan, 0, pay)
			_, l4, ok := UDP(got)
			if !ok {
				t.Fatal("not found as UDP")
			}
			got[l4+8+100] ^= 0x10 // the payload changes, the checksum is now wrong
			pay[100] ^= 0x10
			if !FixUDPChecksum(got) {
				t.Fatal("not fixed")
			}
			if fixed := frame(t, c.v6, c.vlan, 0, pay); !bytes.Equal(got, fixed) {
				// gopacket computed the checksum for the changed payload.
				t.Fatalf("checksum %#x, gopacket's %#x", got[l4+6:l4+8], fixed[l4+6:l4+8])
			}
		})
	}
	if FixUDPChecksum(make([]byte, 60)) {
		t.Fatal("a frame of zeros taken for UDP")
	}
}

// FuzzVnet: whatever the frame and header say, nothing panics or writes
// outside dst, and a segment is never longer than its headers and GSOSize.
func FuzzVnet(f *testing.F) {
	t := &testing.T{}
	super := frame(t, false, false, 1, pattern(3000))
	h := partial(super, false, false)
	f.Add(super, uint8(FlagNeedsCsum), uint8(GSOUDPL4), uint16(1000), h.CsumStart, uint16(6))
	f.Add(frame(t, true, true, 0, pattern(100)), uint8(FlagNeedsCsum), uint8(GSOUDPL4), uint16(7), uint16(58), uint16(6))
	f.Fuzz(func(t *testing.T, fr []byte, flags, typ uint8, gso, start, off uint16) {
		h := Hdr{Flags: flags, GSOType: typ, GSOSize: gso, CsumStart: start, CsumOffset: off}
		CompleteChecksum(bytes.Clone(fr), h)
		FixUDPChecksum(bytes.Clone(fr))
		n, hl, err := UDPSegments(fr, h)
		if err != nil || !h.IsUDPGSO() {
			return
		}
		dst := make([]byte, hl+int(gso)+8)
		for i := range min(n, 70) {
			k, err := UDPSegment(dst[:len(dst)-8], fr, h, i)
			if err == nil && k > hl+int(gso) {
				t.Fatalf("segment %d: %d bytes, more than %d + %d", i, k, hl, gso)
			}
		}
	})
}
