package rping

import (
	"net/netip"
	"testing"
)

// TestParseFlags: rping's defaults, and each flag as rping's getopt reads
// it, clustered and attached values included.
func TestParseFlags(t *testing.T) {
	c, err := ParseFlags([]string{"-s"})
	if err != nil || !c.Server || c.Port != 7174 || c.Size != 64 || c.Count != 0 || c.Addr.IsValid() || c.Link != "udp" {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	c, err = ParseFlags([]string{"-cvVd", "-a192.0.2.2", "-I", "192.0.2.1", "-p", "7175xyz", "-C10", "-S", "65535", "--pcap", "x.pcap", "-q"})
	want := Config{Addr: netip.MustParseAddr("192.0.2.2"), Source: netip.MustParseAddr("192.0.2.1"), Port: 7175,
		Count: 10, Size: 65535, Verbose: true, Validate: true, Debug: true, SelfQP: true, Link: "udp", Pcap: "x.pcap"}
	if err != nil || c != want {
		t.Fatalf("got %+v %v\nwant %+v", c, err, want)
	}
}
