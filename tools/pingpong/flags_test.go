package pingpong

import (
	"errors"
	"strings"
	"testing"
)

func TestParseFlagsDefaults(t *testing.T) {
	for _, tool := range []Tool{RC, UC, UD, SRQ} {
		c, err := ParseFlags(tool, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.Port != 18515 || c.IBPort != 1 || c.RxDepth != 500 || c.Iters != 1000 || c.GIDIndex != -1 || c.Link != LinkUDP || !c.IsServer() {
			t.Errorf("%v defaults: %+v", tool, c)
		}
		wantSize, wantMTU, wantQP := uint32(4096), 1024, uint32(0)
		if tool == UD {
			wantSize, wantMTU = 1024, 0
		}
		if tool == SRQ {
			wantQP = 16
		}
		if c.Size != wantSize || c.MTU != wantMTU || c.NumQP != wantQP {
			t.Errorf("%v: size %d mtu %d qp %d", tool, c.Size, c.MTU, c.NumQP)
		}
	}
}

func TestParseFlagsSpellings(t *testing.T) {
	// The lab's command line, and the same in every getopt spelling.
	for _, args := range []string{
		"-d rxeA -g 1 -n 5 -s 64 198.51.100.2",
		"-drxeA -g1 -n5 -s64 198.51.100.2",
		"--ib-dev=rxeA --gid-idx=1 --iters=5 --size=64 198.51.100.2",
		"198.51.100.2 --ib-dev rxeA --gid 1 --it 0x5 -s 0100",
	} {
		c, err := ParseFlags(RC, strings.Fields(args))
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if c.Device != "rxeA" || c.GIDIndex != 1 || c.Iters != 5 || c.Size != 64 || c.ServerName != "198.51.100.2" || c.IsServer() {
			t.Errorf("%q: %+v", args, c)
		}
	}
}

func TestParseFlagsBooleans(t *testing.T) {
	c, err := ParseFlags(RC, strings.Fields("-eotc -P -O -j -N --link afxdp --pcap /tmp/x.pcap -m 4096 -l 3 -r 10 -p 0x4000 -i 2"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Pcap != "/tmp/x.pcap" {
		t.Errorf("--pcap: %q", c.Pcap)
	}
	if !c.Events || !c.ODP || !c.Timestamps || !c.Check || !c.Prefetch || !c.ImplicitOD || !c.DM || !c.NewSend ||
		c.Link != LinkAFXDP || c.MTU != 4096 || c.SL != 3 || c.RxDepth != 10 || c.Port != 0x4000 || c.IBPort != 2 {
		t.Errorf("%+v", c)
	}
	c, err = ParseFlags(SRQ, strings.Fields("-q 2 -o -c"))
	if err != nil || c.NumQP != 2 || !c.ODP || !c.Check {
		t.Errorf("srq: %+v %v", c, err)
	}
}

// --qp-timeout is goroce's: the tools hard-code 14, the interop lab needs
// more (interop/README.md, "Timeouts in the lab").
func TestParseFlagsQPTimeout(t *testing.T) {
	if c, err := ParseFlags(RC, nil); err != nil || c.QPTimeout != 0 {
		t.Errorf("default: %d %v", c.QPTimeout, err)
	}
	if c, err := ParseFlags(RC, strings.Fields("--qp-timeout 17")); err != nil || c.QPTimeout != 17 {
		t.Errorf("--qp-timeout 17: %d %v", c.QPTimeout, err)
	}
	for _, v := range []string{"0", "32", "x", "-3"} {
		if _, err := ParseFlags(RC, []string{"--qp-timeout=" + v}); err == nil || !strings.Contains(err.Error(), "--qp-timeout") {
			t.Errorf("--qp-timeout=%s: %v", v, err)
		}
	}
}

func TestParseFlagsErrors(t *testing.T) {
	tests := []struct {
		tool  Tool
		args  string
		usage bool
		want  string
	}{
		{RC, "-p 70000", true, "port"},
		{RC, "-p -1", true, "port"},
		{RC, "-i 0", true, "ib-port"},
		{RC, "-m 1000", true, "invalid MTU"},
		{UD, "-m 1024", true, "invalid option -- 'm'"},
		{UC, "-t", true, "invalid option -- 't'"},
		{RC, "-q 2", true, "invalid option -- 'q'"},
		{RC, "a b", true, "more than one host"},
		{RC, "--link tcp", false, "invalid --link"},
		{SRQ, "-s 0", true, "size < 1"},
		{SRQ, "-q 600 -r 1000", false, "num_qp 600 must be less than 255"},
		{SRQ, "-q 256", false, "num_qp 256 must be less than 255"},
		{SRQ, "-q 0", false, "at least one QP"},
		{SRQ, "-q 20 -r 10", false, "rx_depth 10 is too small for 20 QPs"},
		{RC, "--help", true, "unrecognized option '--help'"},
		// Values an unsigned int cannot hold: refused, not wrapped.
		{RC, "-s 99999999999", true, "-s 99999999999 out of range"},
		{UC, "-s -1", true, "-s -1 out of range"},
		{UD, "-n 4294967296", true, "-n 4294967296 out of range"},
		{RC, "-r 4294967297", true, "-r 4294967297 out of range"},
		{SRQ, "-q 4294967297", true, "-q 4294967297 out of range"},
		// No digit at all: strtol's silent 0 would have left a server
		// waiting forever (-n abc), so it is refused.
		{RC, "-n abc", true, `-n "abc": not a number`},
		{SRQ, "-q x", true, `-q "x": not a number`},
		{UD, "--port=", true, `-p "": not a number`},
	}
	for _, tt := range tests {
		_, err := ParseFlags(tt.tool, strings.Fields(tt.args))
		if err == nil || !strings.Contains(err.Error(), tt.want) || errors.Is(err, ErrUsage) != tt.usage {
			t.Errorf("%v %q: err = %v, want %q (usage %v)", tt.tool, tt.args, err, tt.want, tt.usage)
		}
	}
}

func TestToolByName(t *testing.T) {
	for _, n := range []string{"rc_pingpong", "ibv_srq_pingpong"} {
		if _, err := ToolByName(n); err != nil {
			t.Error(err)
		}
	}
	if _, err := ToolByName("xsrq_pingpong"); err == nil {
		t.Error("xsrq accepted")
	}
	if SRQ.Binary() != "ibv_srq_pingpong" || Tool(9).String() != "Tool(9)" {
		t.Error("names")
	}
}
