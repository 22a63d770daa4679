package mad

import (
	"errors"
	"strings"
	"testing"
)

// TestParseErrors: each way a MAD can be bad gives its error, wrapped with
// the value that was wrong, on one line.
func TestParseErrors(t *testing.T) {
	good := NewCM(AttrREQ)
	mut := func(f func(m MAD)) []byte {
		m := append(MAD(nil), good...)
		f(m)
		return m
	}
	for _, c := range []struct {
		name string
		b    []byte
		cm   bool // ParseCM only
		want error
		text string
	}{
		{"nil", nil, false, ErrLength, "0 bytes, want 256"},
		{"short", good[:255], false, ErrLength, "255 bytes"},
		{"long", append(append([]byte(nil), good...), 0), false, ErrLength, "257 bytes"},
		{"base version", mut(func(m MAD) { m.SetBaseVersion(0x80) }), false, ErrBaseVersion, "128, want 1"},
		{"class", mut(func(m MAD) { m.SetClass(0x02) }), false, ErrClass, "0x02"},
		{"class 0x50", mut(func(m MAD) { m.SetClass(0x50) }), false, ErrClass, "0x50"},
		{"not CM", mut(func(m MAD) { m.SetClass(ClassSubnAdm) }), true, ErrClass, "want CM"},
		{"class version", mut(func(m MAD) { m.SetClassVersion(1) }), true, ErrClassVersion, "CM class version 1"},
		{"attribute", mut(func(m MAD) { m.SetAttrID(0x001b) }), true, ErrAttribute, "0x001b"},
	} {
		var err error
		if c.cm {
			if _, err := Parse(c.b); err != nil {
				t.Errorf("%s: Parse: %v", c.name, err)
			}
			_, err = ParseCM(c.b)
		} else {
			_, err = Parse(c.b)
		}
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: got %v, want %v with %q", c.name, err, c.want, c.text)
		}
	}
	if _, err := ParseCM(good); err != nil {
		t.Errorf("NewCM's MAD: %v", err)
	}
}

// TestHeader: every header setter writes the bytes struct ib_mad_hdr gives, and
// only those.
func TestHeader(t *testing.T) {
	m := New()
	m.SetClass(ClassCM)
	m.SetClassVersion(2)
	m.SetMethod(MethodGetResp)
	m.SetStatus(0x1234)
	m.SetClassSpecific(0x5678)
	m.SetTID(0x0102030405060708)
	m.SetAttrID(AttrAPR)
	m.SetAttrMod(0xa1b2c3d4)
	want := []byte{1, 7, 2, 0x81, 0x12, 0x34, 0x56, 0x78, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0x1a, 0, 0, 0xa1, 0xb2, 0xc3, 0xd4}
	if string(m[:HeaderLen]) != string(want) {
		t.Errorf("header % x, want % x", m[:HeaderLen], want)
	}
	for _, b := range m.Data() {
		if b != 0 {
			t.Fatal("a header setter wrote into the data")
		}
	}
	if m.BaseVersion() != 1 || m.Class() != ClassCM || m.ClassVersion() != 2 || m.Method() != MethodGetResp ||
		!m.Method().IsResponse() || m.Status() != 0x1234 || m.ClassSpecific() != 0x5678 ||
		m.TID() != 0x0102030405060708 || m.AttrID() != AttrAPR || m.AttrMod() != 0xa1b2c3d4 {
		t.Error("a getter does not read what its setter wrote")
	}
	if MethodSend.IsResponse() || len(m.Data()) != DataLen {
		t.Error("Send is not a response; Data is 232 bytes")
	}
}

// TestClassKnown: the specification's classes and the vendor ranges are
// known, the gaps are not.
func TestClassKnown(t *testing.T) {
	known := 0
	for c := 0; c < 256; c++ {
		if Class(c).Known() {
			known++
		}
	}
	// 12 named classes, 7 in vendor range 1 (0x09-0x0f), 32 in range 2 (0x30-0x4f).
	if known != 12+7+32 {
		t.Errorf("%d known classes", known)
	}
	for _, c := range []Class{0, 0x02, 0x13, 0x50, 0x80, 0xff} {
		if c.Known() {
			t.Errorf("%#x known", uint8(c))
		}
	}
}

// TestNames: attribute IDs, reject reasons and status codes print as the
// kernel names them, and an unknown one prints its number.
func TestNames(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{AttrREQ.String(), "REQ"},
		{AttrSIDRREP.String(), "SIDR_REP"},
		{AttrID(0x99).String(), "attr(0x0099)"},
		{RejConsumerDefined.String(), "consumer defined (28)"},
		{RejInvalidServiceID.String(), "invalid service ID (8)"},
		{RejVendorOptionNotSupported.String(), "vendor option is not supported (35)"},
		{RejReason(34).String(), "unrecognized reason (34)"},
		{APRInvalidSL.String(), "invalid SL (13)"},
		{APRStatus(14).String(), "unrecognized AP status (14)"},
		{SIDRUnsupported.String(), "unsupported (1)"},
		{SIDRStatus(6).String(), "unrecognized SIDR status (6)"},
		{MsgREP.String(), "REP"},
		{MsgKind(3).String(), "msg(3)"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	// Every reason 1..33 and 35 has a name.
	for r := RejReason(1); r <= 35; r++ {
		if _, ok := rejNames[r]; ok != (r != 34) {
			t.Errorf("reason %d named: %v", r, ok)
		}
	}
}
