package afpacket

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic/internal/linktest"
	"golang.org/x/net/bpf"
)

// ethFrame puts an Ethernet header (and a VLAN tag) before a datagram.
func ethFrame(dg []byte, vlan bool) []byte {
	et := uint16(bth.EtherTypeIPv4)
	if dg[0]>>4 == 6 {
		et = bth.EtherTypeIPv6
	}
	h := []byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2}
	if vlan {
		h = append(h, 0x81, 0x00, 0x20, 0x05)
	}
	h = append(h, byte(et>>8), byte(et))
	return append(h, dg...)
}

// TestRoCEFilter runs the AF_PACKET filter in x/net/bpf's interpreter.
func TestRoCEFilter(t *testing.T) {
	me4, me6 := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("fd00::1")
	other4, other6 := netip.MustParseAddr("198.18.0.9"), netip.MustParseAddr("fd00::9")
	prog, err := roceFilter([]netip.Addr{netip.MustParseAddr("fe80::1"), me4, me6})
	if err != nil {
		t.Fatal(err)
	}
	ins := make([]bpf.Instruction, len(prog))
	for i, r := range prog {
		ins[i] = r.Disassemble()
	}
	vm, err := bpf.NewVM(ins)
	if err != nil {
		t.Fatal(err)
	}
	one := func(src, dst netip.Addr, mut func([]byte)) []byte {
		f := linktest.Frames(bth.Outer{Src: src, Dst: dst, SrcPort: 0xc001}, 1, 32)[0]
		dg := f.Datagram()
		if mut != nil {
			mut(dg)
		}
		return dg
	}
	cases := []struct {
		name string
		dg   []byte
		want bool
	}{
		{"ipv4 to us", one(other4, me4, nil), true},
		{"ipv6 to us", one(other6, me6, nil), true},
		{"ipv6 to our link-local", one(other6, netip.MustParseAddr("fe80::1"), nil), true},
		{"ipv4 to another host", one(me4, other4, nil), false},
		{"ipv6 to another host", one(me6, other6, nil), false},
		{"ipv6 differing in the last word", one(other6, netip.MustParseAddr("fd00::2"), nil), false},
		{"ipv4 other port", one(other4, me4, func(d []byte) { d[23] = 0x01 }), false},
		{"ipv6 other port", one(other6, me6, func(d []byte) { d[43] = 0x01 }), false},
		{"ipv4 fragment", one(other4, me4, func(d []byte) { d[6] |= 0x20 }), false},
		{"ipv4 options", one(other4, me4, func(d []byte) { d[0] = 0x46 }), false},
		{"ipv4 not udp", one(other4, me4, func(d []byte) { d[9] = 6 }), false},
		{"ipv6 extension header", one(other6, me6, func(d []byte) { d[6] = 0 }), false},
	}
	for _, c := range cases {
		for _, vlan := range []bool{false, true} {
			n, err := vm.Run(ethFrame(c.dg, vlan))
			if err != nil {
				t.Fatal(err)
			}
			if (n > 0) != c.want {
				t.Errorf("%s (vlan %v): accepted %v, want %v", c.name, vlan, n > 0, c.want)
			}
		}
	}
	arp := make([]byte, 42)
	arp[12], arp[13] = 0x08, 0x06
	if n, _ := vm.Run(arp); n != 0 {
		t.Error("ARP accepted")
	}
	if n, _ := vm.Run(arp[:10]); n != 0 {
		t.Error("runt accepted")
	}
}
