package bth

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/goroce/goroce/inet"
)

// cnpFrame builds a CNP the way the engine does (NewCNP, Seal) in an
// Ethernet frame: DSCP 48 (np_cnp_dscp's default), Not-ECT.
func cnpFrame(t *testing.T) []byte {
	t.Helper()
	o := Outer{Src: testSrc4, Dst: testDst4, SrcPort: 0xc123, TClass: 48 << 2}
	b := make([]byte, EthHeaderLen+DraftLen(&o, CNP, 0))
	copy(b, []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00})
	d := NewCNP(b[EthHeaderLen:], &o, 0xffff, 0x00abcd)
	d.Seal()
	return b
}

func TestCNPLayout(t *testing.T) {
	b := cnpFrame(t)
	fr, err := DecodeEthernet(b)
	if err != nil {
		t.Fatal(err)
	}
	if !fr.VerifyICRC() {
		t.Fatal("a sealed CNP's ICRC does not verify")
	}
	p, err := Parse(fr.RoCE())
	if err != nil {
		t.Fatal(err)
	}
	h := p.BTH()
	if !p.IsCNP() || !h.BECN() || h.FECN() || h.DestQP() != 0xabcd || h.PSN() != 0 || h.AckReq() || h.PKey() != 0xffff {
		t.Fatalf("CNP BTH %+v", h.Fields())
	}
	if n := len(fr.RoCE()); n != BTHLen+CNPPadLen+ICRCLen {
		t.Fatalf("CNP is %d transport bytes, want 32", n)
	}
	if ecn := inet.ECN(fr.L3()); ecn != inet.NotECT {
		t.Fatalf("CNP ECN %b, want Not-ECT", ecn)
	}
}

// TestCongestionNotification: tshark dissects the engine's CNP as a CNP:
// RoCE over UDP 4791, BTH opcode 129 (Annex A17's CNP), BECN set, the
// destination QP, and 16 reserved bytes then the ICRC after the BTH.
// Wireshark 4.0, Debian 12's, has no name for opcode 129 and so shows what
// follows the BTH as vendor data; the ICRC is its last four bytes.
func TestCongestionNotification(t *testing.T) {
	b := cnpFrame(t)
	fields := []string{"infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn", "infiniband.bth.p_key",
		"infiniband.reserved", "infiniband.vendor", "ip.dsfield.dscp", "ip.dsfield.ecn", "udp.dstport", "_ws.col.Protocol", "_ws.col.Info"}
	rows := runTshark(t, [][]byte{b}, fields)
	if len(rows) != 1 {
		t.Fatalf("tshark printed %d rows", len(rows))
	}
	got := map[string]string{}
	for i, f := range fields {
		v := rows[0][i]
		if f != "infiniband.vendor" {
			v, _, _ = strings.Cut(v, "|") // the first occurrence
		} else if k := strings.LastIndex(v, "|"); k >= 0 {
			v = v[k+1:]
		}
		got[f] = strings.ReplaceAll(v, ":", "")
	}
	fr, _ := DecodeEthernet(b)
	want := map[string]string{
		"infiniband.bth.opcode": "129", "infiniband.bth.destqp": "0x00abcd", "infiniband.bth.psn": "0",
		"infiniband.bth.p_key": "65535",
		"infiniband.reserved":  "40", // BTH byte 4: BECN (0x40), FECN clear
		"infiniband.vendor":    fmt.Sprintf("%x", fr.RoCE()[BTHLen:]),
		"ip.dsfield.dscp":      "48", "ip.dsfield.ecn": "0", "udp.dstport": "4791", "_ws.col.Protocol": "RRoCE",
	}
	t.Logf("tshark: %v", got)
	for f, w := range want {
		if got[f] != w {
			t.Errorf("%s: tshark says %q, want %q", f, got[f], w)
		}
	}
	if v := got["infiniband.vendor"]; len(v) != 2*(CNPPadLen+ICRCLen) || !strings.HasPrefix(v, strings.Repeat("00", CNPPadLen)) {
		t.Errorf("after the BTH: %s, want 16 zero bytes and the ICRC", v)
	}
	if icrc := binary.LittleEndian.Uint32(fr.RoCE()[BTHLen+CNPPadLen:]); icrc != fr.ComputeICRC() {
		t.Errorf("ICRC %08x, computed %08x", icrc, fr.ComputeICRC())
	}
}
