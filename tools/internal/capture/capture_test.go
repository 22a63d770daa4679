package capture

import (
	"bytes"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"
)

const dir = "../../../bth/testdata"

func TestReadFileStreams(t *testing.T) {
	tests := []struct {
		file         string
		c2s, s2c     int
		holeToClient [][2]int
	}{
		{"captures/rc_pingpong_s64.pcap", 57, 52, nil},
		{"captures/write_bw_s64.pcap", 611, 611, nil},
		{"captures-trixie/write_bw_s64.pcap", 606, 606, nil},
		{"captures-trixie/pt629_write_bw_s64.pcap", 926, 926, nil},
		{"captures-trixie/srq_pingpong_s64.pcap", 13317, 13312, nil},
		// tcpdump's snap length (2048) cut GRO super-segments short: the
		// sequence numbers still tell how long the stream was.
		{"captures/srq_pingpong_s8192.pcap", 13317, 13312, [][2]int{{11554, 13312}}},
	}
	for _, tt := range tests {
		ss, err := ReadFile(filepath.Join(dir, tt.file), 18515)
		if err != nil {
			t.Fatalf("%s: %v", tt.file, err)
		}
		if len(ss) != 1 {
			t.Fatalf("%s: %d streams, want 1", tt.file, len(ss))
		}
		s := ss[0]
		if len(s.Bytes[ToServer]) != tt.c2s || len(s.Bytes[ToClient]) != tt.s2c {
			t.Errorf("%s: %d/%d bytes, want %d/%d", tt.file, len(s.Bytes[0]), len(s.Bytes[1]), tt.c2s, tt.s2c)
		}
		if len(s.Holes[ToServer]) != 0 {
			t.Errorf("%s: holes to server %v", tt.file, s.Holes[ToServer])
		}
		if len(s.Holes[ToClient]) != len(tt.holeToClient) || (len(tt.holeToClient) > 0 && s.Holes[ToClient][0] != tt.holeToClient[0]) {
			t.Errorf("%s: holes to client %v, want %v", tt.file, s.Holes[ToClient], tt.holeToClient)
		}
		if s.Server.Port() != 18515 || s.Client.Port() == 18515 {
			t.Errorf("%s: endpoints %v -> %v", tt.file, s.Client, s.Server)
		}
	}
}

func TestSegmentsInFrameOrder(t *testing.T) {
	ss, err := ReadFile(filepath.Join(dir, "captures/rc_pingpong_s64.pcap"), 18515)
	if err != nil {
		t.Fatal(err)
	}
	segs := ss[0].Segments
	want := []struct {
		dir Dir
		n   int
	}{{ToServer, 52}, {ToClient, 52}, {ToServer, 5}}
	if len(segs) != len(want) {
		t.Fatalf("%d segments, want %d", len(segs), len(want))
	}
	for i, w := range want {
		if segs[i].Dir != w.dir || len(segs[i].Data) != w.n || segs[i].Frame <= 0 {
			t.Errorf("segment %d: %v %d bytes frame %d, want %v %d", i, segs[i].Dir, len(segs[i].Data), segs[i].Frame, w.dir, w.n)
		}
	}
	if !bytes.Equal(segs[2].Data, []byte("done\x00")) {
		t.Errorf("last segment %q", segs[2].Data)
	}
}

func TestOtherPortIgnored(t *testing.T) {
	ss, err := ReadFile(filepath.Join(dir, "captures/rc_pingpong_s64.pcap"), 4791)
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 0 {
		t.Errorf("%d TCP streams on port 4791, want 0", len(ss))
	}
}

func TestChunks(t *testing.T) {
	got, err := Chunks([]byte("abcdef"), 2, 4)
	if err != nil || string(got[0]) != "ab" || string(got[1]) != "cdef" {
		t.Errorf("Chunks = %q, %v", got, err)
	}
	if _, err := Chunks([]byte("abc"), 2); err == nil {
		t.Error("Chunks accepted a trailing byte")
	}
	if _, err := Chunks([]byte("a"), 2); err == nil {
		t.Error("Chunks accepted a short stream")
	}
}

func TestNotAPcap(t *testing.T) {
	if _, err := Read(bytes.NewReader([]byte("not a pcap file at all")), 18515); err == nil {
		t.Error("Read accepted garbage")
	}
}

func TestReplay(t *testing.T) {
	a, b := net.Pipe()
	script := []Step{{ToServer, 3}, {ToClient, 2}, {ToServer, 1}}
	go func() {
		// The side under test: client.
		a.Write([]byte("abc"))
		buf := make([]byte, 2)
		io.ReadFull(a, buf)
		a.Write([]byte("d"))
		a.Close()
	}()
	got, err := Replay(b, script, ToClient, []byte("xy"), time.Second)
	if err != nil || string(got) != "abcd" {
		t.Fatalf("Replay = %q, %v", got, err)
	}
}

func TestReplayShortRecording(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	go io.Copy(io.Discard, a)
	if _, err := Replay(b, []Step{{ToClient, 5}}, ToClient, []byte("xy"), time.Second); err == nil {
		t.Fatal("Replay accepted a recording shorter than the script")
	}
}
