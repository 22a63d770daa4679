package perftest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// Record sizes (perftest_communication.h KEY_MSG_SIZE_GID, KEY_MSG_SIZE).
const (
	RecordSize      = 108 // with a GID: every RoCE run
	RecordSizeNoGID = 59  // without: IB with no -x
	// RecordSizeCM is sizeof(struct pingpong_dest) on x86-64, the record
	// rdma_write_keys sends over the RDMA CM exchange (-R, -z).
	RecordSizeCM = 56
)

// Record is one QP's address in ctx_hand_shake (struct pingpong_dest).
type Record struct {
	LID      uint16   // 0 on RoCE
	OutReads uint16   // outstanding RDMA READ/atomic (1, or max_qp_rd_atom)
	QPN      uint32   // 24 bits
	PSN      uint32   // 24 bits
	RKey     uint32   // the rkey of the side's buffer
	VAddr    uint64   // the buffer's address
	GID      [16]byte // the side's GID
	SRQN     uint32   // the XRC SRQ number, 0 otherwise
	// GIDIndex is the sender's GID index (gid_index): only the RDMA CM
	// exchange carries it, and only a zeroed record has 0 on RoCE.
	GIDIndex int32
}

// MarshalCM lays the record out as rdma_write_keys sends it (perftest built
// with HAVE_ENDIAN, as every distribution is): struct pingpong_dest with
// each field big endian, the GID as is. The 4 bytes of padding before
// vaddr are whatever was on the tool's stack; roced sends zeros.
//
//	0 lid, 4 out_reads, 8 qpn, 12 psn, 16 rkey, 20 padding, 24 vaddr,
//	32 gid[16], 48 srqn, 52 gid_index
func (r Record) MarshalCM() []byte {
	b := make([]byte, RecordSizeCM)
	be := binary.BigEndian
	be.PutUint32(b[0:], uint32(r.LID))
	be.PutUint32(b[4:], uint32(r.OutReads))
	be.PutUint32(b[8:], r.QPN)
	be.PutUint32(b[12:], r.PSN)
	be.PutUint32(b[16:], r.RKey)
	be.PutUint64(b[24:], r.VAddr)
	copy(b[32:48], r.GID[:])
	be.PutUint32(b[48:], r.SRQN)
	be.PutUint32(b[52:], uint32(r.GIDIndex))
	return b
}

// ParseRecordCM reads a record of the RDMA CM exchange. rdma_read_keys
// takes lid, out_reads, qpn, psn, rkey, vaddr and the GID from it (the
// padding is ignored); the SRQ number and GID index are returned too.
func ParseRecordCM(b []byte) (Record, error) {
	if len(b) != RecordSizeCM {
		return Record{}, &RecordError{Raw: b, Reason: fmt.Sprintf("%d bytes, want %d", len(b), RecordSizeCM)}
	}
	be := binary.BigEndian
	r := Record{LID: uint16(be.Uint32(b[0:])), OutReads: uint16(be.Uint32(b[4:])),
		QPN: be.Uint32(b[8:]) & 0xffffff, PSN: be.Uint32(b[12:]) & 0xffffff, RKey: be.Uint32(b[16:]),
		VAddr: be.Uint64(b[24:]), SRQN: be.Uint32(b[48:]), GIDIndex: int32(be.Uint32(b[52:]))}
	copy(r.GID[:], b[32:48])
	return r, nil
}

// Marshal formats the record as ethernet_write_keys does:
// "%04x:%04x:%06x:%06x:%08x:%016llx:" then, with a GID, each GID byte
// "%02x:" and "%08x:" for the SRQ number; without one, "%08x". Plus NUL.
func (r Record) Marshal(withGID bool) []byte {
	b := fmt.Appendf(nil, "%04x:%04x:%06x:%06x:%08x:%016x:", r.LID, r.OutReads, r.QPN&0xffffff, r.PSN&0xffffff, r.RKey, r.VAddr)
	if !withGID {
		return append(fmt.Appendf(b, "%08x", r.SRQN), 0)
	}
	for _, g := range r.GID {
		b = fmt.Appendf(b, "%02x:", g)
	}
	return append(fmt.Appendf(b, "%08x:", r.SRQN), 0)
}

// RecordError reports a record the peer sent that does not parse.
type RecordError struct {
	Raw    []byte // the record as received
	Reason string // what is wrong with it
}

// Error says what is wrong and quotes the record.
func (e *RecordError) Error() string {
	return fmt.Sprintf("perftest: garbled address record (%s): %q", e.Reason, e.Raw)
}

// ParseRecord parses a 108-byte (GID) or 59-byte record.
func ParseRecord(b []byte) (Record, error) {
	fail := func(reason string) (Record, error) { return Record{}, &RecordError{Raw: b, Reason: reason} }
	var want int
	switch len(b) {
	case RecordSize:
		want = 6 + 16 + 1 + 1 // trailing ':' leaves an empty last field
	case RecordSizeNoGID:
		want = 7
	default:
		return fail(fmt.Sprintf("%d bytes, want %d or %d", len(b), RecordSize, RecordSizeNoGID))
	}
	nul := bytes.IndexByte(b, 0)
	if nul < 0 {
		return fail("no terminating NUL")
	}
	f := strings.Split(string(b[:nul]), ":")
	if len(f) != want {
		return fail(fmt.Sprintf("%d fields, want %d", len(f), want))
	}
	num := func(i, bits int) (uint64, bool) {
		v, err := strconv.ParseUint(f[i], 16, bits)
		return v, err == nil
	}
	var r Record
	names := []string{"LID", "OUT_READS", "QPN", "PSN", "RKEY", "VADDR"}
	bits := []int{16, 16, 24, 24, 32, 64}
	var v [6]uint64
	for i := range names {
		var ok bool
		if v[i], ok = num(i, bits[i]); !ok {
			return fail("bad " + names[i])
		}
	}
	r.LID, r.OutReads, r.QPN, r.PSN, r.RKey, r.VAddr = uint16(v[0]), uint16(v[1]), uint32(v[2]), uint32(v[3]), uint32(v[4]), v[5]
	srqn := 6
	if want != 7 {
		for i := range r.GID {
			g, ok := num(6+i, 8)
			if !ok {
				return fail(fmt.Sprintf("bad GID byte %d", i))
			}
			r.GID[i] = byte(g)
		}
		srqn = 22
		if f[23] != "" {
			return fail("text after the SRQ number")
		}
	}
	s, ok := num(srqn, 32)
	if !ok {
		return fail("bad SRQN")
	}
	r.SRQN = uint32(s)
	return r, nil
}
