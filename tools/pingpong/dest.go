package pingpong

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// RecordSize is the size of one address record on the wire:
// sizeof "0000:000000:000000:00000000000000000000000000000000".
const RecordSize = 52

// Dest is a QP address as the examples exchange it (struct pingpong_dest).
type Dest struct {
	LID uint16   // 0 on RoCE
	QPN uint32   // 24 bits
	PSN uint32   // 24 bits
	GID [16]byte // the side's GID, zero without -g
}

// IsZero reports whether d is an all-zero record, as srq_pingpong sends for
// the QPs it does not have.
func (d Dest) IsZero() bool { return d == Dest{} }

// Marshal returns the 52-byte record: printf("%04x:%06x:%06x:%s") with the
// GID as 32 lowercase hex digits (its 16 bytes in network order, which is
// what gid_to_wire_gid's four big-endian words amount to), then a NUL.
func (d Dest) Marshal() []byte {
	b := make([]byte, 0, RecordSize)
	b = fmt.Appendf(b, "%04x:%06x:%06x:", d.LID, d.QPN&0xffffff, d.PSN&0xffffff)
	b = hex.AppendEncode(b, d.GID[:])
	return append(b, 0)
}

// RecordError reports a record the peer sent that does not parse.
type RecordError struct {
	Index  int    // record number, from 0
	Raw    []byte // the record as received
	Reason string // what is wrong with it
}

// Error says which record, what is wrong, and quotes it.
func (e *RecordError) Error() string {
	return fmt.Sprintf("pingpong: garbled address record %d (%s): %q", e.Index, e.Reason, e.Raw)
}

// ParseDest parses one 52-byte record. It accepts what the C side's
// sscanf("%x:%x:%x:%s") would read from a well-formed peer (any hex case,
// fields of any width that fit) and rejects anything else with a
// *RecordError, where sscanf would have left fields unset.
func ParseDest(b []byte) (Dest, error) {
	return parseDest(b, 0)
}

func parseDest(b []byte, index int) (Dest, error) {
	fail := func(reason string) (Dest, error) {
		return Dest{}, &RecordError{Index: index, Raw: b, Reason: reason}
	}
	if len(b) != RecordSize {
		return fail(fmt.Sprintf("%d bytes, want %d", len(b), RecordSize))
	}
	nul := strings.IndexByte(string(b), 0)
	if nul < 0 {
		return fail("no terminating NUL")
	}
	fields := strings.Split(string(b[:nul]), ":")
	if len(fields) != 4 {
		return fail(fmt.Sprintf("%d fields, want LID:QPN:PSN:GID", len(fields)))
	}
	var d Dest
	lid, err := strconv.ParseUint(fields[0], 16, 16)
	if err != nil {
		return fail("bad LID")
	}
	qpn, err := strconv.ParseUint(fields[1], 16, 24)
	if err != nil {
		return fail("bad QPN")
	}
	psn, err := strconv.ParseUint(fields[2], 16, 24)
	if err != nil {
		return fail("bad PSN")
	}
	// wire_gid_to_gid reads exactly 32 hex digits, 8 per 32-bit word.
	if len(fields[3]) != 32 {
		return fail(fmt.Sprintf("GID has %d hex digits, want 32", len(fields[3])))
	}
	if _, err := hex.Decode(d.GID[:], []byte(fields[3])); err != nil {
		return fail("bad GID")
	}
	d.LID, d.QPN, d.PSN = uint16(lid), uint32(qpn), uint32(psn)
	return d, nil
}

// GIDString formats a GID the way the tools print it, with glibc's
// inet_ntop(AF_INET6): "::ffff:192.0.2.2" for an IPv4-mapped GID, "::" when
// no GID is used. Go's net.IP.String prints "192.0.2.2" for the former,
// which is why this exists.
func GIDString(g [16]byte) string {
	var w [8]uint16
	for i := range w {
		w[i] = uint16(g[2*i])<<8 | uint16(g[2*i+1])
	}
	// The longest run of zero words (first one on a tie), if two or more.
	base, length := -1, 0
	for i := 0; i < 8; {
		if w[i] != 0 {
			i++
			continue
		}
		j := i
		for j < 8 && w[j] == 0 {
			j++
		}
		if j-i > length {
			base, length = i, j-i
		}
		i = j
	}
	if length < 2 {
		base, length = -1, 0
	}
	var sb strings.Builder
	for i := 0; i < 8; i++ {
		if base >= 0 && i >= base && i < base+length {
			if i == base {
				sb.WriteByte(':')
			}
			continue
		}
		if i != 0 {
			sb.WriteByte(':')
		}
		// IPv4-compatible (::a.b.c.d) or IPv4-mapped (::ffff:a.b.c.d).
		if i == 6 && base == 0 && (length == 6 || (length == 5 && w[5] == 0xffff)) {
			fmt.Fprintf(&sb, "%d.%d.%d.%d", g[12], g[13], g[14], g[15])
			return sb.String()
		}
		fmt.Fprintf(&sb, "%x", w[i])
	}
	if base >= 0 && base+length == 8 {
		sb.WriteByte(':')
	}
	return sb.String()
}
