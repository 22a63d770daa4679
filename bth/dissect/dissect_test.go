package dissect

import (
	"bytes"
	"strings"
	"testing"
)

// The decoder reads a capture of rxe's (ib_send_bw with an RNR NAK) and
// prints one line per RoCEv2 packet, each with the packet's Summary and
// a checked ICRC; roced decode's goldens (cmd/roced) hold every byte.
func TestDecoderCounts(t *testing.T) {
	var out bytes.Buffer
	d := Decoder{W: &out}
	if err := d.File("../testdata/captures/send_bw_rnr_s64.pcap"); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if !d.Opened || d.RoCE == 0 || d.Malformed != 0 || d.ICRCBad != 0 || len(lines) != d.RoCE {
		t.Fatalf("opened %v, %d packets, %d RoCEv2, %d malformed, %d ICRC bad, %d lines", d.Opened, d.Packets, d.RoCE, d.Malformed, d.ICRCBad, len(lines))
	}
	for _, l := range lines {
		if !strings.Contains(l, " qpn=0x") || !strings.HasSuffix(l, " icrc=ok") {
			t.Fatalf("line %q", l)
		}
	}
}
