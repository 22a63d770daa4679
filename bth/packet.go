package bth

// Error is a typed reason a packet is malformed. Errors are values, so
// reporting one allocates nothing, and errors.Is compares them.
type Error uint8

// Ways a RoCEv2 packet or frame can be malformed.
const (
	_                 Error = iota
	ErrTruncated            // shorter than its headers and ICRC
	ErrReservedOpcode       // opcode reserved in IBA table 38
	ErrTVer                 // BTH transport header version is not 0
	ErrPadCount             // pad bytes on an opcode without payload, or pad longer than the payload
	ErrPayloadAlign         // payload plus pad is not a multiple of 4 bytes
	ErrPayloadLength        // payload on an opcode that carries none, or wrong length for its opcode
	ErrICRC                 // invariant CRC does not match
	ErrNotIP                // frame carries neither IPv4 nor IPv6
	ErrIPVersion            // IP version field is not 4 or 6
	ErrIPHeaderLength       // IPv4 IHL below 5 or beyond the frame
	ErrIPLength             // IP total/payload length disagrees with the frame
	ErrIPFragment           // a fragment: RoCEv2 is never fragmented
	ErrIPChecksum           // IPv4 header checksum does not verify
	ErrNotUDP               // IP protocol is not UDP (or IPv6 extension headers)
	ErrUDPLength            // UDP length disagrees with the IP payload
	ErrNotRoCEv2            // UDP destination port is not 4791
	ErrLinkType             // capture link type this package cannot frame
)

var errText = [...]string{
	ErrTruncated:      "truncated",
	ErrReservedOpcode: "reserved opcode",
	ErrTVer:           "transport header version not 0",
	ErrPadCount:       "bad pad count",
	ErrPayloadAlign:   "payload plus pad not a multiple of 4",
	ErrPayloadLength:  "payload length wrong for opcode",
	ErrICRC:           "ICRC mismatch",
	ErrNotIP:          "not IPv4 or IPv6",
	ErrIPVersion:      "bad IP version",
	ErrIPHeaderLength: "bad IPv4 header length",
	ErrIPLength:       "IP length disagrees with frame",
	ErrIPFragment:     "IP fragment",
	ErrIPChecksum:     "bad IPv4 header checksum",
	ErrNotUDP:         "not UDP",
	ErrUDPLength:      "UDP length disagrees with IP",
	ErrNotRoCEv2:      "UDP port is not 4791",
	ErrLinkType:       "unsupported link type",
}

// Error returns the reason with a "bth: " prefix.
func (e Error) Error() string {
	if int(e) < len(errText) && errText[e] != "" {
		return "bth: " + errText[e]
	}
	return "bth: malformed packet"
}

// Packet is a parsed RoCEv2 transport packet: a view of the UDP payload from
// the BTH through the ICRC. It is a small value holding offsets; the
// accessors return views into the original bytes.
type Packet struct {
	b      []byte
	info   *Info
	payLen int
}

// Parse validates b (BTH, extended headers, payload, pad and the 4-byte
// ICRC) as the opcode table says it must be laid out. It does not check the
// ICRC, which covers the IP and UDP headers as well (see VerifyICRC). It
// never panics and never allocates.
func Parse(b []byte) (Packet, error) {
	if len(b) < BTHLen+ICRCLen {
		return Packet{}, ErrTruncated
	}
	h := BTH(b)
	info := &opTable[h.OpCode()]
	if !info.valid {
		return Packet{}, ErrReservedOpcode
	}
	if h.TVer() != 0 {
		return Packet{}, ErrTVer
	}
	rest := len(b) - info.HdrLen - ICRCLen
	if rest < 0 {
		return Packet{}, ErrTruncated
	}
	pad := h.PadCount()
	if !info.Payload {
		// C9-x: opcodes without payload carry no pad and nothing after their headers.
		if pad != 0 {
			return Packet{}, ErrPadCount
		}
		if rest != 0 {
			return Packet{}, ErrPayloadLength
		}
		return Packet{b: b, info: info}, nil
	}
	if pad > rest {
		return Packet{}, ErrPadCount
	}
	if rest%4 != 0 {
		return Packet{}, ErrPayloadAlign
	}
	pay := rest - pad
	if info.Kind == KindAtomicWrite && pay != 8 {
		return Packet{}, ErrPayloadLength
	}
	return Packet{b: b, info: info, payLen: pay}, nil
}

// Bytes returns the whole packet, BTH through ICRC.
func (p Packet) Bytes() []byte { return p.b }

// Info describes the packet's opcode.
func (p Packet) Info() *Info { return p.info }

// OpCode returns the packet's opcode.
func (p Packet) OpCode() OpCode { return OpCode(p.b[0]) }

// BTH returns the base transport header.
func (p Packet) BTH() BTH { return BTH(p.b[:BTHLen]) }

// HdrLen returns the length of the BTH and extended headers.
func (p Packet) HdrLen() int { return p.info.HdrLen }

// Payload returns the payload without pad bytes.
func (p Packet) Payload() []byte { return p.b[p.info.HdrLen : p.info.HdrLen+p.payLen] }

// PayloadLen returns the payload length without pad bytes.
func (p Packet) PayloadLen() int { return p.payLen }

// PadCount returns the number of pad bytes.
func (p Packet) PadCount() int { return BTH(p.b).PadCount() }

// ICRC returns the ICRC as stored on the wire (least significant byte first).
func (p Packet) ICRC() uint32 { return getICRC(p.b[len(p.b)-ICRCLen:]) }

func (p Packet) ext(e Ext) []byte {
	if !p.info.Headers.Has(e) {
		return nil
	}
	o := int(p.info.offsets[e])
	return p.b[o : o+extSizes[e]]
}

// Ext returns extended header e, or nil when the opcode does not carry it.
func (p Packet) Ext(e Ext) []byte { return p.ext(e) }

// RETH returns the RETH, or nil when the opcode has none; so do the
// other header accessors below for theirs.
func (p Packet) RETH() RETH { return RETH(p.ext(ExtRETH)) }

// AETH returns the AETH, or nil.
func (p Packet) AETH() AETH { return AETH(p.ext(ExtAETH)) }

// AtomicETH returns the AtomicETH, or nil.
func (p Packet) AtomicETH() AtomicETH { return AtomicETH(p.ext(ExtAtomicETH)) }

// AtomicAckETH returns the AtomicAckETH, or nil.
func (p Packet) AtomicAckETH() AtomicAckETH { return AtomicAckETH(p.ext(ExtAtomicAckETH)) }

// ImmDt returns the immediate data header, or nil.
func (p Packet) ImmDt() ImmDt { return ImmDt(p.ext(ExtImmDt)) }

// IETH returns the IETH, or nil.
func (p Packet) IETH() IETH { return IETH(p.ext(ExtIETH)) }

// DETH returns the DETH, or nil.
func (p Packet) DETH() DETH { return DETH(p.ext(ExtDETH)) }

// XRCETH returns the XRCETH, or nil.
func (p Packet) XRCETH() XRCETH { return XRCETH(p.ext(ExtXRCETH)) }

// RDETH returns the RDETH, or nil.
func (p Packet) RDETH() RDETH { return RDETH(p.ext(ExtRDETH)) }

// FETH returns the FETH, or nil.
func (p Packet) FETH() FETH { return FETH(p.ext(ExtFETH)) }

// PadFor returns the pad count for a payload of n bytes.
func PadFor(n int) int { return -n & 3 }

// PacketLen returns the length of a packet with opcode o and n payload bytes,
// headers through ICRC.
func PacketLen(o OpCode, n int) int {
	return opTable[o].HdrLen + n + PadFor(n) + ICRCLen
}
