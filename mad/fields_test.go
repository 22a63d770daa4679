package mad

import (
	mbits "math/bits"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/goroce/goroce/bth"
)

// cmAttrs are the CM messages, each with the number of bits its fields
// cover out of the 1856 bits of MAD data; the rest are reserved:
//   - REQ 87: bytes 4-7 and 24-27, and in each path the 6 bits after the
//     flow label and the 3 after the subnet-local bit, and 3 after the
//     primary's ACK timeout, 2 after the alternate's (SAP supported is one)
//   - MRA 9: the low 6 bits of byte 8, the low 3 of byte 9
//   - REJ 7: the low 6 bits of byte 8, the low bit of byte 9
//   - REP 28: bytes 15, 19 and 23, the low nibble of byte 27
//   - RTU, DREP 0; DREQ 8: byte 11
//   - LAP 79: bytes 8-11 and 16-19, the low 3 bits of byte 15, the low
//     nibble of 58, the top 2 bits of 61, the low 3 bits of 62 and of 63
//   - APR 16: bytes 10-11; SIDR_REQ 16: bytes 6-7; SIDR_REP 24: 6-7 and 11
var cmAttrs = []struct {
	attr AttrID
	bits int
}{
	{AttrREQ, 1856 - 87}, {AttrMRA, 1856 - 9}, {AttrREJ, 1856 - 7}, {AttrREP, 1856 - 28},
	{AttrRTU, 1856}, {AttrDREQ, 1856 - 8}, {AttrDREP, 1856}, {AttrLAP, 1856 - 79},
	{AttrAPR, 1856 - 16}, {AttrSIDRREQ, 1856 - 16}, {AttrSIDRREP, 1856 - 24},
}

// genFields returns a Fields value for attr whose every field comes from v
// (a value of the field's width) and whose byte fields come from fill.
func genFields(attr AttrID, v func(width uint) uint64, fill func(n int) []byte) any {
	u8 := func(w uint) uint8 { return uint8(v(w)) }
	u16 := func() uint16 { return uint16(v(16)) }
	u32 := func(w uint) uint32 { return uint32(v(w)) }
	b := func() bool { return v(1) == 1 }
	g := func() (x bth.GID) { copy(x[:], fill(16)); return }
	path := func() PathFields {
		return PathFields{u16(), u16(), g(), g(), u32(20), u8(6), u8(8), u8(8), u8(4), b(), u8(5)}
	}
	switch attr {
	case AttrREQ:
		return REQFields{u32(32), v(64), v(64), u32(32), u32(24), u8(8), u32(24), u8(8), u32(24),
			u8(5), u8(2), b(), u32(24), u8(5), u8(3), u16(), u8(4), b(), u8(3), u8(4), b(), u8(3),
			path(), path(), b(), fill(REQPrivateDataLen)}
	case AttrMRA:
		return MRAFields{u32(32), u32(32), MsgKind(u8(2)), u8(5), fill(MRAPrivateDataLen)}
	case AttrREJ:
		return REJFields{u32(32), u32(32), MsgKind(u8(2)), u8(7), RejReason(u16()), fill(REJARILen), fill(REJPrivateDataLen)}
	case AttrREP:
		return REPFields{u32(32), u32(32), u32(32), u32(24), u32(24), u32(24), u8(8), u8(8), u8(5), u8(2), b(),
			u8(3), b(), v(64), fill(REPPrivateDataLen)}
	case AttrRTU, AttrDREP:
		return PairFields{u32(32), u32(32), fill(RTUPrivateDataLen)}
	case AttrDREQ:
		return DREQFields{u32(32), u32(32), u32(24), fill(DREQPrivateDataLen)}
	case AttrLAP:
		return LAPFields{u32(32), u32(32), u32(24), u8(5), path(), fill(LAPPrivateDataLen)}
	case AttrAPR:
		return APRFields{u32(32), u32(32), u8(8), APRStatus(u8(8)), fill(APRInfoLen), fill(APRPrivateDataLen)}
	case AttrSIDRREQ:
		return SIDRREQFields{u32(32), u16(), v(64), fill(SIDRREQPrivateDataLen)}
	case AttrSIDRREP:
		return SIDRREPFields{u32(32), SIDRStatus(u8(8)), u8(8), u32(24), v(64), u32(32), fill(SIDRREPInfoLen),
			fill(SIDRREPPrivateDataLen)}
	}
	panic("no generator")
}

// putAttr writes f as the message of attribute attr (RTU and DREP share
// PairFields, so the attribute picks the view).
func putAttr(m MAD, attr AttrID, f any) error {
	if attr == AttrDREP {
		return m.DREP().Put(f.(PairFields))
	}
	return putFields(m, f)
}

// TestFieldsAllOnes: with every field at its maximum, each message reads
// back what was written and sets exactly as many bits as its fields are
// wide: no two fields overlap and none spills into a reserved bit.
func TestFieldsAllOnes(t *testing.T) {
	ones := func(w uint) uint64 { return 1<<w - 1 }
	if ones(64) != ^uint64(0) {
		t.Fatal("shift")
	}
	ff := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = 0xff
		}
		return b
	}
	for _, c := range cmAttrs {
		m := NewCM(c.attr)
		f := genFields(c.attr, ones, ff)
		if err := putAttr(m, c.attr, f); err != nil {
			t.Fatalf("%v: %v", c.attr, err)
		}
		n := 0
		for _, b := range m.Data() {
			n += mbits.OnesCount8(b)
		}
		if n != c.bits {
			t.Errorf("%v: %d bits set, want %d", c.attr, n, c.bits)
		}
		if got := fieldsOf(m); !reflect.DeepEqual(got, f) {
			t.Errorf("%v: read back\n %+v\nwant %+v", c.attr, got, f)
		}
	}
}

// TestFieldsRandom: random values of each field's width, written into a
// MAD full of random bytes, read back unchanged, and the reserved bits keep
// the bytes they had.
func TestFieldsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 1))
	v := func(w uint) uint64 { return rng.Uint64() & (1<<w - 1) }
	fill := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	for range 200 {
		for _, c := range cmAttrs {
			m := MAD(fill(Len))
			before := append(MAD(nil), m...)
			// The bits the fields own: all ones written into a zero MAD.
			mask := NewCM(c.attr)
			if err := putAttr(mask, c.attr, genFields(c.attr, func(w uint) uint64 { return 1<<w - 1 },
				func(n int) []byte {
					b := make([]byte, n)
					for i := range b {
						b[i] = 0xff
					}
					return b
				})); err != nil {
				t.Fatal(err)
			}
			f := genFields(c.attr, v, fill)
			if err := putAttr(m, c.attr, f); err != nil {
				t.Fatal(err)
			}
			if got := fieldsOf(withAttr(m, c.attr)); !reflect.DeepEqual(got, f) {
				t.Fatalf("%v: read back\n %+v\nwant %+v", c.attr, got, f)
			}
			for i := HeaderLen; i < Len; i++ {
				if (m[i]^before[i])&^mask[i] != 0 {
					t.Fatalf("%v: data byte %d reserved bits %08b changed", c.attr, i-HeaderLen, ^mask[i])
				}
			}
		}
	}
}

// withAttr sets m's attribute ID so that fieldsOf reads the right view.
func withAttr(m MAD, a AttrID) MAD { m.SetAttrID(a); return m }

// TestPrivateDataTooLong: a private data longer than the message holds is
// an error and writes nothing; a shorter one is zero-padded.
func TestPrivateDataTooLong(t *testing.T) {
	m := NewCM(AttrREP)
	r := m.REP()
	if err := r.SetPrivateData(make([]byte, REPPrivateDataLen+1)); err == nil {
		t.Fatal("197 bytes of REP private data accepted")
	}
	copy(r.PrivateData(), []byte{9, 9, 9, 9})
	if err := r.SetPrivateData([]byte{1, 2}); err != nil {
		t.Fatal(err)
	}
	if p := r.PrivateData(); p[0] != 1 || p[1] != 2 || p[2] != 0 || p[3] != 0 || len(p) != 196 {
		t.Errorf("private data % x", p[:4])
	}
	for _, c := range []struct {
		err error
	}{{m.REQ().SetPrivateData(make([]byte, 93))}, {m.REJ().SetARI(make([]byte, 73))},
		{m.APR().SetInfo(make([]byte, 73))}, {m.SIDRREP().SetPrivateData(make([]byte, 137))}} {
		if c.err == nil {
			t.Error("too long accepted")
		}
	}
}
