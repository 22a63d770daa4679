// Package dissect is goroce's one packet decoder and formatter: it reads
// a capture (pcap or pcapng, any framing package bth decodes) and describes
// each RoCEv2 packet on one line (bth.Packet.Summary, the one formatter),
// or every field of every header (Decoder.Verbose). roced decode is its
// command line.
package dissect

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/bth/pcapfile"
	"github.com/goroce/goroce/inet"
)

// Decoder prints the packets of one capture, one line each, and counts
// them.
type Decoder struct {
	W       io.Writer // where the lines go
	Verbose bool      // every field of every header after each line
	Opened  bool      // the file header was read

	Packets   int // every packet read
	RoCE      int // RoCEv2 packets described
	ICRCBad   int // RoCEv2 packets whose ICRC does not match
	Malformed int // packets to port 4791 that are not valid RoCEv2
	Cut       int // RoCEv2 packets cut short by the snap length
	badLink   map[bth.LinkType]bool
}

// File reads the capture name (pcap or pcapng) and prints its packets.
func (d *Decoder) File(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := pcapfile.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	d.Opened = true
	for {
		p, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: after packet %d: %w", name, d.Packets, err)
		}
		d.Packets++
		d.Packet(d.Packets, p)
	}
}

// Packet prints one packet, frame number num of its capture.
func (d *Decoder) Packet(num int, p pcapfile.Packet) {
	lt := bth.LinkType(p.LinkType)
	data, kept := p.Data, len(p.Data)
	if p.Info.Length > kept {
		// A snap length (tcpdump -s 128, common for RoCE traces) keeps the
		// headers and cuts the payload. Decode the packet at its wire
		// length with the missing bytes zero, and use only what was kept:
		// the headers if they are whole, never the payload or the ICRC.
		data = make([]byte, p.Info.Length)
		copy(data, p.Data)
	}
	fr, err := bth.DecodeLink(lt, data)
	if err == bth.ErrLinkType {
		if !d.badLink[lt] {
			if d.badLink == nil {
				d.badLink = map[bth.LinkType]bool{}
			}
			d.badLink[lt] = true
			fmt.Fprintf(d.W, "%d %s link type %d not supported: its packets are skipped\n", num, Timestamp(p), lt)
		}
		return
	}
	if err != nil {
		// Say why only when the packet was meant for RoCEv2: UDP to
		// port 4791 as far as its headers can be read.
		ends, udpLen, ok := peekRoCE(lt, p.Data)
		if !ok {
			return
		}
		d.Malformed++
		fmt.Fprintf(d.W, "%d %s %s malformed: %v (%d bytes)%s\n", num, Timestamp(p), ends, err, udpLen, captured(p))
		return
	}
	ends := Endpoints(fr)
	pkt, err := bth.Parse(fr.RoCE())
	if err == nil && cap(data)-cap(fr.RoCE())+pkt.HdrLen() > kept {
		err = errCutHeaders // the zeros stand in for header fields
	}
	if err != nil {
		d.Malformed++
		fmt.Fprintf(d.W, "%d %s %s malformed: %v (%d bytes)%s\n", num, Timestamp(p), ends, err, len(fr.RoCE()), captured(p))
		return
	}
	d.RoCE++
	icrc := "ok"
	switch {
	case kept < len(data):
		icrc = "cut" // not checked: the capture did not keep it
		d.Cut++
	case !fr.VerifyICRC():
		icrc = "BAD"
		d.ICRCBad++
	}
	fmt.Fprintf(d.W, "%d %s %s %s icrc=%s%s%s\n", num, Timestamp(p), ends, pkt.Summary(), icrc, captured(p), comments(p))
	if d.Verbose {
		d.fields(fr, kept)
	}
}

// errCutHeaders: the capture's snap length fell inside the transport
// headers, so the packet cannot be described.
var errCutHeaders = errors.New("the capture cut the packet inside its transport headers")

// comments shows a packet's pcapng comments, such as the faults roced
// injected into it ("# goroce fault: rule 1 (...)").
func comments(p pcapfile.Packet) string {
	var b strings.Builder
	for _, c := range p.Comments {
		b.WriteString(" # ")
		b.WriteString(strings.ReplaceAll(c, "\n", " "))
	}
	return b.String()
}

// captured notes a packet the capture cut short (snap length).
func captured(p pcapfile.Packet) string {
	if p.Info.CaptureLength < p.Info.Length {
		return fmt.Sprintf(" [captured %d of %d bytes]", p.Info.CaptureLength, p.Info.Length)
	}
	return ""
}

// Timestamp prints the capture time as the file has it, in the file's
// resolution.
func Timestamp(p pcapfile.Packet) string {
	t := p.Info.Timestamp
	if p.Resolution.Base == 10 && p.Resolution.Exponent <= -7 {
		return fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond())
	}
	return fmt.Sprintf("%d.%06d", t.Unix(), t.Nanosecond()/1000)
}

func hostPort(a netip.Addr, port uint16) string { return netip.AddrPortFrom(a, port).String() }

// Endpoints is a frame's "SRC:PORT > DST:PORT".
func Endpoints(fr bth.Frame) string {
	u := fr.UDP()
	return hostPort(fr.SrcAddr(), u.SrcPort()) + " > " + hostPort(fr.DstAddr(), u.DstPort())
}

// peekRoCE reads a frame bth.DecodeLink rejected as far as it can to tell
// whether it is UDP to port 4791: then it returns the endpoints and the
// UDP payload's length as captured.
func peekRoCE(lt bth.LinkType, b []byte) (ends string, n int, ok bool) {
	off, et := 0, uint16(0)
	switch lt {
	case bth.LinkEthernet:
		off = 12
		for len(b) >= off+2 {
			et = binary.BigEndian.Uint16(b[off:])
			off += 2
			if et != bth.EtherTypeVLAN && et != bth.EtherTypeQinQ {
				break
			}
			off += 2
		}
	case bth.LinkLinuxSLL:
		off = bth.SLLHeaderLen
		if len(b) >= off {
			et = binary.BigEndian.Uint16(b[14:])
		}
	case bth.LinkLinuxSLL2:
		off = bth.SLL2HeaderLen
		if len(b) >= off {
			et = binary.BigEndian.Uint16(b)
		}
	}
	if (et != 0 && et != bth.EtherTypeIPv4 && et != bth.EtherTypeIPv6) || len(b) <= off {
		return "", 0, false
	}
	ip := b[off:]
	var src, dst netip.Addr
	var hl int
	switch ip[0] >> 4 {
	case 4:
		h := inet.IPv4(ip)
		if len(ip) < inet.IPv4HeaderLen || h.Protocol() != inet.ProtoUDP {
			return "", 0, false
		}
		hl = h.HeaderLen()
		src, dst = h.Src(), h.Dst()
	case 6:
		h := inet.IPv6(ip)
		if len(ip) < inet.IPv6HeaderLen || h.NextHeader() != inet.ProtoUDP {
			return "", 0, false
		}
		hl = inet.IPv6HeaderLen
		src, dst = h.Src(), h.Dst()
	default:
		return "", 0, false
	}
	if hl < inet.IPv4HeaderLen || len(ip) < hl+inet.UDPHeaderLen {
		return "", 0, false
	}
	u := inet.UDP(ip[hl:])
	if u.DstPort() != bth.UDPPort {
		return "", 0, false
	}
	return hostPort(src, u.SrcPort()) + " > " + hostPort(dst, u.DstPort()), len(ip) - hl - inet.UDPHeaderLen, true
}

func b01(v bool) int {
	if v {
		return 1
	}
	return 0
}

// fields prints every field of fr, of which the capture kept the first
// kept bytes: the rest of the payload and the ICRC are not shown.
func (d *Decoder) fields(fr bth.Frame, kept int) {
	f, err := bth.DecodeFields(fr)
	if err != nil { // Parse accepted it already
		fmt.Fprintf(d.W, "    fields: %v\n", err)
		return
	}
	line := func(format string, a ...any) { fmt.Fprintf(d.W, "    "+format+"\n", a...) }
	if e := f.Ethernet; e != nil {
		line("ethernet dst=%s src=%s type=0x%04x", mac(e.Dst), mac(e.Src), e.EtherType)
		for _, v := range e.VLANs {
			line("vlan tpid=0x%04x pcp=%d dei=%d vid=%d", v.TPID, v.PCP, b01(v.DEI), v.VID)
		}
	}
	switch h := f.LinkHeader; {
	case fr.LinkType() == bth.LinkLinuxSLL && len(h) == bth.SLLHeaderLen:
		n := min(int(binary.BigEndian.Uint16(h[4:])), 8)
		line("sll pkttype=%d hatype=%d addr=%x proto=0x%04x", binary.BigEndian.Uint16(h), binary.BigEndian.Uint16(h[2:]), h[6:6+n], binary.BigEndian.Uint16(h[14:]))
	case fr.LinkType() == bth.LinkLinuxSLL2 && len(h) == bth.SLL2HeaderLen:
		n := min(int(h[11]), 8)
		line("sll2 proto=0x%04x ifindex=%d hatype=%d pkttype=%d addr=%x", binary.BigEndian.Uint16(h), binary.BigEndian.Uint32(h[4:]), binary.BigEndian.Uint16(h[8:]), h[10], h[12:12+n])
	case len(h) > 0:
		line("link %x", h)
	}
	if ip := f.IPv4; ip != nil {
		line("ipv4 ihl=%d tos=0x%02x len=%d id=0x%04x flags=%s frag=%d ttl=%d proto=%d csum=0x%04x src=%v dst=%v",
			ip.IHL, ip.TOS, ip.TotalLength, ip.ID, ipFlags(ip.Flags), ip.FragmentOffset, ip.TTL, ip.Protocol, ip.Checksum, ip.Src, ip.Dst)
		if len(ip.Options) > 0 {
			line("ipv4 options=%x", ip.Options)
		}
	}
	if ip := f.IPv6; ip != nil {
		line("ipv6 tclass=0x%02x flow=0x%05x plen=%d next=%d hlim=%d src=%v dst=%v",
			ip.TrafficClass, ip.FlowLabel, ip.PayloadLength, ip.NextHeader, ip.HopLimit, ip.Src, ip.Dst)
	}
	line("udp sport=%d dport=%d len=%d csum=0x%04x", f.UDP.SrcPort, f.UDP.DstPort, f.UDP.Length, f.UDP.Checksum)
	r := &f.RoCE
	b := r.BTH
	line("bth opcode=0x%02x (%v) se=%d m=%d pad=%d tver=%d pkey=0x%04x fecn=%d becn=%d resv6=0x%02x destqp=0x%06x ackreq=%d resv7=0x%02x psn=0x%06x",
		uint8(b.OpCode), b.OpCode, b01(b.SE), b01(b.MigReq), b.PadCount, b.TVer, b.PKey, b01(b.FECN), b01(b.BECN),
		r.BTHResv6, b.DestQP, b01(b.AckReq), r.BTHResv7, uint32(b.PSN))
	hs := b.OpCode.Info().Headers
	if hs.Has(bth.ExtRDETH) {
		line("rdeth resv=0x%02x eecnxt=0x%06x", r.RDETH.Resv, r.RDETH.EECnxt)
	}
	if hs.Has(bth.ExtDETH) {
		line("deth qkey=0x%08x resv=0x%02x srcqp=0x%06x", r.DETH.QKey, r.DETH.Resv, r.DETH.SrcQP)
	}
	if hs.Has(bth.ExtXRCETH) {
		line("xrceth resv=0x%02x srq=0x%06x", r.XRCETH.Resv, r.XRCETH.XRCSRQ)
	}
	if hs.Has(bth.ExtFETH) {
		line("feth resv=0x%07x sel=%d plt=%d", r.FETH.Resv, r.FETH.SelectivityLevel, r.FETH.PlacementType)
	}
	if hs.Has(bth.ExtRETH) {
		line("reth va=0x%016x rkey=0x%08x dmalen=%d", r.RETH.VA, r.RETH.RKey, r.RETH.DMALen)
	}
	if hs.Has(bth.ExtAtomicETH) {
		a := r.AtomicETH
		line("atomiceth va=0x%016x rkey=0x%08x swapadd=0x%016x compare=0x%016x", a.VA, a.RKey, a.SwapAdd, a.Compare)
	}
	if hs.Has(bth.ExtImmDt) {
		line("immdt 0x%08x", r.ImmDt)
	}
	if hs.Has(bth.ExtIETH) {
		line("ieth rkey=0x%08x", r.IETH)
	}
	if hs.Has(bth.ExtAETH) {
		line("aeth syndrome=0x%02x (%v) msn=%d", uint8(r.AETH.Syndrome), r.AETH.Syndrome, r.AETH.MSN)
	}
	if hs.Has(bth.ExtAtomicAckETH) {
		line("atomicacketh orig=0x%016x", r.AtomicAckETH)
	}
	if hs.Has(bth.ExtCNPPad) {
		line("cnp reserved=%x", r.CNPReserved)
	}
	// What the capture kept of the payload, pad and ICRC: a snap length
	// may have cut them (the headers are whole, packet checked that).
	payOff := cap(fr.Bytes()) - cap(fr.RoCE()) + b.OpCode.Info().HdrLen
	payload := r.Payload[:min(len(r.Payload), max(0, kept-payOff))]
	whole := kept >= payOff+len(r.Payload)+len(r.Pad)+bth.ICRCLen
	switch n := len(payload); {
	case n < len(r.Payload):
		more := ""
		if n > 32 {
			more = "..."
		}
		line("payload %d bytes, %d captured %x%s", len(r.Payload), n, payload[:min(n, 32)], more)
	case n == 0:
		line("payload 0 bytes")
	case n <= 32:
		line("payload %d bytes %x", n, payload)
	default:
		line("payload %d bytes %x...", n, payload[:32])
	}
	if !whole {
		line("icrc not captured")
	} else {
		if len(r.Pad) > 0 {
			line("pad %x", r.Pad)
		}
		verdict := "ok"
		if !fr.VerifyICRC() {
			verdict = "BAD"
		}
		line("icrc stored=0x%08x computed=0x%08x %s", r.ICRC, fr.ComputeICRC(), verdict)
	}
	if len(f.Trailer) > 0 && kept >= len(fr.Bytes())+len(f.Trailer) {
		line("trailer %x", f.Trailer)
	}
}

func mac(a [6]byte) string {
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", a[0], a[1], a[2], a[3], a[4], a[5])
}

func ipFlags(f uint8) string {
	var s []string
	if f&4 != 0 {
		s = append(s, "RSV")
	}
	if f&bth.IPv4FlagDF != 0 {
		s = append(s, "DF")
	}
	if f&bth.IPv4FlagMF != 0 {
		s = append(s, "MF")
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "+")
}
