// Package pcapfile reads packet captures in either of the two formats
// tcpdump, tshark and dumpcap write, classic pcap and pcapng, telling them
// apart by their first four bytes. It is a thin layer over gopacket's pcapgo
// readers that also reports each packet's link type and the timestamp
// resolution the file declares, which a pcapng file may set per interface.
package pcapfile

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Packet is one captured packet.
type Packet struct {
	Data     []byte               // the captured bytes, from the link-layer header on
	Info     gopacket.CaptureInfo // timestamp and lengths, as the file records them
	LinkType layers.LinkType      // the link-layer header Data starts with
	// Resolution is the timestamp resolution the file declares for this
	// packet (microseconds or nanoseconds for classic pcap, per interface
	// for pcapng).
	Resolution gopacket.TimestampResolution
	// Comments are the packet's pcapng comments (opt_comment): goroce's
	// fault injector marks the packets it changed there.
	Comments []string
}

// Format is a capture file format.
type Format uint8

// Capture file formats.
const (
	PCAP   Format = iota + 1 // classic libpcap format
	PCAPNG                   // pcap next generation
)

// String returns "pcap" or "pcapng".
func (f Format) String() string {
	switch f {
	case PCAP:
		return "pcap"
	case PCAPNG:
		return "pcapng"
	}
	return "unknown"
}

// pcapngMagic is the block type of a pcapng section header block; it reads
// the same in either byte order.
const pcapngMagic = 0x0a0d0d0a

// Reader reads packets from a pcap or pcapng stream.
type Reader struct {
	format Format
	pcap   *pcapgo.Reader
	ng     *pcapgo.NgReader
}

// NewReader reads the file header of r and returns a reader for its packets.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReader(r)
	magic, err := br.Peek(4)
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("pcapfile: reading file header: %w", err)
	}
	if binary.LittleEndian.Uint32(magic) == pcapngMagic {
		ng, err := pcapgo.NewNgReader(br, pcapgo.NgReaderOptions{})
		if err != nil {
			return nil, fmt.Errorf("pcapfile: pcapng: %w", err)
		}
		return &Reader{format: PCAPNG, ng: ng}, nil
	}
	p, err := pcapgo.NewReader(br)
	if err != nil {
		return nil, fmt.Errorf("pcapfile: %w", err)
	}
	return &Reader{format: PCAP, pcap: p}, nil
}

// Format returns the file's format.
func (r *Reader) Format() Format { return r.format }

// Next returns the next packet, or io.EOF after the last. A file cut short
// in the middle of a packet gives io.ErrUnexpectedEOF (possibly wrapped).
func (r *Reader) Next() (Packet, error) {
	if r.format == PCAP {
		data, ci, err := r.pcap.ReadPacketData()
		if err != nil {
			return Packet{}, err
		}
		return Packet{Data: data, Info: ci, LinkType: r.pcap.LinkType(), Resolution: r.pcap.Resolution()}, nil
	}
	data, ci, opts, err := r.ng.ReadPacketDataWithOptions()
	if err != nil {
		return Packet{}, err
	}
	p := Packet{Data: data, Info: ci, LinkType: r.ng.LinkType(), Comments: opts.Comments}
	if iface, err := r.ng.Interface(ci.InterfaceIndex); err == nil {
		p.LinkType = iface.LinkType
		p.Resolution = iface.TimestampResolution.ToTimestampResolution()
	}
	return p, nil
}

// ReadFile reads every packet of the capture file at path.
func ReadFile(path string) ([]Packet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var pkts []Packet
	for {
		p, err := r.Next()
		if errors.Is(err, io.EOF) {
			return pkts, nil
		}
		if err != nil {
			return pkts, fmt.Errorf("%s: packet %d: %w", path, len(pkts)+1, err)
		}
		pkts = append(pkts, p)
	}
}
