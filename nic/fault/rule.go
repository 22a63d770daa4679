package fault

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/inet"
)

// Dir is the direction a fault applies to.
type Dir uint8

// Directions. A rule without one applies to both.
const (
	Tx   Dir = 1 << iota // frames the device sends
	Rx                   // frames the device receives
	Both = Tx | Rx
)

// String returns "tx", "rx" or "tx,rx".
func (d Dir) String() string {
	switch d {
	case Tx:
		return "tx"
	case Rx:
		return "rx"
	}
	return "tx,rx"
}

// Action is what a rule does to the packets it matches.
type Action uint8

// Actions.
const (
	Drop      Action = iota + 1 // lose the packet
	Duplicate                   // send it twice
	Delay                       // hold it for Rule.Delay
	Rewrite                     // set header fields (Rule.Set), ICRC recomputed unless Rule.KeepICRC
	SpoilICRC                   // flip the ICRC's bits
	Truncate                    // keep Rule.Truncate bytes of BTH and headers/payload, then a fresh ICRC unless Rule.KeepICRC
	MarkCE                      // set the IP header's ECN bits to Congestion Experienced, as a congested queue does
)

var actionNames = [...]string{Drop: "drop", Duplicate: "dup", Delay: "delay", Rewrite: "set", SpoilICRC: "badicrc", Truncate: "trunc", MarkCE: "ecn"}

// Field is a header field a rule can rewrite.
type Field uint8

// Fields.
const (
	FieldPSN      Field = iota + 1 // BTH PSN (24 bits)
	FieldOpcode                    // BTH opcode
	FieldPadCnt                    // BTH PadCnt (2 bits)
	FieldPKey                      // BTH P_Key
	FieldQPN                       // BTH destination QP
	FieldRKey                      // RETH or AtomicETH R_Key
	FieldVA                        // RETH or AtomicETH virtual address
	FieldDMALen                    // RETH DMA length
	FieldMSN                       // AETH MSN (24 bits)
	FieldSyndrome                  // AETH syndrome
	FieldQKey                      // DETH Q_Key
)

var fieldNames = [...]string{FieldPSN: "psn", FieldOpcode: "opcode", FieldPadCnt: "padcnt", FieldPKey: "pkey",
	FieldQPN: "qpn", FieldRKey: "rkey", FieldVA: "va", FieldDMALen: "len", FieldMSN: "msn",
	FieldSyndrome: "syndrome", FieldQKey: "qkey"}

// fieldMax is each field's largest value.
var fieldMax = [...]uint64{FieldPSN: 1<<24 - 1, FieldOpcode: 255, FieldPadCnt: 3, FieldPKey: 0xffff,
	FieldQPN: 1<<24 - 1, FieldRKey: 1<<32 - 1, FieldVA: 1<<64 - 1, FieldDMALen: 1<<32 - 1,
	FieldMSN: 1<<24 - 1, FieldSyndrome: 255, FieldQKey: 1<<32 - 1}

// String returns the field's name in the rule syntax ("psn").
func (f Field) String() string { return fieldNames[f] }

// Set is one field rewrite.
type Set struct {
	Field Field  // which field
	Value uint64 // its new value, within the field's width
}

// Rule matches packets and acts on them. The zero value of each match
// field matches every packet.
type Rule struct {
	Dir     Dir           // 0: both
	Opcodes []bth.OpCode  // any of these; nil: any opcode
	QPN     *uint32       // destination QP
	PSN     *PSNRange     // PSN, absolute or relative to the QP's first PSN
	Size    *[2]int       // payload bytes (headers, pad and ICRC excluded), inclusive range
	Nth     int           // fire only on the nth packet matching the rest (1-based); 0: on every one
	Action  Action        // what to do
	Delay   time.Duration // for Delay
	Set     []Set         // for Rewrite
	Trunc   int           // for Truncate: transport bytes kept before the ICRC (at least the BTH)
	// KeepICRC leaves the ICRC as it was after a Rewrite or Truncate, so
	// the receiver sees an ICRC error rather than the changed field.
	KeepICRC bool
	// Text is the rule as the user wrote it, for reports.
	Text string
}

// PSNRange matches PSNs Lo through Hi. Relative ones count from the first
// PSN the rule's direction carried to the destination QP, because a QP's
// starting PSN is random and a user cannot know it in advance.
type PSNRange struct {
	Lo, Hi   uint32 // inclusive bounds
	Relative bool   // count from the QP's first PSN
}

// ParseRule parses the command-line form of a rule:
//
//	[tx|rx] [opcode=NAME|NUM[,...]] [qpn=N] [psn=N|N-M|+N|+N-M] [size=N|N-M] [nth=N] ACTION
//
// where ACTION is one of drop, dup, delay=DURATION, badicrc, trunc=N
// [noicrc], ecn (mark the packet CE: the ICRC does not cover the ECN
// bits, so it stays valid), or set FIELD=VALUE... [noicrc]. Numbers may be decimal or 0x
// hex. Opcode names are the IBA ones with underscores, with or without the
// transport (RC_RDMA_WRITE_MIDDLE, RDMA_WRITE_MIDDLE, ACKNOWLEDGE).
func ParseRule(s string) (Rule, error) {
	r := Rule{Text: strings.Join(strings.Fields(s), " ")}
	words := strings.Fields(s)
	if len(words) == 0 {
		return r, fmt.Errorf("empty fault rule")
	}
	setting := false
	for _, w := range words {
		k, v, hasV := strings.Cut(w, "=")
		k = strings.ToLower(k)
		if setting && hasV {
			f, err := parseSet(k, v)
			if err != nil {
				return r, err
			}
			r.Set = append(r.Set, f)
			continue
		}
		var err error
		switch {
		case !hasV && (k == "tx" || k == "rx"):
			if r.Dir != 0 {
				return r, fmt.Errorf("fault rule %q: more than one direction", s)
			}
			r.Dir = map[string]Dir{"tx": Tx, "rx": Rx}[k]
		case hasV && k == "opcode":
			if r.Opcodes != nil {
				return r, fmt.Errorf("fault rule %q: opcode given twice", s)
			}
			r.Opcodes, err = parseOpcodes(v)
		case hasV && k == "qpn":
			var n uint64
			n, err = parseNum("qpn", v, 1<<24-1)
			q := uint32(n)
			r.QPN = &q
		case hasV && k == "psn":
			r.PSN, err = parsePSN(v)
		case hasV && k == "size":
			var lo, hi uint64
			lo, hi, err = parseRange("size", v, 1<<31-1)
			r.Size = &[2]int{int(lo), int(hi)}
		case hasV && k == "nth":
			var n uint64
			n, err = parseNum("nth", v, 1<<31-1)
			if err == nil && n == 0 {
				err = fmt.Errorf("nth=0: counting starts at 1")
			}
			r.Nth = int(n)
		case !hasV && k == "noicrc":
			r.KeepICRC = true
		case !hasV && k == "set":
			err = r.setAction(Rewrite)
			setting = true
		case !hasV && k == "drop":
			err = r.setAction(Drop)
		case !hasV && k == "dup":
			err = r.setAction(Duplicate)
		case !hasV && k == "badicrc":
			err = r.setAction(SpoilICRC)
		case !hasV && k == "ecn":
			err = r.setAction(MarkCE)
		case hasV && k == "delay":
			if err = r.setAction(Delay); err == nil {
				r.Delay, err = time.ParseDuration(v)
				if err == nil && r.Delay <= 0 {
					err = fmt.Errorf("delay=%s: must be positive", v)
				}
			}
		case hasV && k == "trunc":
			if err = r.setAction(Truncate); err == nil {
				var n uint64
				n, err = parseNum("trunc", v, 4096+64)
				if err == nil && n < bth.BTHLen {
					err = fmt.Errorf("trunc=%s: a packet keeps at least its %d-byte BTH", v, bth.BTHLen)
				}
				r.Trunc = int(n)
			}
		default:
			return r, fmt.Errorf("fault rule %q: unknown word %q (want tx, rx, opcode=, qpn=, psn=, size=, nth=, then drop, dup, delay=D, badicrc, trunc=N, ecn or set FIELD=V...)", s, w)
		}
		if err != nil {
			return r, fmt.Errorf("fault rule %q: %w", s, err)
		}
	}
	switch {
	case r.Action == 0:
		return r, fmt.Errorf("fault rule %q: no action (drop, dup, delay=D, badicrc, trunc=N or set FIELD=V...)", s)
	case r.Action == Rewrite && len(r.Set) == 0:
		return r, fmt.Errorf("fault rule %q: set needs FIELD=VALUE (psn, opcode, padcnt, pkey, qpn, rkey, va, len, msn, syndrome, qkey)", s)
	case r.KeepICRC && r.Action != Rewrite && r.Action != Truncate:
		return r, fmt.Errorf("fault rule %q: noicrc goes with set or trunc", s)
	}
	if r.Dir == 0 {
		r.Dir = Both
	}
	return r, nil
}

func (r *Rule) setAction(a Action) error {
	if r.Action != 0 {
		return fmt.Errorf("two actions (%s and %s): one per rule", actionNames[r.Action], actionNames[a])
	}
	r.Action = a
	return nil
}

func parseSet(k, v string) (Set, error) {
	for f, name := range fieldNames {
		if name != "" && name == k {
			if Field(f) == FieldOpcode {
				ops, err := parseOpcodes(v)
				if err != nil {
					return Set{}, err
				}
				if len(ops) != 1 {
					return Set{}, fmt.Errorf("set opcode=%s: names %d opcodes, give the transport (RC_...)", v, len(ops))
				}
				return Set{FieldOpcode, uint64(ops[0])}, nil
			}
			n, err := parseNum(k, v, fieldMax[f])
			return Set{Field(f), n}, err
		}
	}
	return Set{}, fmt.Errorf("set %s: no such field (psn, opcode, padcnt, pkey, qpn, rkey, va, len, msn, syndrome, qkey)", k)
}

func parseNum(name, v string, max uint64) (uint64, error) {
	n, err := strconv.ParseUint(v, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("%s=%s: not a number", name, v)
	}
	if n > max {
		return 0, fmt.Errorf("%s=%s: above %d", name, v, max)
	}
	return n, nil
}

func parseRange(name, v string, max uint64) (lo, hi uint64, err error) {
	a, b, isRange := strings.Cut(v, "-")
	if lo, err = parseNum(name, a, max); err != nil {
		return
	}
	hi = lo
	if isRange {
		if hi, err = parseNum(name, b, max); err != nil {
			return
		}
		if hi < lo {
			err = fmt.Errorf("%s=%s: range ends before it starts", name, v)
		}
	}
	return
}

func parsePSN(v string) (*PSNRange, error) {
	rel := strings.HasPrefix(v, "+")
	lo, hi, err := parseRange("psn", strings.TrimPrefix(v, "+"), 1<<24-1)
	if err != nil {
		return nil, err
	}
	return &PSNRange{Lo: uint32(lo), Hi: uint32(hi), Relative: rel}, nil
}

// opcodeName is an opcode's name as a user types it: the IBA name in
// upper case with underscores (RC_RDMA_WRITE_MIDDLE).
func opcodeName(o bth.OpCode) string {
	return strings.ToUpper(strings.ReplaceAll(o.String(), " ", "_"))
}

// parseOpcodes reads a comma-separated list of opcode names or numbers. A
// name without its transport names that operation on every transport.
func parseOpcodes(v string) ([]bth.OpCode, error) {
	var ops []bth.OpCode
	for _, w := range strings.Split(v, ",") {
		if n, err := strconv.ParseUint(w, 0, 8); err == nil {
			ops = append(ops, bth.OpCode(n))
			continue
		}
		w = strings.ToUpper(w)
		found := false
		for i := range 256 {
			o := bth.OpCode(i)
			if !o.Valid() {
				continue
			}
			name := opcodeName(o)
			_, bare, _ := strings.Cut(name, "_")
			if name == w || bare == w && o.Transport() != bth.TransportCNP {
				ops = append(ops, o)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("opcode %q: unknown (a number, or a name like RDMA_WRITE_MIDDLE or RC_SEND_ONLY)", w)
		}
	}
	return ops, nil
}

// pkt is a parsed RoCEv2 datagram: the offsets a rule needs.
type pkt struct {
	f    bth.Frame
	info *bth.Info
	bth  bth.BTH
}

func parse(d []byte) (pkt, bool) {
	f, err := bth.DecodeIP(d)
	if err != nil || len(f.RoCE()) < bth.BTHLen+bth.ICRCLen {
		return pkt{}, false
	}
	b := bth.BTH(f.RoCE())
	return pkt{f: f, info: b.OpCode().Info(), bth: b}, true
}

// payload is the packet's payload length, or -1 if its headers do not fit.
func (p pkt) payload() int {
	n := len(p.f.RoCE()) - max(p.info.HdrLen, bth.BTHLen) - bth.ICRCLen - p.bth.PadCount()
	return max(n, -1)
}

// ext returns extended header e of the packet, nil if it has none.
func (p pkt) ext(e bth.Ext) []byte {
	off := p.info.Offset(e)
	r := p.f.RoCE()
	if off < 0 || off+e.Size() > len(r)-bth.ICRCLen {
		return nil
	}
	return r[off : off+e.Size()]
}

// field returns where a field lies, nil if the packet has no such field.
func (p pkt) field(f Field) []byte {
	b := p.f.RoCE()
	switch f {
	case FieldPSN:
		return b[9:12]
	case FieldOpcode:
		return b[0:1]
	case FieldPadCnt:
		return b[1:2]
	case FieldPKey:
		return b[2:4]
	case FieldQPN:
		return b[5:8]
	case FieldRKey, FieldVA:
		h := p.ext(bth.ExtRETH)
		if h == nil {
			h = p.ext(bth.ExtAtomicETH)
		}
		if h == nil {
			return nil
		}
		if f == FieldVA {
			return h[0:8]
		}
		return h[8:12]
	case FieldDMALen:
		if h := p.ext(bth.ExtRETH); h != nil {
			return h[12:16]
		}
	case FieldMSN, FieldSyndrome:
		if h := p.ext(bth.ExtAETH); h != nil {
			if f == FieldSyndrome {
				return h[0:1]
			}
			return h[1:4]
		}
	case FieldQKey:
		if h := p.ext(bth.ExtDETH); h != nil {
			return h[0:4]
		}
	}
	return nil
}

// put writes v into field f of the packet (which has it).
func (p pkt) put(f Field, v uint64) {
	b := p.field(f)
	switch f {
	case FieldPadCnt:
		p.bth.SetPadCount(int(v))
	case FieldOpcode, FieldSyndrome:
		b[0] = byte(v)
	default:
		for i := len(b) - 1; i >= 0; i-- {
			b[i] = byte(v)
			v >>= 8
		}
	}
}

// truncate cuts the transport packet to keep bytes before the ICRC, fixing
// the IP and UDP lengths (and the IPv4 header checksum) so that the
// receiver's stack still delivers it, and returns the shorter datagram.
func truncate(d []byte, p pkt, keep int) []byte {
	r := p.f.RoCE()
	if keep+bth.ICRCLen >= len(r) {
		return d
	}
	roceOff := len(d) - len(r)
	icrc := r[len(r)-bth.ICRCLen:]
	copy(d[roceOff+keep:], icrc)
	d = d[:roceOff+keep+bth.ICRCLen]
	udpOff := roceOff - inet.UDPHeaderLen
	inet.UDP(d[udpOff:]).SetLength(uint16(len(d) - udpOff))
	if d[0]>>4 == 4 {
		h := inet.IPv4(d[:udpOff])
		h.SetTotalLength(uint16(len(d)))
		h.SetChecksum(h.CalculateChecksum())
	} else {
		inet.IPv6(d).SetPayloadLength(uint16(len(d) - inet.IPv6HeaderLen))
	}
	return d
}
