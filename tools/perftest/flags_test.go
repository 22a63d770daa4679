package perftest

import (
	"errors"
	"strings"
	"testing"
)

func TestDefaults(t *testing.T) {
	tests := []struct {
		test        Test
		size, iters uint64
		tx, rx      int
		atomic      int32
	}{
		{WriteBW, 65536, 5000, 128, 512, 0},
		{ReadBW, 65536, 1000, 128, 1, 0},
		{SendBW, 65536, 1000, 128, 512, 0},
		{AtomicBW, 8, 1000, 128, 1, FetchAndAdd},
		{WriteLat, 2, 1000, 1, 512, 0},
		{ReadLat, 2, 1000, 1, 1, 0},
		{SendLat, 2, 1000, 1, 512, 0},
		{AtomicLat, 8, 1000, 1, 1, FetchAndAdd},
	}
	for _, tt := range tests {
		c, err := ParseFlags(tt.test, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.Size != tt.size || c.Iters != tt.iters || c.TxDepth != tt.tx || c.RxDepth != tt.rx || c.AtomicType != tt.atomic ||
			c.Port != 18515 || c.GIDIndex != -1 || c.CQMod != 100 || c.Duration != 5 || c.NumQPs != 1 || !c.IsServer() ||
			c.Link != "udp" || c.Claim != V629 || c.ReportFmt != ReportMiB {
			t.Errorf("%v: %+v", tt.test, c)
		}
	}
}

func TestSpellings(t *testing.T) {
	for _, args := range []string{
		"-d rxeA -x 1 -F -n 100 -s 64 198.51.100.2",
		"-drxeA -x1 -Fn100 -s64 198.51.100.2",
		"--ib-dev=rxeA --gid-index=1 --CPU-freq --iters=100 --size=64 198.51.100.2",
		"198.51.100.2 --ib-dev rxeA --gid 1 -F --iter 0x64 -s 0100",
	} {
		c, err := ParseFlags(WriteBW, strings.Fields(args))
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if c.Device != "rxeA" || c.GIDIndex != 1 || !c.CPUFreq || c.Iters != 100 || c.Size != 64 || c.ServerName != "198.51.100.2" {
			t.Errorf("%q: %+v", args, c)
		}
	}
	c, err := ParseFlags(SendBW, strings.Fields("-s 4K -c UD -b -q 4 -Q 10 --report_gbits --link afpacket --perftest_version 6.24 -D 3 --pcap x.pcapng"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Size != 4096 || c.Conn != ConnUD || !c.Duplex || c.NumQPs != 4 || c.CQMod != 10 || !c.CQModSet ||
		c.ReportFmt != ReportGbits || c.Link != "afpacket" || c.Claim != V624 || c.TestType != Duration || c.Duration != 3 || c.Pcap != "x.pcapng" {
		t.Errorf("%+v", c)
	}
	if c := parsed(t, WriteBW, []string{"-s", "1M", "--write_with_imm"}); c.Size != 1<<20 || c.Verb() != VerbWriteImm {
		t.Errorf("1M: %+v", c)
	}
}

func TestFlagErrors(t *testing.T) {
	tests := []struct {
		test  Test
		args  string
		usage bool
		want  string
	}{
		{WriteLat, "-q 2", false, "Multiple QPs only available on bw tests"},
		{ReadBW, "-I 64", false, "Inline feature not available on READ/Atomic verbs"},
		{WriteBW, "-o 4", false, "Setting Outstanding reads only available on READ verb"},
		{ReadBW, "-r 4", false, "On RDMA verbs rx depth can be only 1"},
		{WriteBW, "-A CMP_AND_SWAP", false, "You are not running the atomic_lat/bw test!"},
		{AtomicBW, "-A SWAP", false, "Invalid Atomic type!"},
		{WriteBW, "-e", false, "Events feature not available on WRITE verb"},
		{SendLat, "-b", false, "Bidirectional is only available in BW test"},
		{SendLat, "-N", false, "NoPeak only valid for BW tests"},
		{SendBW, "-C", false, "Available only on Latency tests"},
		{ReadBW, "-c UC", false, "UC connection not possible in READ/ATOMIC verbs"},
		{WriteBW, "-c UD", false, "UD connection only possible in SEND verb"},
		{SendBW, "-c XX", false, "Invalid Connection type"},
		{SendBW, "-c DC", false, "not supported by roced"},
		{SendBW, "-R -c UC", false, "UC is not supported in librdmacm"},
		{SendLat, "-R -c UC", false, "UC is not supported in librdmacm"},
		{SendBW, "-z", false, "-z; -R has both"},
		{SendBW, "-n 4", false, "Iteration num should be between 5"},
		{SendBW, "-s 0", false, "Message Size should be between 1"},
		{SendBW, "-m 1000", false, "Invalid MTU"},
		{SendBW, "-s 64 -s 128", false, "Duplicated argument: size"},
		{SendBW, "--size=64 -s 64", false, "Duplicated argument: size"},
		{SendBW, "a b", true, "Invalid Command line"},
		{SendBW, "--nope", true, "unrecognized option"},
		{SendBW, "--link tcp", false, "invalid --link"},
		{SendBW, "--perftest_version 5.5", false, "below 5.70"},
		{SendBW, "-n abc", false, "invalid Iteration num"},
		{SendBW, "--dont_xchg_versions", false, "not supported by roced"},
		{ReadLat, "--write_with_imm", false, "only for the write tests"},
		{WriteLat, "-l 2", false, "Post list is supported in BW tests only"},
		{WriteBW, "-l 3 -n 100", false, "Number of iterations must be a multiple of post list size"},
		{WriteBW, "-l 4 -Q 3 -n 100", false, "Post list size must be a multiple of CQ moderation"},
		{SendBW, "-D 2 -e", false, "Duration mode doesn't work with events."},
		{ReadBW, "-D 2 -a", false, "Duration mode currently doesn't support running on all sizes."},
		{WriteBW, "--latency_gap 5", false, "Latency gap feature is only for latency tests"},
		{WriteBW, "-w fast", false, "Invalid limit_bw value"},
		{SendBW, "--odp", false, "on-demand paging (--odp) is not supported by roced"},
		{SendBW, "--recv_post_list 4", false, "--recv_post_list is not supported by roced"},
		{WriteBW, "-s 99999999999", false, "Message Size should be between 1 and 2147483647"},
		// 2^54+1 KiB: the factor must not wrap it into range (to 1024).
		{WriteBW, "-s 18014398509481985K", false, "Message Size should be between 1 and 2147483647"},
	}
	for _, tt := range tests {
		_, err := ParseFlags(tt.test, strings.Fields(tt.args))
		if err == nil || !strings.Contains(err.Error(), tt.want) || errors.Is(err, ErrUsage) != tt.usage {
			t.Errorf("%v %q: err = %v, want %q (usage %v)", tt.test, tt.args, err, tt.want, tt.usage)
		}
	}
}

func TestResolve(t *testing.T) {
	c := parsed(t, SendBW, strings.Fields("-n 50 -s 64 -r 1"))
	notes := c.Resolve(3, 128, V624)
	if c.RxDepth != 2 || c.TxDepth != 50 || c.CQMod != 50 || !c.NoPeak || len(notes) != 1 || c.MTU != 1024 {
		t.Errorf("send_bw server: %+v %q", c, notes)
	}
	c = parsed(t, SendBW, strings.Fields("-n 50 -s 64"))
	if notes := c.Resolve(3, 128, V606); len(notes) != 0 {
		t.Errorf("6.06 warns: %q", notes)
	}
	c = parsed(t, WriteBW, strings.Fields("-s 65536 -D 2 host"))
	notes = c.Resolve(3, 128, V624)
	if c.Iters != 0 || c.CQMod != 1 || !c.NoPeak || len(notes) != 1 {
		t.Errorf("write_bw -D: %+v %q", c, notes)
	}
	c = parsed(t, ReadBW, strings.Fields("-o 500 host"))
	notes = c.Resolve(3, 128, V624)
	if c.OutReads != 128 || c.InlineSize != 0 || len(notes) != 1 || notes[0] != ResultLine() {
		t.Errorf("read_bw: %+v %q", c, notes)
	}
	for _, args := range []string{"-s 64", "-a"} {
		c = parsed(t, AtomicBW, strings.Fields(args))
		if c.Resolve(3, 128, V624); c.Size != 8 {
			t.Errorf("atomic_bw %s: size %d", args, c.Size)
		}
	}
	c = parsed(t, SendBW, strings.Fields("-l 4 -n 100 host"))
	notes = c.Resolve(3, 128, V624)
	if c.CQMod != 4 || len(notes) != 2 || notes[1] != "Post List requested - CQ moderation will be the size of the post list" {
		t.Errorf("post list: %+v %q", c, notes)
	}
	c = parsed(t, WriteBW, strings.Fields("-m 4096 -n 10"))
	c.Resolve(3, 128, V624)
	if c.MTU != 4096 || c.TxDepth != 10 || c.RxDepth != 1 {
		t.Errorf("write_bw: %+v", c)
	}
	if sh := c.Shape(3); sh.Test != WriteBW || sh.Role != Server || sh.Size != 65536 {
		t.Errorf("shape %+v", sh)
	}
}

func TestFitUD(t *testing.T) {
	tests := []struct {
		args  string
		size  uint64
		notes int
		err   error
	}{
		{"-c UD -s 1024", 1024, 0, nil},
		{"-c UD -s 1", 1, 0, nil},
		{"-c UD", 1024, 2, nil},            // the 65536 default shrinks
		{"-c UD -a", 1024, 2, nil},         // -a too, even with -s
		{"-c UD -s 1025", 0, 0, ErrUDSize}, // an explicit size does not
		{"-c RC -s 65536", 65536, 0, nil},
	}
	for _, tt := range tests {
		c, err := ParseFlags(SendBW, strings.Fields(tt.args))
		if err != nil {
			t.Fatal(err)
		}
		c.Resolve(5, 128, V624)
		notes, err := c.FitUD(3)
		if !errors.Is(err, tt.err) || len(notes) != tt.notes || err == nil && c.Size != tt.size {
			t.Errorf("%q: size %d, notes %q, err %v", tt.args, c.Size, notes, err)
		}
		if tt.notes > 0 && notes[0] != " Max msg size in UD is MTU 1024" {
			t.Errorf("%q: %q", tt.args, notes)
		}
	}
}

func TestLimits(t *testing.T) {
	c, err := ParseFlags(WriteLat, strings.Fields("--latency_gap 7 --flow_label 0x12345 --wait_destroy 2"))
	if err != nil || c.LatencyGap != 7 || c.FlowLabel != 0x12345 || c.WaitDestroy != 2 {
		t.Errorf("%+v %v", c, err)
	}
	c, err = ParseFlags(WriteBW, strings.Fields("-w 12.5 -y 0.25"))
	if err != nil || c.LimitBW != 12.5 || c.LimitRate != 0.25 {
		t.Errorf("%+v %v", c, err)
	}
}

func TestPrintHelpers(t *testing.T) {
	tests := []struct {
		v     uint64
		width int
		want  string
	}{{0, 4, "0000"}, {0x1b, 6, "0x001b"}, {0x3d70a, 6, "0x3d70a"}, {0x80, 4, "0x80"}, {0x55b62ac6a000, 16, "0x0055b62ac6a000"}}
	for _, tt := range tests {
		if got := cHex(tt.v, tt.width); got != tt.want {
			t.Errorf("cHex(%#x, %d) = %q, want %q", tt.v, tt.width, got, tt.want)
		}
	}
	if got := cFloat(inf, 7, 2, true); got != "inf    " {
		t.Errorf("inf: %q", got)
	}
	if got := cFloat(negNaN, 7, 2, true); got != "-nan   " {
		t.Errorf("-nan: %q", got)
	}
	if got := cFloat(1.005, 7, 2, false); got != "   1.00" && got != "   1.01" {
		t.Errorf("1.005: %q", got)
	}
	c := parsed(t, WriteBW, []string{"--report_gbits"})
	if row := c.BWRow(BWReport{Size: 64, Iters: 100, BWAvg: 0.05}, V624); !strings.Contains(row, "0.050000") {
		t.Errorf("gbits row with small average: %q", row)
	}
	if h := c.ResultHeader(V624); !strings.Contains(h[1], "BW peak[Gb/sec]") {
		t.Errorf("gbits header %q", h)
	}
	c = parsed(t, SendLat, []string{"-D", "2"})
	if h := c.ResultHeader(V624); !strings.Contains(h[1], "tps average") {
		t.Errorf("duration header %q", h)
	}
}

// parsed is ParseFlags for arguments a test expects to be accepted: an
// error fails the test rather than leaving a zero Config to be checked as
// if it had been parsed.
func parsed(t *testing.T, test Test, args []string) Config {
	t.Helper()
	c, err := ParseFlags(test, args)
	if err != nil {
		t.Fatalf("%v %q: %v", test, args, err)
	}
	return c
}

// TestRDMACMFlag: -R (--rdma_cm) turns the RDMA CM on for RC: the
// negotiation says use_rdma_cm, the banner says so, and a server adds
// ctx_print_test_info's note (as perftest 6.06 and 6.24 print it).
func TestRDMACMFlag(t *testing.T) {
	for _, args := range [][]string{{"-R"}, {"--rdma_cm"}} {
		c, err := ParseFlags(WriteBW, args)
		if err != nil || !c.RDMACM {
			t.Fatalf("%v: %+v %v", args, c.RDMACM, err)
		}
		if c.Params(DeviceAttr{}).UseRDMACM != 1 || !c.Shape(3).RDMACM {
			t.Errorf("%v: use_rdma_cm not in the negotiation or the shape", args)
		}
	}
	// Every program takes -R over RC (perftest's RDMA CM connects any
	// verb), and the send programs over UD too, through SIDR.
	for test := WriteBW; test <= AtomicLat; test++ {
		args := []string{"-R", "-c", "RC"}
		if c, err := ParseFlags(test, args); err != nil || !c.RDMACM || c.Conn != ConnRC {
			t.Errorf("%v %v: %v", test, args, err)
		}
	}
	for _, test := range []Test{SendBW, SendLat} {
		if c, err := ParseFlags(test, []string{"-R", "-c", "UD"}); err != nil || !c.RDMACM || c.Conn != ConnUD || !c.Shape(3).RDMACM {
			t.Errorf("%v -R -c UD: %v", test, err)
		}
	}
	c, _ := ParseFlags(WriteBW, []string{"-R"})
	c.Resolve(3, 16, V624)
	b := strings.Join(c.Banner(RunInfo{Device: "rxe0", MTU: 3}, V624), "\n")
	want := " rdma_cm QPs\t : ON\n Data ex. method : rdma_cm\n" + resultLine +
		"\n Waiting for client rdma_cm QP to connect\n Please run the same command with the IB/RoCE interface IP\n" + resultLine
	if !strings.HasSuffix(b, want) {
		t.Errorf("server banner ends\n%s", b[len(b)-300:])
	}
	c.ServerName = "host"
	if b := c.Banner(RunInfo{Device: "rxe0", MTU: 3}, V606); b[len(b)-2] != " Data ex. method : rdma_cm" {
		t.Errorf("client banner ends %q", b[len(b)-3:])
	}
}
