// Package tap records what a link sends and receives to a pcap or pcapng
// file: a wrapper around any nic.Link.
package tap

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/goroce/goroce/nic"
)

// Tap wraps a link and records every frame it sends and receives to a pcap
// or pcapng file that Wireshark and tshark read.
//
// Link type: LINKTYPE_RAW (101), the bare IP datagram. Every link moves IP
// datagrams through this interface whatever it puts on the wire, so one
// link type serves all of them; synthesising an Ethernet header for the
// UDP link would mean inventing MAC addresses. Wireshark decodes RAW as
// IPv4 or IPv6 by the version nibble and then RoCEv2 on UDP port 4791.
//
// What is recorded is what the engine sees: sent frames as the engine built
// them (IPv4 identification 0; a GSO segment's wire identification differs
// and the UDP link corrects the wire ICRC to match it) and received frames
// as the link hands them over, for the UDP link with the rebuilt headers
// and the recovered identification, so the ICRC verifies in the file.
//
// pcapng (chosen by a .pcapng file name) also records each packet's
// direction (epb_flags inbound/outbound).
type Tap struct {
	nic.Link
	mu    sync.Mutex
	bw    *bufio.Writer
	pcap  *pcapgo.Writer
	ng    *pcapgo.NgWriter
	c     io.Closer
	err   error
	in    pcapgo.NgPacketOptions
	out   pcapgo.NgPacketOptions
	close sync.Once
}

// Open creates path (pcapng if it ends in .pcapng, else pcap) and wraps
// l. Closing the tap closes the file and the link.
func Open(l nic.Link, path string) (*Tap, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	t, err := New(l, f, strings.HasSuffix(path, ".pcapng"))
	if err != nil {
		f.Close()
		return nil, err
	}
	t.c = f
	return t, nil
}

// New wraps l, writing to w in pcapng (ng) or pcap format.
func New(l nic.Link, w io.Writer, ng bool) (*Tap, error) {
	t := &Tap{Link: l, bw: bufio.NewWriterSize(w, 1<<20)}
	var err error
	if ng {
		t.ng, err = pcapgo.NewNgWriterInterface(t.bw, pcapgo.NgInterface{
			Name: l.Info().Name, LinkType: layers.LinkTypeRaw, SnapLength: 65535,
		}, pcapgo.DefaultNgWriterOptions)
		in, out := pcapgo.NgEpbFlags{Direction: pcapgo.NgEpbFlagDirectionInbound}, pcapgo.NgEpbFlags{Direction: pcapgo.NgEpbFlagDirectionOutbound}
		t.in.Flags, t.out.Flags = &in, &out
	} else {
		t.pcap = pcapgo.NewWriterNanos(t.bw)
		err = t.pcap.WriteFileHeader(65535, layers.LinkTypeRaw)
	}
	if err != nil {
		return nil, fmt.Errorf("nic: tap: %w", err)
	}
	return t, nil
}

// Send sends through the wrapped link and records the frames it accepted.
func (t *Tap) Send(frames []nic.Frame) (int, error) {
	n, err := t.Link.Send(frames)
	t.record(frames[:n], &t.out)
	return n, err
}

// SendNoted is Send with a comment on each frame's record (pcapng only:
// pcap has nowhere to put one), so a fault injector can mark in the
// capture the packets it changed, duplicated or held back.
func (t *Tap) SendNoted(frames []nic.Frame, note string) (int, error) {
	n, err := t.Link.Send(frames)
	o := t.out
	o.Comments = []string{note}
	t.record(frames[:n], &o)
	return n, err
}

// RxQueues reports the wrapped link's receive queues (1 if it has no
// more), so that a device over the tap receives from every one of them.
func (t *Tap) RxQueues() int {
	if mq, ok := t.Link.(nic.MultiQueue); ok {
		return mq.RxQueues()
	}
	return 1
}

// RecvQueue receives from queue i of the wrapped link and records what
// arrived.
func (t *Tap) RecvQueue(i int, frames []nic.Frame) (int, error) {
	mq, ok := t.Link.(nic.MultiQueue)
	if !ok {
		if i != 0 {
			return 0, fmt.Errorf("nic: tap over %s: no receive queue %d", t.Link.Info().Name, i)
		}
		return t.Recv(frames)
	}
	n, err := mq.RecvQueue(i, frames)
	t.record(frames[:n], &t.in)
	return n, err
}

// Recv receives from the wrapped link and records what arrived.
func (t *Tap) Recv(frames []nic.Frame) (int, error) {
	n, err := t.Link.Recv(frames)
	t.record(frames[:n], &t.in)
	return n, err
}

func (t *Tap) record(frames []nic.Frame, dir *pcapgo.NgPacketOptions) {
	if len(frames) == 0 {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, f := range frames {
		if t.err != nil {
			return
		}
		if f.Off < 0 || f.Off > len(f.B) {
			continue
		}
		d := f.Datagram()
		ci := gopacket.CaptureInfo{Timestamp: now, CaptureLength: len(d), Length: len(d)}
		if t.ng != nil {
			t.err = t.ng.WritePacketWithOptions(ci, d, *dir)
		} else {
			t.err = t.pcap.WritePacket(ci, d)
		}
	}
}

// Flush writes buffered records to the file.
func (t *Tap) Flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return t.err
	}
	if t.ng != nil {
		if err := t.ng.Flush(); err != nil {
			return err
		}
	}
	return t.bw.Flush()
}

// Err returns the first error writing the file (recording stops there;
// the link goes on).
func (t *Tap) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// Close closes the link, then flushes and closes the file.
func (t *Tap) Close() error {
	var err error
	t.close.Do(func() {
		err = t.Link.Close()
		ferr := t.Flush()
		if t.c != nil {
			ferr = errors.Join(ferr, t.c.Close())
		}
		if err == nil {
			err = ferr
		}
	})
	return err
}
