package inet

import (
	"encoding/hex"
	"testing"
)

func TestUDP(t *testing.T) {
	u := UDP(make([]byte, UDPHeaderLen))
	u.SetSrcPort(0xc123)
	u.SetDstPort(4791)
	u.SetLength(0x38)
	u.SetChecksum(0)
	if got := hex.EncodeToString(u); got != "c12312b700380000" {
		t.Fatalf("built %s", got)
	}
	if u.SrcPort() != 0xc123 || u.DstPort() != 4791 || u.Length() != 0x38 || u.Checksum() != 0 {
		t.Fatalf("read back %x", []byte(u))
	}
}
