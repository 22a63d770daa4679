package main

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/bth/pcapfile"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

const captures = "../../bth/testdata/"

func decodeOut(t *testing.T, args ...string) (stdout, stderr string, status int) {
	t.Helper()
	var o, e bytes.Buffer
	status = run(append([]string{"decode"}, args...), &o, &e)
	return o.String(), e.String(), status
}

// TestDecodeGolden compares roced decode's output for a few captures with
// the golden files (go test -run DecodeGolden -update rewrites them).
func TestDecodeGolden(t *testing.T) {
	for _, tc := range []struct {
		golden string
		args   []string
	}{
		{"rc_pingpong_s64.golden", []string{captures + "captures/rc_pingpong_s64.pcap"}},
		{"send_bw_rnr_s64.golden", []string{captures + "captures/send_bw_rnr_s64.pcap"}},
		{"host_probe.golden", []string{captures + "captures/host_probe_host_tap.pcap"}},
		{"rping_c5_trixie.golden", []string{captures + "captures-trixie/rping_c5.pcap"}},
		{"atomic_bw_fadd.golden", []string{captures + "captures/atomic_bw_fadd.pcap"}},
		{"host_rc_send_interop_v.golden", []string{"-v", captures + "captures/host_rc_send_interop.pcap"}},
		{"ud_pingpong_s64_v.golden", []string{"-v", captures + "captures/ud_pingpong_s64.pcap"}},
	} {
		out, _, status := decodeOut(t, tc.args...)
		if status != 0 {
			t.Errorf("%s: exit status %d", tc.golden, status)
		}
		path := filepath.Join("testdata", tc.golden)
		if *update {
			if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if out != string(want) {
			t.Errorf("%s: output differs from the golden file (run with -update after checking):\n%s", tc.golden, firstDiff(out, string(want)))
		}
	}
}

func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "line " + strconv.Itoa(i+1) + ":\n got " + gl + "\nwant " + wl
		}
	}
	return ""
}

// TestDecodeEveryCapture: every RoCEv2 line of every capture ends in
// icrc=ok, and the only malformed packets are the two ASCII probes; the
// counts are those of the lab's ICRC checker.
func TestDecodeEveryCapture(t *testing.T) {
	files, _ := filepath.Glob(captures + "captures*/*.pcap")
	if len(files) == 0 {
		t.Fatal("no captures")
	}
	var ok, malformed int
	for _, fn := range files {
		out, stderr, status := decodeOut(t, fn)
		if status != 0 {
			t.Fatalf("%s: exit %d: %s", fn, status, stderr)
		}
		for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			switch {
			case l == "":
			case strings.HasSuffix(l, " icrc=ok"):
				ok++
			case strings.Contains(l, " malformed: ") && strings.Contains(fn, "host_probe_"):
				malformed++
			default:
				t.Errorf("%s: %s", filepath.Base(fn), l)
			}
		}
	}
	if ok != 3111+3626 || malformed != 2 {
		t.Errorf("%d icrc=ok lines and %d malformed, want %d and 2", ok, malformed, 3111+3626)
	}
}

// rewrite writes the packets of a capture under another link type and
// format, converting each Ethernet frame's header.
func rewrite(t *testing.T, src string, lt layers.LinkType, ng bool) string {
	t.Helper()
	pkts, err := pcapfile.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "x.cap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var write func(gopacket.CaptureInfo, []byte) error
	if ng {
		w, err := pcapgo.NewNgWriterInterface(f, pcapgo.NgInterface{LinkType: lt, SnapLength: 65535, TimestampResolution: 9}, pcapgo.DefaultNgWriterOptions)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Flush()
		write = w.WritePacket
	} else {
		w := pcapgo.NewWriter(f)
		if err := w.WriteFileHeader(65535, lt); err != nil {
			t.Fatal(err)
		}
		write = w.WritePacket
	}
	for _, p := range pkts {
		eth, l3 := p.Data[:bth.EthHeaderLen], p.Data[bth.EthHeaderLen:]
		et := eth[12:14]
		var hdr []byte
		switch lt {
		case layers.LinkTypeEthernet:
			hdr = eth
		case layers.LinkTypeLinuxSLL:
			hdr = make([]byte, bth.SLLHeaderLen)
			binary.BigEndian.PutUint16(hdr[2:], 1)
			binary.BigEndian.PutUint16(hdr[4:], 6)
			copy(hdr[6:], eth[6:12])
			copy(hdr[14:], et)
		case layers.LinkTypeLinuxSLL2:
			hdr = make([]byte, bth.SLL2HeaderLen)
			copy(hdr, et)
			binary.BigEndian.PutUint32(hdr[4:], 7)
			binary.BigEndian.PutUint16(hdr[8:], 1)
			hdr[11] = 6
			copy(hdr[12:], eth[6:12])
		case layers.LinkTypeIPv4:
			if et[0] != 0x08 { // leave out what is not IPv4 (none here)
				continue
			}
		}
		data := append(append([]byte{}, hdr...), l3...)
		ci := p.Info
		ci.CaptureLength, ci.Length = len(data), len(data)
		ci.InterfaceIndex = 0
		if err := write(ci, data); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// TestDecodeFramings: the same packets in pcapng, raw IP and Linux cooked
// (SLL, SLL2) captures decode to the same lines as the Ethernet pcap.
func TestDecodeFramings(t *testing.T) {
	for _, src := range []string{captures + "captures/rping_c5.pcap", captures + "captures/write_bw_s64.pcap"} {
		want, _, _ := decodeOut(t, src)
		for _, tc := range []struct {
			lt layers.LinkType
			ng bool
		}{
			{layers.LinkTypeEthernet, true},
			{layers.LinkTypeRaw, false},
			{layers.LinkTypeIPv4, false},
			{layers.LinkTypeLinuxSLL, false},
			{layers.LinkTypeLinuxSLL2, true},
		} {
			path := rewrite(t, src, tc.lt, tc.ng)
			got, stderr, status := decodeOut(t, path)
			if tc.ng {
				// pcapng was written with nanosecond timestamps.
				got = nsTimestamp.ReplaceAllString(got, "$1 ")
			}
			if status != 0 || got != want {
				t.Errorf("%s as link type %d (pcapng %v): exit %d %s\n%s", src, tc.lt, tc.ng, status, stderr, firstDiff(got, want))
			}
			if tc.ng && len(nsTimestamp.FindAllString(got, -1)) != 0 {
				t.Error("nanosecond timestamps left")
			}
			if raw, _, _ := decodeOut(t, path); tc.ng && !nsTimestamp.MatchString(raw) {
				t.Errorf("pcapng nanosecond timestamps not printed with nine digits:\n%s", raw[:100])
			}
		}
	}
	// -v shows the cooked headers.
	v, _, _ := decodeOut(t, "-v", rewrite(t, captures+"captures/rc_pingpong_s64.pcap", layers.LinkTypeLinuxSLL2, true))
	if !strings.Contains(v, "    sll2 proto=0x0800 ifindex=7 hatype=1 pkttype=0 addr=") {
		t.Errorf("-v of an SLL2 capture:\n%s", v)
	}
}

// nsTimestamp matches a timestamp printed with nine digits whose last
// three are zero.
var nsTimestamp = regexp.MustCompile(`(\.[0-9]{6})000 `)

func TestDecodeBadInput(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile(captures + "captures/rc_pingpong_s64.pcap")
	if err != nil {
		t.Fatal(err)
	}
	// A file cut in the middle of a packet: the lines before, then exit 1.
	cut := filepath.Join(dir, "cut.pcap")
	os.WriteFile(cut, src[:len(src)/2], 0o644)
	out, stderr, status := decodeOut(t, cut)
	if status != 1 || !strings.Contains(out, "icrc=ok") || !strings.Contains(stderr, "roced decode:") {
		t.Errorf("truncated file: exit %d\n%s\n%s", status, out, stderr)
	}
	// Not a capture.
	junk := filepath.Join(dir, "junk.pcap")
	os.WriteFile(junk, []byte("this is not a capture file"), 0o644)
	if _, _, status := decodeOut(t, junk); status != 1 {
		t.Errorf("junk file: exit %d", status)
	}
	if _, _, status := decodeOut(t, filepath.Join(dir, "missing.pcap")); status != 1 {
		t.Errorf("missing file: exit %d", status)
	}
	if _, _, status := decodeOut(t); status != 2 {
		t.Errorf("no file: exit %d", status)
	}
	// -h: the usage on stdout, as every roced command prints it.
	if out, stderr, status := decodeOut(t, "-h"); status != 0 || !strings.Contains(out, "icrc=ok|BAD") || stderr != "" {
		t.Errorf("-h: exit %d, stdout %q, stderr %q", status, out, stderr)
	}

	// One bad ICRC, one bad IPv4 checksum, one truncated capture of a
	// packet, one unknown link type.
	pkts, _ := pcapfile.ReadFile(captures + "captures/rc_pingpong_s64.pcap")
	var roce [][]byte
	for _, p := range pkts {
		if _, err := bth.DecodeEthernet(p.Data); err == nil {
			roce = append(roce, p.Data)
		}
	}
	badICRC := bytes.Clone(roce[0])
	badICRC[len(badICRC)-1] ^= 1
	badCsum := bytes.Clone(roce[1])
	badCsum[bth.EthHeaderLen+10] ^= 1
	path := filepath.Join(dir, "bad.pcap")
	f, _ := os.Create(path)
	w := pcapgo.NewWriter(f)
	w.WriteFileHeader(65535, layers.LinkTypeEthernet)
	ts := time.Unix(100, 5000)
	w.WritePacket(gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(badICRC), Length: len(badICRC)}, badICRC)
	w.WritePacket(gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(badCsum), Length: len(badCsum)}, badCsum)
	w.WritePacket(gopacket.CaptureInfo{Timestamp: ts, CaptureLength: 60, Length: len(roce[2])}, roce[2][:60])
	w.WritePacket(gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(roce[3]), Length: len(roce[3])}, roce[3])
	w.WritePacket(gopacket.CaptureInfo{Timestamp: ts, CaptureLength: 50, Length: len(roce[4])}, roce[4][:50])
	f.Close()
	out, stderr, status = decodeOut(t, path)
	wantLines := []string{
		"1 100.000005 198.51.100.1:49441 > 198.51.100.2:4791 RC SEND Only qpn=0x000011 psn=0xc6c7a0 ackreq=1 payload=64 icrc=BAD",
		"2 100.000005 198.51.100.2:49441 > 198.51.100.1:4791 malformed: bth: bad IPv4 header checksum (20 bytes)",
		// Cut by a snap length after its headers: decoded, ICRC not checked.
		"3 100.000005 198.51.100.2:49441 > 198.51.100.1:4791 RC SEND Only qpn=0x000011 psn=0x344551 ackreq=1 payload=64 icrc=cut [captured 60 of 122 bytes]",
		"4 100.000005 198.51.100.1:49441 > 198.51.100.2:4791 RC Acknowledge qpn=0x000011 psn=0x344551 ackreq=0 aeth ACK credits=invalid msn=1 payload=0 icrc=ok",
		// Cut inside the BTH: nothing is made up from the missing bytes.
		"5 100.000005 198.51.100.1:49441 > 198.51.100.2:4791 malformed: the capture cut the packet inside its transport headers (80 bytes) [captured 50 of 122 bytes]",
	}
	if status != 0 || out != strings.Join(wantLines, "\n")+"\n" {
		t.Errorf("bad packets: exit %d\n%s\nwant\n%s", status, out, strings.Join(wantLines, "\n"))
	}
	if !strings.Contains(stderr, "5 packets, 3 RoCEv2 (1 cut by the snap length, ICRC not checked), 1 ICRC bad, 2 malformed, 0 other") {
		t.Errorf("summary: %s", stderr)
	}
	// The ladder of the same file: the bad ICRC and the cut packet
	// explained, the packets decode calls malformed left out.
	out, stderr, status = decodeOut(t, "--ladder", path)
	for _, want := range []string{
		"* ICRC BAD: the receiver must drop it silently",
		"* cut by the capture's snap length: ICRC not checked",
	} {
		if status != 0 || !strings.Contains(out, want) {
			t.Errorf("--ladder: exit %d, no %q in\n%s", status, want, out)
		}
	}
	if !strings.Contains(stderr, "3 RoCEv2 packets, 3 drawn") {
		t.Errorf("--ladder summary: %s", stderr)
	}
	// -v shows of a cut packet only what the capture kept.
	out, _, _ = decodeOut(t, "-v", path)
	for _, want := range []string{
		"    payload 64 bytes, 6 captured " + hex.EncodeToString(roce[2][54:60]) + "\n    icrc not captured\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("-v of a cut packet: want %q in\n%s", want, out)
		}
	}
}
