package bth

import (
	"encoding/binary"
	"net/netip"

	"github.com/goroce/goroce/inet"
)

// Field-level decoding and encoding of whole frames, in the manner of
// gVisor's header.IPv4Fields: Fields holds every field of every header as a
// plain value, DecodeFields fills it from a frame, and Append builds a frame
// from the fields alone. This is the explainable, allocating counterpart of
// the zero-copy views: for tools, tests and crafting packets, not for the
// data path.

// Fields holds every field of a RoCEv2 frame, from the link-layer header to
// the ICRC.
type Fields struct {
	// Ethernet is the Ethernet header; nil when the frame has another
	// link-layer header (see LinkHeader) or none.
	Ethernet *EthernetFields
	// LinkHeader is a link-layer header other than Ethernet, kept as its
	// bytes: the Linux cooked header of a tcpdump -i any capture. Empty for
	// a frame that starts at the IP header.
	LinkHeader []byte
	IPv4       *IPv4Fields     // exactly one of IPv4 and IPv6 is set
	IPv6       *IPv6Fields     // the IPv6 header, for RoCEv2 over IPv6
	UDP        UDPFields       // the UDP header
	RoCE       TransportFields // BTH through ICRC
	// Trailer is whatever follows the IP datagram in the frame: the padding
	// that brings a short Ethernet frame up to 60 bytes.
	Trailer []byte
}

// EthernetFields holds the fields of an Ethernet header and its VLAN tags.
type EthernetFields struct {
	Dst, Src  [6]byte   // MAC addresses
	VLANs     []VLANTag // outermost first
	EtherType uint16    // the EtherType after the last tag
}

// VLANTag is one 802.1Q or 802.1ad tag.
type VLANTag struct {
	TPID uint16 // EtherTypeVLAN (802.1Q) or EtherTypeQinQ (802.1ad)
	PCP  uint8  // priority code point, 3 bits
	DEI  bool   // drop eligible
	VID  uint16 // VLAN identifier, 12 bits
}

// MaxVLANTags is the most VLAN tags DecodeEthernet looks through.
const MaxVLANTags = 2

// IPv4Fields holds the fields of an IPv4 header.
type IPv4Fields struct {
	IHL            uint8      // header length in 32-bit words
	TOS            uint8      // DSCP<<2 | ECN
	TotalLength    uint16     // header and payload, in bytes
	ID             uint16     // identification, which the ICRC covers
	Flags          uint8      // 3 bits: reserved, DF, MF
	FragmentOffset uint16     // 13 bits, in 8-byte units
	TTL            uint8      // time to live
	Protocol       uint8      // 17, UDP
	Checksum       uint16     // header checksum
	Src, Dst       netip.Addr // addresses
	Options        []byte     // options, IHL beyond 5 words
}

// IPv4 flags.
const (
	IPv4FlagMF = 1 << 0
	IPv4FlagDF = 1 << 1
)

// IPv6Fields holds the fields of an IPv6 header.
type IPv6Fields struct {
	TrafficClass  uint8      // DSCP<<2 | ECN
	FlowLabel     uint32     // 20 bits
	PayloadLength uint16     // bytes after the 40-byte header
	NextHeader    uint8      // 17, UDP
	HopLimit      uint8      // hop limit
	Src, Dst      netip.Addr // addresses
}

// UDPFields holds the fields of a UDP header.
type UDPFields struct {
	SrcPort, DstPort uint16 // ports; DstPort 4791 for RoCEv2
	Length           uint16 // header and payload, in bytes
	Checksum         uint16 // 0: none
}

// TransportFields holds every field of a RoCEv2 transport packet, BTH
// through ICRC. Which extended headers the packet carries follows from
// BTH.OpCode (see Info.Headers); the others are zero and not encoded.
type TransportFields struct {
	BTH      BTHFields // the base transport header
	BTHResv6 uint8     // BTH byte 4, bits 5-0, reserved
	BTHResv7 uint8     // BTH byte 8, bits 6-0, reserved

	RDETH        RDETHFields     // RD opcodes
	DETH         DETHFields      // UD and RD opcodes
	XRCETH       XRCETHFields    // XRC requests
	FETH         FETHFields      // FLUSH
	RETH         RETHFields      // WRITE FIRST/ONLY, READ request, FLUSH
	AtomicETH    AtomicETHFields // compare-and-swap, fetch-and-add
	ImmDt        uint32          // immediate data, as the 4 bytes read big-endian
	IETH         uint32          // the R_Key to invalidate
	AETH         AETHFields      // acknowledgements, READ response FIRST/LAST/ONLY
	AtomicAckETH uint64          // original remote data
	CNPReserved  [CNPPadLen]byte // a CNP's reserved 16 bytes

	Payload []byte // without pad
	Pad     []byte // the pad bytes as carried: zero from a correct sender
	ICRC    uint32 // as stored, least significant byte first on the wire
}

// RETHFields holds the fields of a RETH.
type RETHFields struct {
	VA     uint64 // remote virtual address
	RKey   uint32 // remote key
	DMALen uint32 // message length in bytes
}

// AtomicETHFields holds the fields of an AtomicETH.
type AtomicETHFields struct {
	VA      uint64 // remote virtual address, 8-byte aligned
	RKey    uint32 // remote key
	SwapAdd uint64 // swap value of CmpSwap, addend of FetchAdd
	Compare uint64 // compare value of CmpSwap
}

// AETHFields holds the fields of an AETH.
type AETHFields struct {
	Syndrome Syndrome // ACK, RNR NAK or NAK and its value
	MSN      uint32   // message sequence number, 24 bits
}

// DETHFields holds the fields of a DETH.
type DETHFields struct {
	QKey  uint32 // queue key
	Resv  uint8  // reserved byte
	SrcQP uint32 // sending QP, 24 bits
}

// XRCETHFields holds the fields of an XRCETH.
type XRCETHFields struct {
	Resv   uint8  // reserved byte
	XRCSRQ uint32 // XRC SRQ number, 24 bits
}

// RDETHFields holds the fields of an RDETH.
type RDETHFields struct {
	Resv   uint8  // reserved byte
	EECnxt uint32 // EE context, 24 bits
}

// FETHFields holds the fields of a FETH.
type FETHFields struct {
	Resv             uint32 // bits 31-6, reserved
	SelectivityLevel uint8  // bits 5-4
	PlacementType    uint8  // bits 3-0
}

// EncodeError says why Fields cannot be encoded as asked.
type EncodeError string

// Error returns the reason with a "bth: cannot encode: " prefix.
func (e EncodeError) Error() string { return "bth: cannot encode: " + string(e) }

// DecodeFields decodes every field of a frame that DecodeEthernet, DecodeIP
// or DecodeLink accepted. It fails only when the transport packet does not
// parse (see Parse). The fields hold a copy of the frame's bytes, so the
// frame's buffer may be reused. Fields does not tell whether the ICRC is
// right: compare RoCE.ICRC with fr.ComputeICRC.
func DecodeFields(fr Frame) (*Fields, error) {
	p, err := Parse(fr.RoCE())
	if err != nil {
		return nil, err
	}
	// One copy of the whole frame, that every slice below points into.
	b := append([]byte(nil), fr.b...)
	fr.b = b
	p.b = b[fr.roceOff:fr.end]
	f := &Fields{UDP: decodeUDP(fr.UDP())}
	if len(b) > fr.end {
		f.Trailer = b[fr.end:]
	}
	if fr.link == LinkEthernet {
		f.Ethernet = decodeEthernet(fr.Ethernet())
	} else if fr.ipOff > 0 {
		f.LinkHeader = fr.Ethernet()
	}
	if ip := fr.IP(); fr.IsIPv6() {
		f.IPv6 = decodeIPv6(ip)
	} else {
		f.IPv4 = decodeIPv4(ip)
	}
	f.RoCE.Decode(p)
	return f, nil
}

func decodeEthernet(b []byte) *EthernetFields {
	e := &EthernetFields{Dst: [6]byte(b[0:6]), Src: [6]byte(b[6:12])}
	off := 12
	for ; off+VLANTagLen+2 <= len(b); off += VLANTagLen {
		tci := binary.BigEndian.Uint16(b[off+2:])
		e.VLANs = append(e.VLANs, VLANTag{TPID: binary.BigEndian.Uint16(b[off:]),
			PCP: uint8(tci >> 13), DEI: tci&0x1000 != 0, VID: tci & 0x0fff})
	}
	e.EtherType = binary.BigEndian.Uint16(b[off:])
	return e
}

func decodeIPv4(ip []byte) *IPv4Fields {
	h := inet.IPv4(ip)
	f := &IPv4Fields{
		IHL:            ip[0] & 0x0f, // as sent, even where it disagrees with len(ip)
		TOS:            h.TOS(),
		TotalLength:    h.TotalLength(),
		ID:             h.ID(),
		Flags:          h.Flags(),
		FragmentOffset: h.FragmentOffset(),
		TTL:            h.TTL(),
		Protocol:       h.Protocol(),
		Checksum:       h.Checksum(),
		Src:            h.Src(),
		Dst:            h.Dst(),
	}
	if len(ip) > inet.IPv4HeaderLen {
		f.Options = ip[inet.IPv4HeaderLen:]
	}
	return f
}

func decodeIPv6(ip []byte) *IPv6Fields {
	h := inet.IPv6(ip)
	return &IPv6Fields{
		TrafficClass:  h.TrafficClass(),
		FlowLabel:     h.FlowLabel(),
		PayloadLength: h.PayloadLength(),
		NextHeader:    h.NextHeader(),
		HopLimit:      h.HopLimit(),
		Src:           h.Src(),
		Dst:           h.Dst(),
	}
}

func decodeUDP(u inet.UDP) UDPFields {
	return UDPFields{SrcPort: u.SrcPort(), DstPort: u.DstPort(), Length: u.Length(), Checksum: u.Checksum()}
}

// Decode fills t from a parsed packet. Payload and Pad point into the
// packet's bytes.
func (t *TransportFields) Decode(p Packet) {
	h := p.BTH()
	*t = TransportFields{BTH: h.Fields(), BTHResv6: h.Resv6(), BTHResv7: h.Resv7(), ICRC: p.ICRC()}
	hs := p.info.Headers
	if hs.Has(ExtRDETH) {
		r := p.RDETH()
		t.RDETH = RDETHFields{Resv: r[0], EECnxt: r.EECnxt()}
	}
	if hs.Has(ExtDETH) {
		d := p.DETH()
		t.DETH = DETHFields{QKey: d.QKey(), Resv: d.Resv(), SrcQP: d.SrcQP()}
	}
	if hs.Has(ExtXRCETH) {
		x := p.XRCETH()
		t.XRCETH = XRCETHFields{Resv: x[0], XRCSRQ: x.XRCSRQ()}
	}
	if hs.Has(ExtFETH) {
		f := p.FETH()
		t.FETH = FETHFields{Resv: binary.BigEndian.Uint32(f) >> 6, SelectivityLevel: f.SelectivityLevel(),
			PlacementType: f.PlacementType()}
	}
	if hs.Has(ExtRETH) {
		r := p.RETH()
		t.RETH = RETHFields{VA: r.VA(), RKey: r.RKey(), DMALen: r.DMALen()}
	}
	if hs.Has(ExtAtomicETH) {
		a := p.AtomicETH()
		t.AtomicETH = AtomicETHFields{VA: a.VA(), RKey: a.RKey(), SwapAdd: a.SwapAdd(), Compare: a.Compare()}
	}
	if hs.Has(ExtImmDt) {
		t.ImmDt = p.ImmDt().Imm()
	}
	if hs.Has(ExtIETH) {
		t.IETH = p.IETH().RKey()
	}
	if hs.Has(ExtAETH) {
		a := p.AETH()
		t.AETH = AETHFields{Syndrome: a.Syndrome(), MSN: a.MSN()}
	}
	if hs.Has(ExtAtomicAckETH) {
		t.AtomicAckETH = p.AtomicAckETH().OrigData()
	}
	if hs.Has(ExtCNPPad) {
		t.CNPReserved = [CNPPadLen]byte(p.Ext(ExtCNPPad))
	}
	if p.payLen > 0 {
		t.Payload = p.Payload()
	}
	if pad := p.PadCount(); pad > 0 && p.info.Payload {
		t.Pad = p.b[p.info.HdrLen+p.payLen : p.info.HdrLen+p.payLen+pad]
	}
}

// Len returns the length of the transport packet AppendRaw writes.
func (t *TransportFields) Len() int {
	return t.hdrLen() + len(t.Payload) + len(t.Pad) + ICRCLen
}

// hdrLen is the length of the BTH and extended headers; a reserved opcode
// has the BTH alone.
func (t *TransportFields) hdrLen() int { return max(t.BTH.OpCode.Info().HdrLen, BTHLen) }

// AppendRaw appends the transport packet, BTH through ICRC, to b with every
// field exactly as t holds it: the BTH pad count, the pad bytes and the ICRC
// are written as given, not computed. The extended headers written are
// those of t.BTH.OpCode, so a reserved opcode gets none.
func (t *TransportFields) AppendRaw(b []byte) []byte {
	info := t.BTH.OpCode.Info()
	n := len(b)
	b = append(b, make([]byte, t.hdrLen())...)
	h := b[n:]
	BTH(h).Encode(&t.BTH)
	h[4] |= t.BTHResv6 & 0x3f
	h[8] |= t.BTHResv7 & 0x7f
	at := func(e Ext) []byte {
		o := info.Offset(e)
		return h[o : o+e.Size()]
	}
	hs := info.Headers
	if hs.Has(ExtRDETH) {
		r := at(ExtRDETH)
		RDETH(r).SetEECnxt(t.RDETH.EECnxt)
		r[0] = t.RDETH.Resv
	}
	if hs.Has(ExtDETH) {
		d := DETH(at(ExtDETH))
		d.SetQKey(t.DETH.QKey)
		d.SetSrcQP(t.DETH.SrcQP)
		d[4] = t.DETH.Resv
	}
	if hs.Has(ExtXRCETH) {
		x := at(ExtXRCETH)
		XRCETH(x).SetXRCSRQ(t.XRCETH.XRCSRQ)
		x[0] = t.XRCETH.Resv
	}
	if hs.Has(ExtFETH) {
		f := t.FETH
		binary.BigEndian.PutUint32(at(ExtFETH), f.Resv<<6|uint32(f.SelectivityLevel&3)<<4|uint32(f.PlacementType&0x0f))
	}
	if hs.Has(ExtRETH) {
		RETH(at(ExtRETH)).Encode(t.RETH.VA, t.RETH.RKey, t.RETH.DMALen)
	}
	if hs.Has(ExtAtomicETH) {
		a := t.AtomicETH
		AtomicETH(at(ExtAtomicETH)).Encode(a.VA, a.RKey, a.SwapAdd, a.Compare)
	}
	if hs.Has(ExtImmDt) {
		ImmDt(at(ExtImmDt)).SetImm(t.ImmDt)
	}
	if hs.Has(ExtIETH) {
		IETH(at(ExtIETH)).SetRKey(t.IETH)
	}
	if hs.Has(ExtAETH) {
		AETH(at(ExtAETH)).Encode(t.AETH.Syndrome, t.AETH.MSN)
	}
	if hs.Has(ExtAtomicAckETH) {
		AtomicAckETH(at(ExtAtomicAckETH)).SetOrigData(t.AtomicAckETH)
	}
	if hs.Has(ExtCNPPad) {
		copy(at(ExtCNPPad), t.CNPReserved[:])
	}
	b = append(b, t.Payload...)
	b = append(b, t.Pad...)
	return binary.LittleEndian.AppendUint32(b, t.ICRC)
}

// AppendRaw appends the frame to b with every field exactly as f holds it:
// lengths, header lengths, pad count, checksums and ICRC are written as
// given, not computed, so decoding a frame and appending it raw gives back
// its bytes, valid or not. It is the way to craft malformed frames. An
// address of the wrong family is written as zeros.
func (f *Fields) AppendRaw(b []byte) []byte {
	if e := f.Ethernet; e != nil {
		b = append(b, e.Dst[:]...)
		b = append(b, e.Src[:]...)
		for _, v := range e.VLANs {
			b = binary.BigEndian.AppendUint16(b, v.TPID)
			b = binary.BigEndian.AppendUint16(b, uint16(v.PCP&7)<<13|uint16(boolBit(v.DEI, 0x10))<<8|v.VID&0x0fff)
		}
		b = binary.BigEndian.AppendUint16(b, e.EtherType)
	}
	b = append(b, f.LinkHeader...)
	if ip := f.IPv4; ip != nil {
		b = append(b, 0x40|ip.IHL&0x0f, ip.TOS)
		b = binary.BigEndian.AppendUint16(b, ip.TotalLength)
		b = binary.BigEndian.AppendUint16(b, ip.ID)
		b = binary.BigEndian.AppendUint16(b, uint16(ip.Flags&7)<<13|ip.FragmentOffset&0x1fff)
		b = append(b, ip.TTL, ip.Protocol)
		b = binary.BigEndian.AppendUint16(b, ip.Checksum)
		b = append(b, addr4(ip.Src)...)
		b = append(b, addr4(ip.Dst)...)
		b = append(b, ip.Options...)
	} else if ip := f.IPv6; ip != nil {
		b = binary.BigEndian.AppendUint32(b, 6<<28|uint32(ip.TrafficClass)<<20|ip.FlowLabel&0xfffff)
		b = binary.BigEndian.AppendUint16(b, ip.PayloadLength)
		b = append(b, ip.NextHeader, ip.HopLimit)
		b = append(b, addr16(ip.Src)...)
		b = append(b, addr16(ip.Dst)...)
	}
	u := f.UDP
	b = binary.BigEndian.AppendUint16(b, u.SrcPort)
	b = binary.BigEndian.AppendUint16(b, u.DstPort)
	b = binary.BigEndian.AppendUint16(b, u.Length)
	b = binary.BigEndian.AppendUint16(b, u.Checksum)
	b = f.RoCE.AppendRaw(b)
	return append(b, f.Trailer...)
}

// Append appends the frame to b as a sender builds it: from f's fields,
// with these computed and the values f holds for them ignored: the
// Ethernet EtherType, the IPv4 IHL, total length and header checksum, the
// IPv6 payload length, the UDP length, the BTH pad count, the pad bytes'
// number (their contents come from RoCE.Pad, zero past its end) and the
// ICRC. IPv4 options are padded with zeros to a multiple of 4 bytes. f is
// not modified. The result decodes back to f, computed fields aside.
func (f *Fields) Append(b []byte) ([]byte, error) {
	g := *f
	t := &g.RoCE
	pad := PadFor(len(t.Payload))
	t.BTH.PadCount = uint8(pad)
	t.Pad = make([]byte, pad)
	copy(t.Pad, f.RoCE.Pad)
	roceLen := t.Len()
	if g.Ethernet != nil && len(g.Ethernet.VLANs) > MaxVLANTags {
		return b, EncodeError("more than two VLAN tags")
	}
	var ipHL int
	switch {
	case g.IPv4 != nil && g.IPv6 != nil:
		return b, EncodeError("both IPv4 and IPv6 headers")
	case g.IPv4 != nil:
		ip := *g.IPv4
		if !ip.Src.Unmap().Is4() || !ip.Dst.Unmap().Is4() {
			return b, EncodeError("IPv4 header with a non-IPv4 address")
		}
		opt := (len(ip.Options) + 3) &^ 3
		if opt > 40 {
			return b, EncodeError("more than 40 bytes of IPv4 options")
		}
		ip.Options = append(make([]byte, 0, opt), ip.Options...)[:opt]
		ip.IHL = uint8(inet.IPv4HeaderLen+opt) / 4
		ipHL = inet.IPv4HeaderLen + opt
		ip.TotalLength = uint16(ipHL + inet.UDPHeaderLen + roceLen)
		g.IPv4 = &ip
		g.setEtherType(EtherTypeIPv4)
	case g.IPv6 != nil:
		ip := *g.IPv6
		if !ip.Src.Is6() || !ip.Dst.Is6() {
			return b, EncodeError("IPv6 header with a non-IPv6 address")
		}
		ipHL = inet.IPv6HeaderLen
		ip.PayloadLength = uint16(inet.UDPHeaderLen + roceLen)
		g.IPv6 = &ip
		g.setEtherType(EtherTypeIPv6)
	default:
		return b, EncodeError("no IP header")
	}
	if ipHL+inet.UDPHeaderLen+roceLen > 0xffff {
		return b, EncodeError("datagram longer than 65535 bytes")
	}
	g.UDP.Length = uint16(inet.UDPHeaderLen + roceLen)
	n := len(b)
	b = g.AppendRaw(b)
	fr := b[n : len(b)-len(g.Trailer)]
	ipOff := len(fr) - roceLen - inet.UDPHeaderLen - ipHL
	ip := fr[ipOff : ipOff+ipHL]
	if g.IPv4 != nil {
		h := inet.IPv4(ip)
		h.SetChecksum(h.CalculateChecksum())
	}
	roce := fr[ipOff+ipHL+inet.UDPHeaderLen:]
	putICRC(roce[len(roce)-ICRCLen:], ICRC(ip, fr[ipOff+ipHL:], roce[:len(roce)-ICRCLen]))
	return b, nil
}

func (f *Fields) setEtherType(et uint16) {
	if f.Ethernet != nil {
		e := *f.Ethernet
		e.EtherType = et
		f.Ethernet = &e
	}
}

func addr4(a netip.Addr) []byte {
	if a = a.Unmap(); a.Is4() {
		v := a.As4()
		return v[:]
	}
	return make([]byte, 4)
}

func addr16(a netip.Addr) []byte {
	if a.IsValid() {
		v := a.As16()
		return v[:]
	}
	return make([]byte, 16)
}
