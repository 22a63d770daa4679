package mad

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func addCaptureSeeds(f *testing.F) {
	for _, file := range []string{capC5, capRej28, capTrixie5} {
		for _, m := range capturedMADs(f, file) {
			f.Add(m)
		}
	}
	for _, c := range cmAttrs {
		f.Add([]byte(NewCM(c.attr)))
	}
	f.Add([]byte{})
	f.Add(make([]byte, 255))
}

// FuzzParse: any input either fails Parse/ParseCM with one of the package's
// errors (always for a length other than 256) or parses; then every view of
// every message reads in range, writing each message's fields back over a
// copy leaves the bytes unchanged, and writing them into a fresh MAD sets
// no bit the input lacks and reads back the same fields.
func FuzzParse(f *testing.F) {
	addCaptureSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			if !errors.Is(err, ErrLength) && !errors.Is(err, ErrBaseVersion) && !errors.Is(err, ErrClass) {
				t.Fatalf("untyped error %v", err)
			}
			if _, err2 := ParseCM(b); err2 == nil {
				t.Fatal("ParseCM accepted what Parse refused")
			}
			return
		}
		if len(b) != Len {
			t.Fatalf("%d bytes parsed", len(b))
		}
		if _, err := ParseCM(b); err != nil && !errors.Is(err, ErrClass) && !errors.Is(err, ErrClassVersion) && !errors.Is(err, ErrAttribute) {
			t.Fatalf("untyped error %v", err)
		}
		// Header write-back.
		h := New()
		h.SetBaseVersion(m.BaseVersion())
		h.SetClass(m.Class())
		h.SetClassVersion(m.ClassVersion())
		h.SetMethod(m.Method())
		h.SetStatus(m.Status())
		h.SetClassSpecific(m.ClassSpecific())
		h.SetTID(m.TID())
		h.SetAttrID(m.AttrID())
		h.SetAttrMod(m.AttrMod())
		for i := range HeaderLen {
			if h[i]&^m[i] != 0 {
				t.Fatalf("header byte %d: %#x from %#x", i, h[i], m[i])
			}
		}
		if h.TID() != m.TID() || h.AttrMod() != m.AttrMod() || h.Method() != m.Method() {
			t.Fatal("header fields changed on write-back")
		}
		// Every message view, whatever the attribute says.
		for _, c := range cmAttrs {
			fields := fieldsOf(withAttr(append(MAD(nil), m...), c.attr))
			same := append(MAD(nil), m...)
			if err := putAttr(same, c.attr, fields); err != nil {
				t.Fatalf("%v: %v", c.attr, err)
			}
			if !bytes.Equal(same, m) {
				t.Fatalf("%v: writing the fields back changed the bytes", c.attr)
			}
			fresh := NewCM(c.attr)
			if err := putAttr(fresh, c.attr, fields); err != nil {
				t.Fatalf("%v: %v", c.attr, err)
			}
			for i := HeaderLen; i < Len; i++ {
				if fresh[i]&^m[i] != 0 {
					t.Fatalf("%v: data byte %d: %#x from %#x", c.attr, i-HeaderLen, fresh[i], m[i])
				}
			}
			if got := fieldsOf(fresh); !reflect.DeepEqual(got, fields) {
				t.Fatalf("%v: fresh MAD reads\n %+v\nwant %+v", c.attr, got, fields)
			}
		}
		// rdma_cm's header, wherever a REQ's or SIDR_REQ's private data
		// would be.
		for _, p := range [][]byte{m.REQ().PrivateData(), m.SIDRREQ().PrivateData()} {
			hdr, err := ParseCMAHdr(p)
			if err != nil {
				if !errors.Is(err, ErrCMAHdr) {
					t.Fatalf("untyped error %v", err)
				}
				continue
			}
			w := CMAHdr(make([]byte, CMAHdrLen))
			w.SetVersion(hdr.Version())
			w.SetPort(hdr.Port())
			if err := w.SetAddrs(hdr.SrcAddr(), hdr.DstAddr()); err != nil {
				t.Fatal(err)
			}
			// The one normal form: an IPv6 header whose two addresses are
			// both IPv4-mapped is written back as IPv4 (as cma.c sends
			// such a pair); anything else keeps its version and addresses.
			wantVer := hdr.IPVersion()
			if hdr.SrcAddr().Is4In6() && hdr.DstAddr().Is4In6() {
				wantVer = 4
			}
			if w.IPVersion() != wantVer || w.SrcAddr() != hdr.SrcAddr().Unmap() && w.SrcAddr() != hdr.SrcAddr() ||
				w.DstAddr() != hdr.DstAddr().Unmap() && w.DstAddr() != hdr.DstAddr() || w.Port() != hdr.Port() {
				t.Fatalf("rdma_cm header % x written back as % x", []byte(hdr), []byte(w))
			}
			for i := range CMAHdrLen {
				if w[i]&^hdr[i] != 0 {
					t.Fatalf("rdma_cm header byte %d: %#x from %#x", i, w[i], hdr[i])
				}
			}
		}
		_, _, _ = SplitServiceID(m.REQ().ServiceID())
	})
}
