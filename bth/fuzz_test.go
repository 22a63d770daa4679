package bth

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/goroce/goroce/inet"
)

// Fuzz targets, seeded with every packet to port 4791 of every golden
// capture. Besides "never panics, never reads out of range" each checks
// what must hold for whatever input is accepted.

func addCaptureSeeds(f *testing.F, add func(c capPkt)) {
	pkts, err := loadCaptures()
	if err != nil {
		f.Fatal(err)
	}
	for _, c := range pkts {
		add(c)
	}
}

// FuzzParse: a packet Parse accepts is laid out as its opcode says, and its
// fields encode back to the same bytes.
func FuzzParse(f *testing.F) {
	addCaptureSeeds(f, func(c capPkt) {
		if fr, err := DecodeLink(c.link, c.data); err == nil {
			f.Add(fr.RoCE())
		}
	})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b)
		if err != nil {
			if _, ok := err.(Error); !ok {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		info := p.Info()
		if info.HdrLen+p.PayloadLen()+p.PadCount()+ICRCLen != len(b) || !p.OpCode().Valid() {
			t.Fatalf("%v: header %d + payload %d + pad %d + ICRC != %d", p.OpCode(), info.HdrLen, p.PayloadLen(), p.PadCount(), len(b))
		}
		for e := Ext(0); e < numExts; e++ {
			if h := p.Ext(e); (h != nil) != info.Headers.Has(e) || (h != nil && len(h) != e.Size()) {
				t.Fatalf("%v: %v is %d bytes", p.OpCode(), e, len(h))
			}
		}
		var tf TransportFields
		tf.Decode(p)
		if raw := tf.AppendRaw(nil); !bytes.Equal(raw, b) {
			t.Fatalf("%v: AppendRaw\n%x\nwant\n%x", p.OpCode(), raw, b)
		}
	})
}

var fuzzLinks = []LinkType{LinkEthernet, LinkRaw, LinkIPv4, LinkIPv6, LinkLinuxSLL, LinkLinuxSLL2}

// FuzzDecodeFrame: a frame DecodeLink accepts has consistent parts, its
// ICRC can be computed, and after PutICRC it verifies.
func FuzzDecodeFrame(f *testing.F) {
	addCaptureSeeds(f, func(c capPkt) { f.Add(uint8(0), c.data) })
	f.Add(uint8(1), []byte{0x45})
	f.Fuzz(func(t *testing.T, link uint8, b []byte) {
		lt := fuzzLinks[int(link)%len(fuzzLinks)]
		fr, err := DecodeLink(lt, b)
		if err != nil {
			if _, ok := err.(Error); !ok {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		eth, ip, udp, roce := fr.Ethernet(), fr.IP(), fr.UDP(), fr.RoCE()
		if len(eth)+len(ip)+len(udp)+len(roce) != len(fr.Bytes()) || !bytes.Equal(fr.L3(), fr.Bytes()[len(eth):]) {
			t.Fatal("frame parts do not add up")
		}
		if len(udp) != inet.UDPHeaderLen || int(udp.Length()) != inet.UDPHeaderLen+len(roce) || udp.DstPort() != UDPPort {
			t.Fatal("bad UDP header accepted")
		}
		if len(roce) < BTHLen+ICRCLen {
			t.Fatal("short transport accepted")
		}
		ok := fr.VerifyICRC()
		if (fr.CheckICRC() == nil) != ok {
			t.Fatal("CheckICRC disagrees with VerifyICRC")
		}
		if ok != (refICRC(fr.L3()) == fr.StoredICRC()) {
			t.Fatal("ICRC disagrees with the reference")
		}
		fr.PutICRC()
		if !fr.VerifyICRC() {
			t.Fatal("ICRC does not verify after PutICRC")
		}
	})
}

// FuzzDecodeSealed: DecodeSealed answers what DecodeIP answers for the
// same datagram with its IPv4 header checksum made right, and views it the
// same way.
func FuzzDecodeSealed(f *testing.F) {
	addCaptureSeeds(f, func(c capPkt) {
		if fr, err := DecodeLink(c.link, c.data); err == nil {
			f.Add(fr.L3())
		}
	})
	f.Add([]byte{0x45})
	f.Fuzz(func(t *testing.T, b []byte) {
		sealed, serr := DecodeSealed(b)
		fixed := bytes.Clone(b)
		if len(b) >= inet.IPv4HeaderLen && b[0]>>4 == 4 {
			if h := inet.IPv4(fixed); h.HeaderLen() >= inet.IPv4HeaderLen && h.HeaderLen() <= len(fixed) {
				h = h[:h.HeaderLen()]
				h.SetChecksum(h.CalculateChecksum())
			}
		}
		full, ferr := DecodeIP(fixed)
		if serr != ferr {
			t.Fatalf("DecodeSealed: %v; DecodeIP with the checksum made right: %v", serr, ferr)
		}
		if serr == nil && (len(sealed.IP()) != len(full.IP()) || !bytes.Equal(sealed.RoCE(), full.RoCE()) ||
			len(sealed.Bytes()) != len(full.Bytes()) || &sealed.Bytes()[0] != &b[0]) {
			t.Fatal("DecodeSealed and DecodeIP view the datagram differently")
		}
	})
}

// FuzzFields: decoding every field of a frame and encoding them raw gives
// the frame back; encoding them with lengths, checksum and ICRC computed
// gives a frame that decodes to the same fields, and the same bytes when
// the original's ICRC was right.
func FuzzFields(f *testing.F) {
	addCaptureSeeds(f, func(c capPkt) { f.Add(uint8(0), c.data) })
	f.Fuzz(func(t *testing.T, link uint8, b []byte) {
		lt := fuzzLinks[int(link)%len(fuzzLinks)]
		fr, err := DecodeLink(lt, b)
		if err != nil {
			return
		}
		fs, err := DecodeFields(fr)
		if err != nil {
			if _, ok := err.(Error); !ok {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if raw := fs.AppendRaw(nil); !bytes.Equal(raw, b) {
			t.Fatalf("AppendRaw\n%x\nwant\n%x", raw, b)
		}
		built, err := fs.Append(nil)
		if err != nil {
			t.Fatalf("Append: %v", err)
		}
		if fr.VerifyICRC() && !bytes.Equal(built, b) {
			t.Fatalf("Append of a valid frame\n%x\nwant\n%x", built, b)
		}
		fr2, err := DecodeLink(lt, built)
		if err != nil {
			t.Fatalf("Append made an undecodable frame: %v", err)
		}
		if !fr2.VerifyICRC() {
			t.Fatal("Append made a bad ICRC")
		}
		fs2, err := DecodeFields(fr2)
		if err != nil {
			t.Fatalf("Append made an unparsable packet: %v", err)
		}
		fs.RoCE.ICRC = fs2.RoCE.ICRC
		if !reflect.DeepEqual(fs, fs2) {
			t.Fatalf("fields changed:\n%+v\n%+v", fs, fs2)
		}
	})
}
