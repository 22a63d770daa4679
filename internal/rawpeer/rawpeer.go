// Package rawpeer is the tests' one scripted raw peer: an endpoint with no
// engine behind it that sends RoCEv2 packets built field by field, right
// or deliberately wrong, over any link, and hands back what arrives. The
// engine's tests (transport) play a misbehaving HCA with it and roced
// conform's suite plays a hostile one; each adds its own expectations and
// reports on top. It imports no engine package, so any test may use it.
package rawpeer

import (
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic"
)

// Hdr sets one extended header of a packet being built, before it is
// sealed. An alias, so that callers' func literals need no conversion.
type Hdr = func(roce []byte, info *bth.Info)

// RETH sets the RETH.
func RETH(va uint64, rkey, n uint32) Hdr {
	return func(p []byte, i *bth.Info) { bth.RETH(p[i.Offset(bth.ExtRETH):]).Encode(va, rkey, n) }
}

// AtomicETH sets the AtomicETH.
func AtomicETH(va uint64, rkey uint32, swapAdd, cmp uint64) Hdr {
	return func(p []byte, i *bth.Info) {
		bth.AtomicETH(p[i.Offset(bth.ExtAtomicETH):]).Encode(va, rkey, swapAdd, cmp)
	}
}

// AETH sets the AETH.
func AETH(s bth.Syndrome, msn uint32) Hdr {
	return func(p []byte, i *bth.Info) { bth.AETH(p[i.Offset(bth.ExtAETH):]).Encode(s, msn) }
}

// OrigData sets an Atomic Acknowledge's original value.
func OrigData(v uint64) Hdr {
	return func(p []byte, i *bth.Info) { bth.AtomicAckETH(p[i.Offset(bth.ExtAtomicAckETH):]).SetOrigData(v) }
}

// Packet is one packet the peer sends.
type Packet struct {
	Op      bth.OpCode // any value, a reserved one too
	DestQP  uint32     // the BTH's destination QP
	PSN     uint32     // masked to 24 bits
	AckReq  bool       // the BTH's AckReq bit
	Payload []byte     // copied after the headers
	Headers []Hdr      // applied only for a valid opcode, whose layout is known
	// BTH changes the encoded BTH before the ICRC is computed.
	BTH func(b bth.BTH)
	// Trunc, if positive, keeps that many bytes of the packet before its
	// ICRC, which is then computed over the shortened packet.
	Trunc int
	// After changes the sealed packet (its RoCE part: BTH through ICRC)
	// and returns it: a spoiled ICRC, a cut.
	After func(roce []byte) []byte
}

// Frame is a datagram the link delivered, and when.
type Frame struct {
	Datagram []byte    // from the IP header, a copy the receiver owns
	At       time.Time // when the reader took it off the link
}

// Peer sends and receives over one link.
type Peer struct {
	Link    nic.Link   // where it sends and reads
	Src     netip.Addr // its address
	Dst     netip.Addr // the peer's: where Build addresses packets
	SrcPort uint16     // the UDP source port of its packets (the ICRC covers it)
	// Rx carries every datagram the link delivers, in order; it is closed
	// when the link's Recv fails (the link closed).
	Rx chan Frame

	marks atomic.Uint32 // the last marker's number (Mark)
}

// New starts a peer on link: a goroutine reads the link into Rx (of depth
// datagrams) until the link closes, calling seen, if set, with each
// datagram first (a test's log).
func New(link nic.Link, src, dst netip.Addr, srcPort uint16, depth int, seen func(dg []byte)) *Peer {
	p := &Peer{Link: link, Src: src, Dst: dst, SrcPort: srcPort, Rx: make(chan Frame, depth)}
	go func() {
		frames := make([]nic.Frame, 16)
		for {
			n, err := link.Recv(frames)
			if err != nil {
				close(p.Rx)
				return
			}
			for _, f := range frames[:n] {
				dg := append([]byte(nil), f.Datagram()...)
				if seen != nil {
					seen(dg)
				}
				p.Rx <- Frame{dg, time.Now()}
			}
		}
	}()
	return p
}

// Build returns the packet's datagram at nic.Headroom in its buffer. It
// uses only Src, Dst and SrcPort, so a Peer without a link builds packets
// for a test that hands them to a QP itself.
func (r *Peer) Build(p Packet) []byte { return r.buildTo(r.Dst, p) }

// buildTo is Build for a packet to dst.
func (r *Peer) buildTo(dst netip.Addr, p Packet) []byte {
	o := bth.Outer{Src: r.Src, Dst: dst, SrcPort: r.SrcPort}
	buf := make([]byte, nic.Headroom+bth.DraftLen(&o, p.Op, len(p.Payload)))
	d := bth.NewDraft(buf[nic.Headroom:], &o, bth.BTHFields{OpCode: p.Op, PKey: bth.DefaultPKey,
		DestQP: p.DestQP, AckReq: p.AckReq, PSN: bth.PSN(p.PSN & bth.PSNMask)}, len(p.Payload))
	if p.Op.Valid() {
		for _, h := range p.Headers {
			h(d.RoCE(), d.Info())
		}
	}
	copy(d.Payload(), p.Payload)
	if p.BTH != nil {
		p.BTH(d.BTH())
	}
	d.Cut(p.Trunc)
	dg := d.Seal()
	if p.After == nil {
		return buf[:nic.Headroom+len(dg)]
	}
	// A spoiled or cut packet keeps the ICRC it was sealed with; only the
	// outer headers' lengths follow its new size.
	roce := p.After(append([]byte(nil), d.RoCE()...))
	out := make([]byte, nic.Headroom+o.Len()+len(roce))
	hl := o.Put(out[nic.Headroom:], len(roce))
	copy(out[nic.Headroom+hl:], roce)
	return out
}

// MarkerQP is the destination QP of a marker (Mark), a QPN no QP of a
// peer under test has: the last below the multicast QPN 0xFFFFFF.
const MarkerQP = 0xfffffe

// Mark sends a marker to the peer's own address, over its own link, and
// returns its number: when Rx delivers the marker (MarkOf), what the link
// had received before it was sent has come out of Rx before it, in
// order. A caller that learns the remote peer has ended (its process
// exited) thus reads everything that peer sent before it ended, without
// guessing how long that takes: a local peer's sendmsg delivers to this
// end's socket before it returns. A link that does not deliver to its
// own address (afpacket, afxdp) never delivers the marker, and the
// caller's bound decides.
func (r *Peer) Mark() (uint32, error) {
	n := r.marks.Add(1) & bth.PSNMask
	b := r.buildTo(r.Src, Packet{Op: bth.RCAcknowledge, DestQP: MarkerQP, PSN: n, Headers: []Hdr{AETH(bth.ACKSyndrome(0x1f), 0)}})
	if err := r.SendBuilt(b); err != nil {
		return 0, fmt.Errorf("sending a marker: %w", err)
	}
	return n, nil
}

// MarkOf returns the number of the marker dg is (Mark), if it is one.
func MarkOf(dg []byte) (uint32, bool) {
	f, err := bth.DecodeIP(dg)
	if err != nil {
		return 0, false
	}
	roce := f.RoCE()
	if len(roce) < bth.BTHLen {
		return 0, false
	}
	h := bth.BTH(roce[:bth.BTHLen])
	return uint32(h.PSN()), h.DestQP() == MarkerQP
}

// SendBuilt sends a datagram Build returned.
func (r *Peer) SendBuilt(b []byte) error {
	_, err := r.Link.Send([]nic.Frame{{B: b, Off: nic.Headroom}})
	return err
}

// Send builds and sends one packet.
func (r *Peer) Send(p Packet) error {
	if err := r.SendBuilt(r.Build(p)); err != nil {
		return fmt.Errorf("sending %v: %w", p.Op, err)
	}
	return nil
}

// Decode checks and parses a datagram from Rx: an undecodable packet, a
// bad ICRC or a malformed packet is an error.
func Decode(dg []byte) (bth.Packet, error) {
	f, err := bth.DecodeIP(dg)
	if err != nil {
		return bth.Packet{}, fmt.Errorf("undecodable packet: %w", err)
	}
	if !f.VerifyICRC() {
		return bth.Packet{}, fmt.Errorf("bad ICRC")
	}
	p, err := bth.Parse(f.RoCE())
	if err != nil {
		return bth.Packet{}, fmt.Errorf("malformed packet: %w", err)
	}
	return p, nil
}
