package bth

import (
	"os"
	"testing"

	"github.com/gopacket/gopacket/pcapgo"
)

func TestQuickCaptures(t *testing.T) {
	f, err := os.Open("testdata/captures/rc_pingpong_s8192.pcap")
	if err != nil {
		t.Fatal(err)
	}
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			break
		}
		fr, err := DecodeEthernet(data)
		if err != nil {
			continue
		}
		p, err := Parse(fr.RoCE())
		if err != nil {
			t.Fatalf("parse: %v", err)
		}
		if !fr.VerifyICRC() {
			t.Fatalf("icrc %x vs %x", fr.ComputeICRC(), fr.StoredICRC())
		}
		n++
		_ = p
	}
	t.Logf("%d packets ok", n)
}
