package tap

import (
	"errors"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/pcapgo"
	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic/internal/linktest"
	"github.com/goroce/goroce/nic/udp"
)

// TestTap records a two-way exchange between two UDP links, one file in
// pcap and one in pcapng, and checks each file with our own reader (every
// ICRC verifies, received frames carry the recovered identification) and
// with tshark (every packet decodes as RoCE, with the direction in pcapng).
func TestTap(t *testing.T) {
	dir := t.TempDir()
	a0 := linktest.Open(t, func() (*udp.Link, error) { return udp.Open(udp.Config{Addr: netip.MustParseAddr("127.0.0.1")}) })
	b0 := linktest.Open(t, func() (*udp.Link, error) { return udp.Open(udp.Config{Addr: netip.MustParseAddr("127.0.0.2")}) })
	pa, pb := filepath.Join(dir, "a.pcap"), filepath.Join(dir, "b.pcapng")
	a, err := Open(a0, pa)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(b0, pb)
	if err != nil {
		t.Fatal(err)
	}
	linktest.Exchange(t, a, b, linktest.Outer(a, netip.MustParseAddr("127.0.0.2"), 1), 100, 1024, 50)
	linktest.Exchange(t, b, a, linktest.Outer(b, netip.MustParseAddr("127.0.0.1"), 2), 50, 256, 50)
	a.Close()
	b.Close()
	for _, p := range []string{pa, pb} {
		n, ids := readTap(t, p)
		if n != 150 {
			t.Fatalf("%s: %d packets, want 150", p, n)
		}
		// GSO sends of 50 give identifications 0..49 on the wire; the
		// receiving side recovered them.
		if ids < 40 {
			t.Fatalf("%s: only %d distinct identifications recorded", p, ids)
		}
	}
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Fatal("tshark is needed to check the tap's files (apt-get install tshark)")
	}
	for _, p := range []string{pa, pb} {
		out, err := exec.Command(tshark, "-r", p, "-T", "fields", "-e", "infiniband.bth.opcode", "-e", "frame.packet_flags_direction", "-e", "ip.id").Output()
		if err != nil {
			t.Fatalf("tshark %s: %v\n%s", p, err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != 150 {
			t.Fatalf("tshark read %d packets from %s", len(lines), p)
		}
		dirs := map[string]int{}
		for _, l := range lines {
			f := strings.Split(l, "\t")
			if len(f) < 3 || f[0] != "4" {
				t.Fatalf("tshark %s: %q is not a RoCE SEND Only", p, l)
			}
			dirs[f[1]]++
		}
		if strings.HasSuffix(p, ".pcapng") && (dirs["0x00000001"] != 100 || dirs["0x00000002"] != 50) {
			t.Fatalf("pcapng directions (1 in, 2 out; b received 100, sent 50): %v", dirs)
		}
	}
}

// readTap reads a pcap or pcapng file of raw IP datagrams, checks every
// ICRC and returns the packet count and the number of distinct IPv4
// identifications.
func readTap(t *testing.T, path string) (int, int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var next func() ([]byte, error)
	if strings.HasSuffix(path, ".pcapng") {
		r, err := pcapgo.NewNgReader(f, pcapgo.DefaultNgReaderOptions)
		if err != nil {
			t.Fatal(err)
		}
		next = func() ([]byte, error) { d, _, err := r.ReadPacketData(); return d, err }
	} else {
		r, err := pcapgo.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		if r.LinkType() != 101 {
			t.Fatalf("link type %v, want RAW", r.LinkType())
		}
		next = func() ([]byte, error) { d, _, err := r.ReadPacketData(); return d, err }
	}
	n := 0
	ids := map[uint16]bool{}
	for {
		d, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		fr, err := bth.DecodeIP(d)
		if err != nil || !fr.VerifyICRC() {
			t.Fatalf("%s packet %d: %v, ICRC verifies: %v", path, n, err, err == nil && fr.VerifyICRC())
		}
		id, _ := linktest.IPv4ID(fr)
		ids[id] = true
		n++
	}
	return n, len(ids)
}
