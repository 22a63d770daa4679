package interop

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

func TestLabLock(t *testing.T) {
	t.Setenv("RXE_PEER_STATE", filepath.Join(t.TempDir(), "state"))
	a, b := NewLab("/lab"), NewLab("/lab")
	if err := a.Lock(0); err != nil {
		t.Fatal(err)
	}
	err := b.Lock(0)
	if err == nil || !strings.Contains(err.Error(), "another interop run holds") {
		t.Fatalf("second lock: %v", err)
	}
	a.lock.Close()
	if err := b.Lock(0); err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	b.lock.Close()
}

func TestNewLabEnv(t *testing.T) {
	for k, v := range map[string]string{"RXE_PEER_HOST_ADDR": "198.18.15.1/24", "RXE_PEER_GUEST_ADDR": "198.18.15.2/24",
		"RXE_PEER_SUITE": "trixie", "RXE_PEER_NETNS": "", "RXE_PEER_TAP": "rxetap5", "RXE_PEER_MTU": "9000"} {
		t.Setenv(k, v)
	}
	l := NewLab("/x")
	if l.HostAddr != "198.18.15.1" || l.GuestAddr != "198.18.15.2" || l.Suite != "trixie" || l.NetNS != "" ||
		l.Tap != "rxetap5" || l.MTU != 9000 || l.Script != "/x/rxe-peer.sh" {
		t.Errorf("got %+v", l)
	}
	// An empty RXE_PEER_NETNS means the caller's namespace, as in rxe-peer.sh.
	if got := l.Host().Where(); got != "host" {
		t.Errorf("Where() = %q", got)
	}
}

func TestFindLabDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rxe-peer.sh"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := FindLabDir(dir); err != nil || got != dir {
		t.Errorf("FindLabDir(%s) = %q, %v", dir, got, err)
	}
	t.Setenv("RXE_PEER_DIR", dir)
	if got, err := FindLabDir(""); err != nil || got != dir {
		t.Errorf("with RXE_PEER_DIR: %q, %v", got, err)
	}
	missing := filepath.Join(dir, "nowhere")
	t.Setenv("RXE_PEER_DIR", missing)
	if _, err := FindLabDir(""); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("a missing lab: %v, want an error naming %s", err, missing)
	}
}

// writeRing writes a pcap file holding one packet per timestamp (the
// packet's first byte is its index in ts).
func writeRing(t *testing.T, name string, ts []time.Time, first int) {
	t.Helper()
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(1564, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	for i, x := range ts {
		d := make([]byte, 60)
		d[0] = byte(first + i)
		if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: x, CaptureLength: 60, Length: 60}, d); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
}

// A failed case's guest capture is its window of the session's ring
// files, in time order whatever the files' names, bounds included.
func TestCutPcap(t *testing.T) {
	dir := t.TempDir()
	base := time.Unix(1764038400, 0)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	// The ring's newer file has the lower number, as after a wrap.
	writeRing(t, filepath.Join(dir, "s.pcap0"), []time.Time{at(300), at(400), at(500)}, 3)
	writeRing(t, filepath.Join(dir, "s.pcap7"), []time.Time{at(0), at(100), at(200)}, 0)
	// A file tcpdump had just opened holds its header at most.
	os.WriteFile(filepath.Join(dir, "s.pcap1"), nil, 0o644)
	dest := filepath.Join(t.TempDir(), "guest.pcap")
	wrapped, err := cutPcap(dir, dest, at(100), at(400), 8)
	if err != nil || wrapped {
		t.Fatalf("cutPcap: wrapped %v, %v", wrapped, err)
	}
	f, err := os.Open(dest)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if r.LinkType() != layers.LinkTypeEthernet || r.Snaplen() != 1564 {
		t.Errorf("link %v snaplen %d", r.LinkType(), r.Snaplen())
	}
	var got []int
	for {
		d, _, err := r.ReadPacketData()
		if err != nil {
			break
		}
		got = append(got, int(d[0]))
	}
	if fmt.Sprint(got) != "[1 2 3 4]" {
		t.Errorf("packets %v, want [1 2 3 4]", got)
	}
	// Every file of the ring begins after the case did: its start is gone.
	if wrapped, err := cutPcap(dir, dest, at(-50), at(400), 3); err != nil || !wrapped {
		t.Errorf("a wrapped ring: wrapped %v, %v", wrapped, err)
	}
	if _, err := cutPcap(t.TempDir(), dest, at(0), at(1), 8); err == nil {
		t.Error("no file: no error")
	}
}

// TestLabUpSuite: a VM already up is used only if it is the suite asked
// for; one that is not up is booted.
func TestLabUpSuite(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "calls")
	script := `#!/bin/sh
echo "$1" >> ` + log + `
case "$1" in
status) [ -e ` + filepath.Join(dir, "running") + ` ] && printf 'state=ready\nguest_os=trixie\n' || echo state=down ;;
esac
`
	if err := os.WriteFile(filepath.Join(dir, "rxe-peer.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	calls := func() string {
		b, _ := os.ReadFile(log)
		os.Remove(log)
		return strings.Join(strings.Fields(string(b)), " ")
	}
	for _, c := range []struct {
		running bool
		suite   string
		err     string // "" for none
		calls   string
	}{
		{true, "bookworm", "the lab's running guest is trixie, not bookworm (RXE_PEER_SUITE)", "status"},
		{true, "trixie", "", "status"},
		{false, "bookworm", "", "status up"},
	} {
		os.Remove(filepath.Join(dir, "running"))
		if c.running {
			if err := os.WriteFile(filepath.Join(dir, "running"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Setenv("RXE_PEER_SUITE", c.suite)
		err := NewLab(dir).Up(t.Context())
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("running %v, suite %s: Up = %v, want %q", c.running, c.suite, err, c.err)
		}
		if got := calls(); got != c.calls {
			t.Errorf("running %v, suite %s: the script was called for %q, want %q", c.running, c.suite, got, c.calls)
		}
	}
}
