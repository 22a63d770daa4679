package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/bth/pcapfile"
	"github.com/goroce/goroce/inet"
)

func init() {
	register("decode", "print the RoCEv2 packets of a pcap or pcapng file, one line each", runDecode)
}

const decodeUsage = `usage: roced decode [-v] FILE.pcap|FILE.pcapng ...
       roced decode --ladder [--qp QPN] [--packets N-M] [--count N] FILE...

Prints one line per RoCEv2 packet (UDP destination port 4791) of each
capture, classic pcap or pcapng, with Ethernet, raw IP (link types 101,
228, 229) or Linux cooked (SLL 113, SLL2 276, as tcpdump -i any writes)
framing. Other packets are skipped. A line is

  N TIME SRC:PORT > DST:PORT OPCODE qpn=0xQPN psn=0xPSN ackreq=0|1 [FLAGS] [HEADERS] payload=LEN icrc=ok|BAD

  N        frame number in the file, from 1
  TIME     the timestamp as the file records it, seconds.fraction since
           the epoch (some captures hold monotonic clocks: printed as is)
  OPCODE   the opcode's name, e.g. "RC SEND Only", "UD SEND Only", "CNP"
  FLAGS    se (solicited event), fecn, becn, mig, pkey=0xKEY when not
           0xffff, pad=N when not 0
  HEADERS  the extended headers' key fields:
             reth va=0xVA rkey=0xKEY dmalen=N
             aeth ACK credits=N|invalid msn=N
             aeth NAK PSN sequence error msn=N   (and the other NAK codes)
             aeth RNR NAK timer=12 (640µs) msn=N
             deth qkey=0xKEY srcqp=0xQPN
             imm=0xDATA                    immediate data
             ieth rkey=0xKEY               SEND with Invalidate
             atomic va=0xVA rkey=0xKEY swap=0xV compare=0xV   (CmpSwap)
             atomic va=0xVA rkey=0xKEY add=0xV                (FetchAdd)
             atomicack orig=0xV
             xrceth srq=0xN, rdeth eecnxt=0xN, feth sel=N plt=N
  LEN      payload bytes, pad excluded
  icrc=ok  the invariant CRC matches; icrc=BAD when it does not; icrc=cut
           when the capture's snap length cut the packet (tcpdump -s): its
           headers are decoded, "[captured N of M bytes]" follows, and a
           packet cut inside its transport headers is malformed

A packet to port 4791 that is not a valid RoCEv2 packet is printed as

  N TIME SRC:PORT > DST:PORT malformed: REASON (LEN bytes)

and decoding goes on. With several files, each file's lines follow a
"==> FILE <==" line. A summary (packets, RoCEv2, ICRC bad, malformed,
other) goes to standard error at the end of each file.

--ladder draws the exchange as a ladder diagram instead: one column per
endpoint (address and QP; "QP ?" where the sender's QP cannot be told),
one arrow per packet with its frame number, the time since the first
packet, its opcode and PSN, and its key fields (ackreq, the AETH's ACK,
NAK code or RNR timer and MSN, the RETH, the payload length); lines
starting with "*" under an arrow say why: what an ACK or READ response
answers, a retransmission and its cause, a PSN gap, a duplicate, a NAK and
what caused it, a bad or uncaptured ICRC, and the faults roced marked in a
pcapng capture. --qp QPN keeps the packets to or from that QP, --packets
N-M those with frame numbers N to M (N- : from N on), --count N the first
N of what is left; notes are worked out over the whole capture first.

-v adds every field of every header after each line, one header per
indented line: link layer, IP, UDP, BTH (reserved bits included), each
extended header, payload (first 32 bytes), pad bytes and the ICRC stored
and computed.

Exit status: 0 when every file was read to its end; 1 when a file could
not be opened or read (lines up to the damage are printed); 2 for bad
usage.
`

func runDecode(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("decode", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	// -h is the usage on stdout; a bad flag is its one line, then the
	// usage, on stderr.
	fs.Usage = func() {}
	verbose := fs.Bool("v", false, "print every field of every header")
	var lo ladderOptions
	fs.BoolVar(&lo.on, "ladder", false, "draw a ladder diagram")
	fs.StringVar(&lo.qp, "qp", "", "with --ladder: only packets to or from `QPN`")
	fs.StringVar(&lo.packets, "packets", "", "with --ladder: only frames `N-M`")
	fs.IntVar(&lo.count, "count", 0, "with --ladder: at most `N` packets")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, decodeUsage)
			return 0
		}
		fmt.Fprintf(stderr, "roced decode: %v\n%s", err, decodeUsage)
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	if !lo.on && (lo.qp != "" || lo.packets != "" || lo.count != 0) {
		fmt.Fprintln(stderr, "roced decode: --qp, --packets and --count go with --ladder")
		return 2
	}
	if lo.on {
		if *verbose {
			fmt.Fprintln(stderr, "roced decode: -v and --ladder do not go together")
			return 2
		}
		return runLadder(lo, fs.Args(), stdout, stderr)
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	status := 0
	for _, name := range fs.Args() {
		if fs.NArg() > 1 {
			fmt.Fprintf(w, "==> %s <==\n", name)
		}
		d := decoder{w: w, verbose: *verbose}
		err := d.file(name)
		w.Flush()
		if d.opened {
			cut := ""
			if d.cut > 0 {
				cut = fmt.Sprintf(" (%d cut by the snap length, ICRC not checked)", d.cut)
			}
			fmt.Fprintf(stderr, "%s: %d packets, %d RoCEv2%s, %d ICRC bad, %d malformed, %d other\n",
				name, d.packets, d.roce, cut, d.icrcBad, d.malformed, d.packets-d.roce-d.malformed)
		}
		if err != nil {
			fmt.Fprintf(stderr, "roced decode: %v\n", err)
			status = 1
		}
	}
	return status
}

// decoder prints the packets of one capture and counts them.
type decoder struct {
	w       io.Writer
	verbose bool
	opened  bool // the file header was read

	packets, roce, icrcBad, malformed int
	cut                               int // RoCEv2 packets cut short by the snap length
	badLink                           map[bth.LinkType]bool
}

func (d *decoder) file(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := pcapfile.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	d.opened = true
	for {
		p, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: after packet %d: %w", name, d.packets, err)
		}
		d.packets++
		d.packet(d.packets, p)
	}
}

func (d *decoder) packet(num int, p pcapfile.Packet) {
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
			fmt.Fprintf(d.w, "%d %s link type %d not supported: its packets are skipped\n", num, timestamp(p), lt)
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
		d.malformed++
		fmt.Fprintf(d.w, "%d %s %s malformed: %v (%d bytes)%s\n", num, timestamp(p), ends, err, udpLen, captured(p))
		return
	}
	ends := endpoints(fr)
	pkt, err := bth.Parse(fr.RoCE())
	if err == nil && cap(data)-cap(fr.RoCE())+pkt.HdrLen() > kept {
		err = errCutHeaders // the zeros stand in for header fields
	}
	if err != nil {
		d.malformed++
		fmt.Fprintf(d.w, "%d %s %s malformed: %v (%d bytes)%s\n", num, timestamp(p), ends, err, len(fr.RoCE()), captured(p))
		return
	}
	d.roce++
	icrc := "ok"
	switch {
	case kept < len(data):
		icrc = "cut" // not checked: the capture did not keep it
		d.cut++
	case !fr.VerifyICRC():
		icrc = "BAD"
		d.icrcBad++
	}
	fmt.Fprintf(d.w, "%d %s %s %s icrc=%s%s%s\n", num, timestamp(p), ends, summary(pkt), icrc, captured(p), comments(p))
	if d.verbose {
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

// timestamp prints the capture time as the file has it, in the file's
// resolution.
func timestamp(p pcapfile.Packet) string {
	t := p.Info.Timestamp
	if p.Resolution.Base == 10 && p.Resolution.Exponent <= -7 {
		return fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond())
	}
	return fmt.Sprintf("%d.%06d", t.Unix(), t.Nanosecond()/1000)
}

func hostPort(a netip.Addr, port uint16) string { return netip.AddrPortFrom(a, port).String() }

func endpoints(fr bth.Frame) string {
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

// summary is the one-line description of a parsed packet: opcode, BTH key
// fields, the extended headers' key fields and the payload length.
func summary(p bth.Packet) string {
	var s strings.Builder
	h := p.BTH()
	info := p.Info()
	fmt.Fprintf(&s, "%s qpn=0x%06x psn=0x%06x ackreq=%d", info.Name, h.DestQP(), uint32(h.PSN()), b01(h.AckReq()))
	for _, f := range []struct {
		on   bool
		name string
	}{{h.SE(), "se"}, {h.FECN(), "fecn"}, {h.BECN(), "becn"}, {h.MigReq(), "mig"}} {
		if f.on {
			s.WriteString(" " + f.name)
		}
	}
	if h.PKey() != bth.DefaultPKey {
		fmt.Fprintf(&s, " pkey=0x%04x", h.PKey())
	}
	if p.PadCount() != 0 {
		fmt.Fprintf(&s, " pad=%d", p.PadCount())
	}
	if x := p.XRCETH(); x != nil {
		fmt.Fprintf(&s, " xrceth srq=0x%06x", x.XRCSRQ())
	}
	if r := p.RDETH(); r != nil {
		fmt.Fprintf(&s, " rdeth eecnxt=0x%06x", r.EECnxt())
	}
	if dt := p.DETH(); dt != nil {
		fmt.Fprintf(&s, " deth qkey=0x%08x srcqp=0x%06x", dt.QKey(), dt.SrcQP())
	}
	if f := p.FETH(); f != nil {
		fmt.Fprintf(&s, " feth sel=%d plt=%d", f.SelectivityLevel(), f.PlacementType())
	}
	if r := p.RETH(); r != nil {
		fmt.Fprintf(&s, " reth va=0x%x rkey=0x%x dmalen=%d", r.VA(), r.RKey(), r.DMALen())
	}
	if a := p.AtomicETH(); a != nil {
		fmt.Fprintf(&s, " atomic va=0x%x rkey=0x%x", a.VA(), a.RKey())
		if info.Kind == bth.KindCompareSwap {
			fmt.Fprintf(&s, " swap=0x%x compare=0x%x", a.SwapAdd(), a.Compare())
		} else {
			fmt.Fprintf(&s, " add=0x%x", a.SwapAdd())
		}
	}
	if i := p.ImmDt(); i != nil {
		fmt.Fprintf(&s, " imm=0x%08x", i.Imm())
	}
	if i := p.IETH(); i != nil {
		fmt.Fprintf(&s, " ieth rkey=0x%08x", i.RKey())
	}
	if a := p.AETH(); a != nil {
		fmt.Fprintf(&s, " aeth %v msn=%d", a.Syndrome(), a.MSN())
	}
	if a := p.AtomicAckETH(); a != nil {
		fmt.Fprintf(&s, " atomicack orig=0x%x", a.OrigData())
	}
	fmt.Fprintf(&s, " payload=%d", p.PayloadLen())
	return s.String()
}

func b01(v bool) int {
	if v {
		return 1
	}
	return 0
}

// fields prints every field of every header of a frame, indented.
// fields prints every field of fr, of which the capture kept the first
// kept bytes: the rest of the payload and the ICRC are not shown.
func (d *decoder) fields(fr bth.Frame, kept int) {
	f, err := bth.DecodeFields(fr)
	if err != nil { // Parse accepted it already
		fmt.Fprintf(d.w, "    fields: %v\n", err)
		return
	}
	line := func(format string, a ...any) { fmt.Fprintf(d.w, "    "+format+"\n", a...) }
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
