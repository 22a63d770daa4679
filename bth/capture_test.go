package bth

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/goroce/goroce/bth/pcapfile"
	"github.com/goroce/goroce/inet"
)

// The golden captures: Linux rxe (kernels 6.1 and 6.12) talking to itself
// over a veth, described in testdata/captures*/CAPTURES.md (a copy of the
// lab's notes is in /work/shared/rxe-peer).

// capPkt is one packet of a golden capture sent to UDP port 4791, as
// gopacket (not this package) classifies it.
type capPkt struct {
	file string // path under testdata
	num  int    // frame number in the file, from 1
	link LinkType
	data []byte
}

func (c capPkt) String() string { return c.file + " #" + strconv.Itoa(c.num) }

// isProbe reports whether the packet is one of the two 19-byte ASCII
// datagrams the lab sent to port 4791 to check reachability: not RoCEv2.
func (c capPkt) isProbe() bool { return strings.Contains(c.file, "host_probe_") }

var loadCaptures = sync.OnceValues(func() ([]capPkt, error) {
	files, err := filepath.Glob("testdata/captures*/*.pcap*")
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, errors.New("no captures under testdata")
	}
	var out []capPkt
	for _, fn := range files {
		pkts, err := pcapfile.ReadFile(fn)
		if err != nil {
			return nil, err
		}
		for i, p := range pkts {
			gp := gopacket.NewPacket(p.Data, p.LinkType, gopacket.NoCopy)
			u, ok := gp.Layer(layers.LayerTypeUDP).(*layers.UDP)
			if !ok || u.DstPort != UDPPort {
				continue
			}
			out = append(out, capPkt{file: fn, num: i + 1, link: LinkType(p.LinkType), data: p.Data})
		}
	}
	return out, nil
})

func captures(t testing.TB) []capPkt {
	t.Helper()
	pkts, err := loadCaptures()
	if err != nil {
		t.Fatal(err)
	}
	return pkts
}

// decoded returns the frames of every capture packet that is RoCEv2 (all
// but the probes), failing the test on any that does not decode.
func decoded(t testing.TB) ([]capPkt, []Frame) {
	t.Helper()
	var ps []capPkt
	var frs []Frame
	for _, c := range captures(t) {
		if c.isProbe() {
			continue
		}
		fr, err := DecodeLink(c.link, c.data)
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		ps = append(ps, c)
		frs = append(frs, fr)
	}
	return ps, frs
}

// TestCapturesDecode: every packet to port 4791 in every capture decodes,
// parses and has a correct ICRC, except the two ASCII probes, which fail
// with a typed error. The totals are those the lab's own ICRC checker and
// scapy counted (CAPTURES.md).
func TestCapturesDecode(t *testing.T) {
	var total, probes int
	perDir := map[string]int{}
	aeth := map[string]map[AckClass]int{}
	for _, c := range captures(t) {
		total++
		perDir[filepath.Dir(c.file)]++
		fr, err := DecodeLink(c.link, c.data)
		var p Packet
		if err == nil {
			p, err = Parse(fr.RoCE())
		}
		if c.isProbe() {
			probes++
			var be Error
			if !errors.As(err, &be) {
				t.Errorf("%v: ASCII probe: got error %v, want a bth.Error", c, err)
			}
			if err == nil {
				t.Errorf("%v: ASCII probe decoded as %v", c, p.OpCode())
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", c, err)
			continue
		}
		if !fr.VerifyICRC() {
			t.Errorf("%v: ICRC stored %08x computed %08x", c, fr.StoredICRC(), fr.ComputeICRC())
		}
		if a := p.AETH(); a != nil && strings.Contains(c.file, "send_bw_rnr") {
			if aeth[c.file] == nil {
				aeth[c.file] = map[AckClass]int{}
			}
			aeth[c.file][a.Syndrome().Class()]++
		}
	}
	if probes != 2 {
		t.Errorf("%d ASCII probes, want 2", probes)
	}
	want := map[string]int{"testdata/captures": 3113, "testdata/captures-trixie": 3626}
	if !reflect.DeepEqual(perDir, want) {
		t.Errorf("packets to port 4791 per directory: %v, want %v", perDir, want)
	}
	wantAETH := map[string]map[AckClass]int{
		"testdata/captures/send_bw_rnr_s64.pcap":        {ClassACK: 50, ClassRNRNAK: 1, ClassNAK: 1},
		"testdata/captures-trixie/send_bw_rnr_s64.pcap": {ClassACK: 50, ClassRNRNAK: 23, ClassNAK: 23},
	}
	if !reflect.DeepEqual(aeth, wantAETH) {
		t.Errorf("AETH classes in send_bw_rnr: %v, want %v", aeth, wantAETH)
	}
	t.Logf("%d packets to port 4791", total)
}

// TestCapturesReencode: decoding every field of a frame and encoding the
// fields again gives the same bytes, both raw and with every length,
// checksum and the ICRC computed afresh; and decoding the result gives the
// same fields.
func TestCapturesReencode(t *testing.T) {
	ps, frs := decoded(t)
	for i, fr := range frs {
		c := ps[i]
		f, err := DecodeFields(fr)
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		if raw := f.AppendRaw(nil); !bytes.Equal(raw, c.data) {
			t.Fatalf("%v: AppendRaw differs:\n got %x\nwant %x", c, raw, c.data)
		}
		built, err := f.Append([]byte{0xaa})
		if err != nil {
			t.Fatalf("%v: Append: %v", c, err)
		}
		if built[0] != 0xaa || !bytes.Equal(built[1:], c.data) {
			t.Fatalf("%v: Append differs:\n got %x\nwant %x", c, built[1:], c.data)
		}
		fr2, err := DecodeLink(c.link, built[1:])
		if err != nil {
			t.Fatalf("%v: re-decode: %v", c, err)
		}
		f2, err := DecodeFields(fr2)
		if err != nil {
			t.Fatalf("%v: re-decode fields: %v", c, err)
		}
		if !reflect.DeepEqual(f, f2) {
			t.Fatalf("%v: fields differ after a round trip:\n%+v\n%+v", c, f, f2)
		}
	}
}

// refICRC is the ICRC computed the slow, obvious way, independently of
// ICRC: the whole datagram with its variant fields masked, after 8 bytes of
// ones, through a bit-at-a-time CRC-32.
func refICRC(l3 []byte) uint32 {
	m := append(bytes.Repeat([]byte{0xff}, 8), l3[:len(l3)-ICRCLen]...)
	ip := m[8:]
	hl := inet.IPv6HeaderLen
	if ip[0]>>4 == 4 {
		hl = int(ip[0]&0x0f) * 4
		ip[1], ip[8], ip[10], ip[11] = 0xff, 0xff, 0xff, 0xff
	} else {
		ip[0] |= 0x0f
		ip[1], ip[2], ip[3], ip[7] = 0xff, 0xff, 0xff, 0xff
	}
	ip[hl+6], ip[hl+7] = 0xff, 0xff   // UDP checksum
	ip[hl+inet.UDPHeaderLen+4] = 0xff // BTH FECN, BECN, reserved
	return bitCRC32(m)
}

// bitCRC32 is CRC-32 (reflected polynomial 0xEDB88320) a bit at a time.
func bitCRC32(m []byte) uint32 {
	crc := ^uint32(0)
	for _, b := range m {
		crc ^= uint32(b)
		for range 8 {
			if crc&1 != 0 {
				crc = crc>>1 ^ 0xedb88320
			} else {
				crc >>= 1
			}
		}
	}
	return ^crc
}

func TestICRCReference(t *testing.T) {
	ps, frs := decoded(t)
	for i, fr := range frs {
		if got, want := fr.ComputeICRC(), refICRC(fr.L3()); got != want {
			t.Fatalf("%v: ICRC %08x, reference %08x", ps[i], got, want)
		}
	}
	// The reference CRC is the standard one: its check value, and
	// hash/crc32 (whose table ICRC uses) agrees over a packet's length.
	if got := bitCRC32([]byte("123456789")); got != 0xcbf43926 {
		t.Errorf("bit-at-a-time CRC-32 check value %08x, want cbf43926", got)
	}
	if l3 := frs[0].L3(); bitCRC32(l3) != crc32.ChecksumIEEE(l3) {
		t.Error("bit-at-a-time CRC-32 disagrees with hash/crc32")
	}
	// ICRC's own slicing-by-8 for the masked headers agrees with
	// hash/crc32 at every length and starting state.
	data := make([]byte, 130)
	for i := range data {
		data[i] = byte(i * 37)
	}
	for n := range len(data) {
		for _, seed := range []uint32{0, icrcSeed, 0xdeadbeef} {
			if got, want := slicing8(seed, data[:n]), crc32.Update(seed, crc32.IEEETable, data[:n]); got != want {
				t.Fatalf("slicing8(%08x, %d bytes) = %08x, want %08x", seed, n, got, want)
			}
		}
	}
}

// maskedBit reports whether bit i (from the start of the IP header) of a
// datagram lies in a field the ICRC does not cover.
func maskedBit(fr Frame, i int) bool {
	byteOff, bit := i/8, 7-i%8 // bit 7 is the most significant
	ipLen := len(fr.IP())
	if fr.IsIPv6() {
		switch {
		case byteOff == 0 && bit < 4, byteOff >= 1 && byteOff <= 3, byteOff == 7:
			return true // traffic class, flow label, hop limit
		}
	} else {
		switch byteOff {
		case 1, 8, 10, 11: // TOS, TTL, header checksum
			return true
		}
	}
	switch byteOff - ipLen {
	case 6, 7: // UDP checksum
		return true
	case inet.UDPHeaderLen + 4: // BTH byte 4: FECN, BECN, reserved
		return true
	}
	return false
}

// flipCheck flips bit i of the frame's datagram and checks that the ICRC
// still verifies exactly when the bit is masked, then flips it back.
func flipCheck(t *testing.T, name string, fr Frame, i int) {
	t.Helper()
	l3 := fr.L3()
	l3[i/8] ^= 0x80 >> (i % 8)
	ok := fr.VerifyICRC()
	l3[i/8] ^= 0x80 >> (i % 8)
	if masked := maskedBit(fr, i); ok != masked {
		t.Errorf("%s: bit %d (byte %d) flipped: ICRC verifies %v, want %v", name, i, i/8, ok, masked)
	}
}

// TestICRCBitFlips flips every bit of one packet of each opcode seen (and of
// an IPv6 copy of each), and a sample of bits of every packet: the ICRC
// fails for every bit it covers and is unchanged by every bit it masks.
func TestICRCBitFlips(t *testing.T) {
	ps, frs := decoded(t)
	seen := map[OpCode]bool{}
	rng := rand.New(rand.NewPCG(1, 2))
	for i, fr := range frs {
		op := BTH(fr.RoCE()).OpCode()
		fr = cloneFrame(t, ps[i].link, fr)
		if !seen[op] {
			seen[op] = true
			for _, v := range []Frame{fr, ipv6Copy(t, fr)} {
				for bit := range len(v.L3()) * 8 {
					flipCheck(t, ps[i].String()+" "+op.String(), v, bit)
				}
			}
			continue
		}
		for range 16 {
			flipCheck(t, ps[i].String(), fr, rng.IntN(len(fr.L3())*8))
		}
	}
	t.Logf("all bits of %d opcodes, 16 bits of %d other packets", len(seen), len(frs)-len(seen))
	if len(seen) < 20 {
		t.Errorf("only %d opcodes in the captures", len(seen))
	}
}

func netipMapped(a netip.Addr) netip.Addr { return netip.AddrFrom16(a.As16()) }

func cloneFrame(t testing.TB, lt LinkType, fr Frame) Frame {
	t.Helper()
	c, err := DecodeLink(lt, bytes.Clone(fr.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ipv6Copy turns an IPv4 frame into the same packet over IPv6 (IPv4-mapped
// addresses, a traffic class and flow label), with its ICRC recomputed.
func ipv6Copy(t testing.TB, fr Frame) Frame {
	t.Helper()
	f, err := DecodeFields(fr)
	if err != nil {
		t.Fatal(err)
	}
	v4 := f.IPv4
	f.IPv4 = nil
	f.IPv6 = &IPv6Fields{TrafficClass: 0x8a, FlowLabel: 0x12345, NextHeader: inet.ProtoUDP, HopLimit: 63,
		Src: netipMapped(v4.Src), Dst: netipMapped(v4.Dst)}
	b, err := f.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	v6, err := DecodeEthernet(b)
	if err != nil {
		t.Fatal(err)
	}
	if !v6.IsIPv6() || !v6.VerifyICRC() {
		t.Fatal("IPv6 copy does not verify")
	}
	return v6
}

// TestICRCVariantFields: what routers and switches change on the way, ECN
// marks (FECN/BECN, IP ECN CE), DSCP rewrites and hop counts, leaves the
// ICRC valid. One public implementation masked only BTH byte 4's reserved
// bits and so broke whenever FECN or BECN was set.
func TestICRCVariantFields(t *testing.T) {
	ps, frs := decoded(t)
	for _, i := range []int{0, len(frs) / 2, len(frs) - 1} {
		fr := cloneFrame(t, ps[i].link, frs[i])
		for _, v := range []Frame{fr, ipv6Copy(t, fr)} {
			h := BTH(v.RoCE())
			ip := v.IP()
			for _, mark := range []struct {
				name string
				do   func()
			}{
				{"FECN", func() { h.SetFECN(true) }},
				{"BECN", func() { h.SetBECN(true) }},
				{"FECN+BECN", func() { h.SetFECN(true); h.SetBECN(true) }},
				{"ECN CE", func() {
					if v.IsIPv6() {
						ip[1] |= 0x30
					} else {
						ip[1] |= 0x03
					}
				}},
				{"hop limit", func() {
					if v.IsIPv6() {
						ip[7]--
					} else {
						ip[8]--
					}
				}},
				{"UDP checksum", func() { v.UDP().SetChecksum(0xbeef) }},
			} {
				saved := bytes.Clone(v.L3())
				mark.do()
				if !v.VerifyICRC() {
					t.Errorf("%v IPv6=%v: ICRC fails after %s", ps[i], v.IsIPv6(), mark.name)
				}
				copy(v.L3(), saved)
			}
		}
	}
}

// TestDecodeLinkTypes: the same packet under every link-layer header a
// capture may give it decodes to the same datagram.
func TestDecodeLinkTypes(t *testing.T) {
	ps, frs := decoded(t)
	for _, i := range []int{0, len(frs) - 1} {
		fr := frs[i]
		for _, v := range []Frame{fr, ipv6Copy(t, cloneFrame(t, ps[i].link, fr))} {
			l3 := v.L3()
			et := uint16(EtherTypeIPv4)
			rawIP := LinkIPv4
			if v.IsIPv6() {
				et, rawIP = EtherTypeIPv6, LinkIPv6
			}
			sll := make([]byte, SLLHeaderLen)
			binary.BigEndian.PutUint16(sll[2:], 1) // ARPHRD_ETHER
			binary.BigEndian.PutUint16(sll[4:], 6)
			binary.BigEndian.PutUint16(sll[14:], et)
			sll2 := make([]byte, SLL2HeaderLen)
			binary.BigEndian.PutUint16(sll2, et)
			for _, tc := range []struct {
				lt  LinkType
				hdr []byte
			}{
				{LinkEthernet, v.Ethernet()},
				{LinkRaw, nil},
				{rawIP, nil},
				{LinkLinuxSLL, sll},
				{LinkLinuxSLL2, sll2},
			} {
				b := append(append(bytes.Clone(tc.hdr), l3...), 0, 0) // and a trailer
				got, err := DecodeLink(tc.lt, b)
				if err != nil {
					t.Fatalf("%v link %d: %v", ps[i], tc.lt, err)
				}
				if !bytes.Equal(got.L3(), l3) || got.LinkType() != tc.lt || !got.VerifyICRC() ||
					!bytes.Equal(got.Ethernet(), tc.hdr) {
					t.Errorf("%v link %d: decoded differently", ps[i], tc.lt)
				}
				if tc.lt != LinkEthernet {
					f, err := DecodeFields(got)
					if err != nil {
						t.Fatal(err)
					}
					if f.Ethernet != nil || !bytes.Equal(f.LinkHeader, tc.hdr) || !bytes.Equal(f.Trailer, []byte{0, 0}) {
						t.Errorf("%v link %d: fields %+v", ps[i], tc.lt, f)
					}
					if !bytes.Equal(f.AppendRaw(nil), b) {
						t.Errorf("%v link %d: AppendRaw differs", ps[i], tc.lt)
					}
				}
			}
			// The IP version must agree with the link type.
			wrong := LinkIPv6
			if v.IsIPv6() {
				wrong = LinkIPv4
			}
			if _, err := DecodeLink(wrong, l3); err != ErrIPVersion {
				t.Errorf("IPv6=%v under link %d: %v, want %v", v.IsIPv6(), wrong, err, ErrIPVersion)
			}
		}
	}
	for _, lt := range []LinkType{0, 105, 127, 0xffffffff} {
		if _, err := DecodeLink(lt, frs[0].Bytes()); err != ErrLinkType {
			t.Errorf("link type %d: %v, want %v", lt, err, ErrLinkType)
		}
	}
}
