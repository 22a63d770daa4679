package perftest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/goroce/goroce/tools/internal/wire"
)

// DefaultPort is perftest's TCP port (-p).
const DefaultPort = 18515

// Role is which end of the TCP connection a side is.
type Role int

const (
	Server Role = iota // no host operand: listens, reads first
	Client             // has a host operand: connects, writes first
)

// String returns "server" or "client".
func (r Role) String() string {
	if r == Client {
		return "client"
	}
	return "server"
}

// Session is one perftest out-of-band connection. Every step is a
// fixed-size message sent by both sides (ctx_xchg_data): the client writes
// then reads, the server reads then writes, so the client is never ahead by
// more than one message.
type Session struct {
	conn net.Conn
	role Role
	// Local is the version this side claims; Peer the one it received.
	Local, Peer Version
	// WithGID selects the 108-byte record (any RoCE run) over the 59-byte
	// one (InfiniBand without -x).
	WithGID bool
	// RDMACM says the exchange runs over an RDMA CM connection (-R): each
	// message is one SEND, records are binary (MarshalCM) and nobody
	// writes "done".
	RDMACM bool
}

// NewSession wraps an established connection. For a client, local is the
// version to claim (DefaultClientVersion); a server decides its claim in
// ExchangeVersions, and local is then only a ceiling (use V629).
func NewSession(conn net.Conn, role Role, local Version) *Session {
	return &Session{conn: conn, role: role, Local: local, WithGID: true}
}

// Dial connects to a perftest server, as ethernet_client_connect: each
// resolved address once, no retry (the server must already listen).
func Dial(ctx context.Context, host string, port int, local Version) (*Session, error) {
	c, err := wire.Dial(ctx, host, port)
	if err != nil {
		return nil, fmt.Errorf("perftest: %w", err)
	}
	return NewSession(c, Client, local), nil
}

// Listen binds the server's port (all addresses, SO_REUSEADDR).
func Listen(ctx context.Context, port int) (net.Listener, error) { return wire.Listen(ctx, port) }

// Accept takes one client and closes ln, as ethernet_server_connect does
// (listen backlog 1, one accept, close). ceiling caps the version the
// server will claim (V629 normally).
func Accept(ctx context.Context, ln net.Listener, ceiling Version) (*Session, error) {
	c, err := wire.AcceptOne(ctx, ln)
	if err != nil {
		return nil, fmt.Errorf("perftest: %w", err)
	}
	return NewSession(c, Server, ceiling), nil
}

// Conn is the underlying connection.
func (s *Session) Conn() net.Conn { return s.conn }

// xchg is ctx_xchg_data over TCP.
func (s *Session) xchg(ctx context.Context, mine []byte, what string) ([]byte, error) {
	var theirs []byte
	err := wire.Do(ctx, s.conn, func() error {
		var err error
		if s.role == Client {
			if err = wire.Write(s.conn, mine); err != nil {
				return fmt.Errorf("perftest: %s: write: %w", what, err)
			}
			theirs, err = wire.Read(s.conn, len(mine), "perftest: "+what)
			return err
		}
		if theirs, err = wire.Read(s.conn, len(mine), "perftest: "+what); err != nil {
			return err
		}
		if err = wire.Write(s.conn, mine); err != nil {
			return fmt.Errorf("perftest: %s: write: %w", what, err)
		}
		return nil
	})
	return theirs, err
}

// ExchangeVersions is exchange_versions. A client sends s.Local; a server
// reads the client's version first and answers with ServerClaim of it
// (capped at s.Local), so s.Local afterwards is what this side claimed.
func (s *Session) ExchangeVersions(ctx context.Context) error {
	if s.role == Client {
		mine, err := s.Local.Marshal()
		if err != nil {
			return err
		}
		raw, err := s.xchg(ctx, mine, "version")
		if err != nil {
			return err
		}
		s.Peer, err = ParseVersion(raw)
		return err
	}
	return wire.Do(ctx, s.conn, func() error {
		raw, err := wire.Read(s.conn, VersionSize, "perftest: version")
		if err != nil {
			return err
		}
		if s.Peer, err = ParseVersion(raw); err != nil {
			return err
		}
		if claim := ServerClaim(s.Peer); claim.Float() < s.Local.Float() {
			s.Local = claim
		}
		mine, err := s.Local.Marshal()
		if err != nil {
			return err
		}
		return wire.Write(s.conn, mine)
	})
}

// SysData is check_sys_data's pair. Both sides keep the larger values.
type SysData struct {
	CycleBuffer   int32 // page size: 4096
	CacheLineSize int32 // 64
}

// DefaultSysData is what the lab's x86-64 peers send.
var DefaultSysData = SysData{CycleBuffer: 4096, CacheLineSize: 64}

// ExchangeSysData is check_sys_data: two 4-byte big-endian exchanges
// (every peer this package talks to is >= 5.32, which has the step). It
// returns the merged values.
func (s *Session) ExchangeSysData(ctx context.Context, mine SysData) (SysData, error) {
	var out SysData
	for i, v := range []int32{mine.CycleBuffer, mine.CacheLineSize} {
		raw, err := s.xchg(ctx, binary.BigEndian.AppendUint32(nil, uint32(v)), [...]string{"cycle buffer", "cache line size"}[i])
		if err != nil {
			return out, err
		}
		rem := int32(binary.BigEndian.Uint32(raw))
		if rem < v {
			rem = v
		}
		if i == 0 {
			out.CycleBuffer = rem
		} else {
			out.CacheLineSize = rem
		}
	}
	return out, nil
}

// MTU is an IB MTU enum value: 1 = 256 ... 5 = 4096 bytes.
type MTU int

// Bytes is the MTU in bytes.
func (m MTU) Bytes() int { return 128 << m }

// MTUFromBytes converts 256..4096 to the enum; 0 when invalid.
func MTUFromBytes(n int) MTU {
	for m := MTU(1); m <= 5; m++ {
		if m.Bytes() == n {
			return m
		}
	}
	return 0
}

// ExchangeMTU is check_mtu's step: the enum as decimal text in 2 bytes
// ("3\0" for 1024). Both sides use the smaller valid value.
func (s *Session) ExchangeMTU(ctx context.Context, mine MTU) (MTU, error) {
	if mine < 1 || mine > 5 {
		return 0, fmt.Errorf("perftest: MTU enum %d out of range", mine)
	}
	raw, err := s.xchg(ctx, []byte{byte('0' + mine), 0}, "MTU")
	if err != nil {
		return 0, err
	}
	// strtol of the peer's text: digits up to the first non-digit.
	rem := 0
	for _, c := range raw {
		if c < '0' || c > '9' {
			break
		}
		rem = rem*10 + int(c-'0')
	}
	if rem >= 1 && rem <= 5 && MTU(rem) < mine {
		return MTU(rem), nil
	}
	return mine, nil
}

// Negotiated is the outcome of the negotiate_params step.
type Negotiated struct {
	Ran    bool   // false when the versions skip the step
	Remote Params // the peer's struct
	// OutReads is the caller's outstanding reads, lowered to the peer's
	// max_qp_rd_atom when that is smaller (the tool then prints
	// OutReadsLowered).
	OutReads int
	Lowered  bool // OutReads was lowered
}

// OutReadsLowered is the line the tool prints when it lowers out_reads.
const OutReadsLowered = " out_reads is greater than remote max_qp_rd_atom, using remote max_qp_rd_atom"

// Negotiate runs negotiate_params when the two versions call for it
// (Negotiates), compares the peer's parameters with ours and returns a
// *MismatchError on the first difference, as the tools do before they
// exit. outReads is this side's outstanding reads (1 unless READ/ATOMIC).
func (s *Session) Negotiate(ctx context.Context, mine Params, outReads int) (Negotiated, error) {
	res := Negotiated{OutReads: outReads}
	if !Negotiates(s.Local, s.Peer) {
		return res, nil
	}
	raw, err := s.xchg(ctx, mine.Marshal(), "negotiate_params")
	if err != nil {
		return res, err
	}
	res.Ran = true
	if res.Remote, err = ParseParams(raw); err != nil {
		return res, err
	}
	both := s.Local
	if s.Peer.Float() < both.Float() {
		both = s.Peer
	}
	if err := Compare(mine, res.Remote, both); err != nil {
		return res, err
	}
	if m := int(res.Remote.Attr.MaxQPRdAtom); mine.ConnectionType != ConnDC && m > 0 && outReads > m {
		res.OutReads, res.Lowered = m, true
	}
	return res, nil
}

// ExchangeRecord is one ctx_hand_shake: our record for their record.
func (s *Session) ExchangeRecord(ctx context.Context, mine Record) (Record, error) {
	if s.RDMACM {
		raw, err := s.xchg(ctx, mine.MarshalCM(), "address record")
		if err != nil {
			return Record{}, err
		}
		return ParseRecordCM(raw)
	}
	raw, err := s.xchg(ctx, mine.Marshal(s.WithGID), "address record")
	if err != nil {
		return Record{}, err
	}
	return ParseRecord(raw)
}

// ExchangeRecords runs one handshake per record, in order, as the tools'
// per-QP loops do, and returns the peer's records.
func (s *Session) ExchangeRecords(ctx context.Context, mine []Record) ([]Record, error) {
	out := make([]Record, 0, len(mine))
	for _, r := range mine {
		rem, err := s.ExchangeRecord(ctx, r)
		if err != nil {
			return out, err
		}
		out = append(out, rem)
	}
	return out, nil
}

// ExchangeBWReport is xchg_bw_reports: five 8-byte exchanges.
func (s *Session) ExchangeBWReport(ctx context.Context, mine BWReport) (BWReport, error) {
	var got [BWReportSteps][]byte
	for i, m := range mine.Marshal() {
		raw, err := s.xchg(ctx, m[:], fmt.Sprintf("bandwidth report value %d", i))
		if err != nil {
			return BWReport{}, err
		}
		got[i] = raw
	}
	return ParseBWReport(got)
}

var doneMsg = []byte("done\x00")

// ErrTrailing reports bytes the peer sent after the last step that are not
// 6.06's "done".
var ErrTrailing = errors.New("perftest: unexpected bytes after the final handshake")

// Close ends the session after the final handshake (ctx_close_connection's
// record is exchanged before, with ExchangeRecord). A 6.06 side writes
// "done\0" and closes without waiting, and the peer may still be writing
// its own: closing on unread data would send an RST and fail the 6.06
// peer's write ("Failed to close connection"). So Close writes our "done"
// if our version sends one, shuts down its sending half (so a peer doing
// the same sees the end at once), reads until the peer closes or linger
// passes, accepting only the peer's "done", and then closes.
//
// Over RDMA CM (RDMACM) ctx_close_connection neither writes "done" nor
// closes: the connection stays up until the tool tears its resources
// down, which the caller does (closing Conn).
func (s *Session) Close(ctx context.Context, linger time.Duration) error {
	if s.RDMACM {
		return nil
	}
	defer s.conn.Close()
	if s.Local.sendsDone() {
		if err := wire.Write(s.conn, doneMsg); err != nil && !isClosed(err) {
			return fmt.Errorf("perftest: writing done: %w", err)
		}
	}
	cw, ok := s.conn.(interface{ CloseWrite() error })
	if !ok {
		return nil // no half-close (net.Pipe): nothing to wait for
	}
	_ = cw.CloseWrite()
	ctx, cancel := context.WithTimeout(ctx, linger)
	defer cancel()
	var tail []byte
	err := wire.Do(ctx, s.conn, func() error {
		buf := make([]byte, 64)
		for len(tail) <= len(doneMsg) {
			n, err := s.conn.Read(buf)
			tail = append(tail, buf[:n]...)
			if err != nil {
				return err
			}
		}
		return nil
	})
	if len(tail) > 0 && !bytes.Equal(tail, doneMsg) {
		return fmt.Errorf("%w: %q", ErrTrailing, tail)
	}
	if err != nil && !errors.Is(err, io.EOF) && !isClosed(err) && !errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() == nil {
		return err
	}
	return nil
}

// isClosed reports the errors of a peer that already closed or reset.
func isClosed(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrClosedPipe)
}
