// Package capture rebuilds the TCP byte streams of the tools' out-of-band
// exchange from the lab's pcap files, so tests can replay the real tools'
// bytes against goroce's implementation of the other side.
package capture

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sort"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Dir is the direction of a segment.
type Dir int

const (
	// ToServer is client to server (towards the listening port).
	ToServer Dir = iota
	// ToClient is server to client.
	ToClient
)

// String returns "C->S" or "S->C".
func (d Dir) String() string {
	if d == ToServer {
		return "C->S"
	}
	return "S->C"
}

// Segment is one TCP payload as captured, in frame order.
type Segment struct {
	Frame int    // 1-based frame number, as tshark counts
	Dir   Dir    // which way it went
	Seq   uint32 // relative to the direction's first payload byte
	Data  []byte // the payload bytes the capture kept
	// Missing counts payload bytes the frame carried but the capture did
	// not keep (snap length shorter than a TSO/GRO super-segment).
	Missing int
}

// Stream is one TCP connection to the port.
type Stream struct {
	Client, Server netip.AddrPort // the connection's two ends
	Segments       []Segment      // its payload segments, in frame order
	// Bytes holds each direction's payload reassembled by sequence
	// number; Holes lists the [start, end) byte ranges of a direction
	// that the capture does not hold (their bytes are zero in Bytes).
	Bytes [2][]byte
	Holes [2][][2]int // see Bytes
}

// Complete reports whether both directions were captured without holes.
func (s *Stream) Complete() bool { return len(s.Holes[0]) == 0 && len(s.Holes[1]) == 0 }

// ReadFile returns the TCP connections with an end on port, in the order
// their first segment appears.
func ReadFile(path string, port uint16) ([]*Stream, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Read(f, port)
}

type connKey struct{ client, server netip.AddrPort }

type segInfo struct {
	seg  Segment
	seq  uint32 // absolute
	want int    // payload length the IP header announces
}

// Read is ReadFile on an open pcap.
func Read(r io.Reader, port uint16) ([]*Stream, error) {
	pr, err := pcapgo.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	var order []connKey
	segs := map[connKey][]segInfo{}
	for frame := 1; ; frame++ {
		data, _, err := pr.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("capture: frame %d: %w", frame, err)
		}
		pkt := gopacket.NewPacket(data, pr.LinkType(), gopacket.DecodeOptions{Lazy: true, NoCopy: true})
		tcp, _ := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if tcp == nil || (uint16(tcp.SrcPort) != port && uint16(tcp.DstPort) != port) {
			continue
		}
		src, dst, ipPayload, ok := endpoints(pkt)
		if !ok {
			continue
		}
		srcAP := netip.AddrPortFrom(src, uint16(tcp.SrcPort))
		dstAP := netip.AddrPortFrom(dst, uint16(tcp.DstPort))
		key, dir := connKey{srcAP, dstAP}, ToServer
		if uint16(tcp.SrcPort) == port {
			key, dir = connKey{dstAP, srcAP}, ToClient
		}
		if _, seen := segs[key]; !seen {
			order = append(order, key)
			segs[key] = nil
		}
		want := ipPayload - int(tcp.DataOffset)*4
		payload := append([]byte(nil), tcp.Payload...)
		if want < len(payload) { // Ethernet padding after a short IP packet
			payload = payload[:want]
		}
		if want <= 0 && !tcp.SYN {
			continue
		}
		seq := tcp.Seq
		if tcp.SYN {
			seq++ // the SYN takes one sequence number; data starts after it
			if want <= 0 {
				segs[key] = append(segs[key], segInfo{seg: Segment{Frame: frame, Dir: dir}, seq: seq, want: -1})
				continue
			}
		}
		segs[key] = append(segs[key], segInfo{
			seg: Segment{Frame: frame, Dir: dir, Data: payload, Missing: want - len(payload)},
			seq: seq, want: want,
		})
	}
	var out []*Stream
	for _, k := range order {
		out = append(out, assemble(k, segs[k]))
	}
	return out, nil
}

// endpoints returns the IP addresses and the IP payload length announced by
// the IP header (not what the capture kept).
func endpoints(pkt gopacket.Packet) (src, dst netip.Addr, payloadLen int, ok bool) {
	if ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ip != nil {
		s, _ := netip.AddrFromSlice(ip.SrcIP.To4())
		d, _ := netip.AddrFromSlice(ip.DstIP.To4())
		return s, d, int(ip.Length) - int(ip.IHL)*4, true
	}
	if ip, _ := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ip != nil {
		s, _ := netip.AddrFromSlice(ip.SrcIP)
		d, _ := netip.AddrFromSlice(ip.DstIP)
		return s, d, int(ip.Length), true
	}
	return netip.Addr{}, netip.Addr{}, 0, false
}

// assemble orders each direction's payload by sequence number relative to
// the SYN (or to the first payload when the handshake was not captured).
func assemble(k connKey, infos []segInfo) *Stream {
	s := &Stream{Client: k.client, Server: k.server}
	var base [2]uint32
	var haveBase [2]bool
	for _, in := range infos {
		d := in.seg.Dir
		if !haveBase[d] || (in.want < 0 && in.seq != base[d]) {
			base[d], haveBase[d] = in.seq, true
		}
	}
	type span struct{ start, end int }
	var have [2][]span
	for _, in := range infos {
		if in.want < 0 {
			continue
		}
		d := in.seg.Dir
		rel := int(in.seq - base[d])
		seg := in.seg
		seg.Seq = uint32(rel)
		s.Segments = append(s.Segments, seg)
		end := rel + len(seg.Data) + seg.Missing
		if end > len(s.Bytes[d]) {
			s.Bytes[d] = append(s.Bytes[d], make([]byte, end-len(s.Bytes[d]))...)
		}
		copy(s.Bytes[d][rel:], seg.Data)
		have[d] = append(have[d], span{rel, rel + len(seg.Data)})
	}
	for d := range have {
		sort.Slice(have[d], func(i, j int) bool { return have[d][i].start < have[d][j].start })
		covered := 0
		for _, sp := range have[d] {
			if sp.start > covered {
				s.Holes[d] = append(s.Holes[d], [2]int{covered, sp.start})
			}
			covered = max(covered, sp.end)
		}
		if covered < len(s.Bytes[d]) {
			s.Holes[d] = append(s.Holes[d], [2]int{covered, len(s.Bytes[d])})
		}
	}
	return s
}

// Chunks splits a direction's bytes at the given sizes, reporting an error
// when the stream is shorter or longer than their sum.
func Chunks(b []byte, sizes ...int) ([][]byte, error) {
	var out [][]byte
	for i, n := range sizes {
		if len(b) < n {
			return nil, fmt.Errorf("capture: chunk %d wants %d bytes, %d left", i, n, len(b))
		}
		out = append(out, b[:n])
		b = b[n:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("capture: %d bytes left after %d chunks: %q", len(b), len(sizes), head(b))
	}
	return out, nil
}

func head(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return bytes.Clone(b)
}
