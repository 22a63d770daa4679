package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic/netdev"
)

// Connecting a QP: what one side tells the other (Endpoint), and the three
// Modify calls that take a QP from RESET to RTS towards the peer's
// endpoint (Device.Connect), as rdma-core's pingpongs do after their
// out-of-band exchange. RDMA CM would sit on top of this; this layer is
// for programs that exchange endpoints their own way.

// Endpoint is what a program sends its peer so that the peer can connect a
// QP to it: the QP number, the first PSN it will send, the GID its packets
// come from, and the largest path MTU its port takes. On RoCE the LID is
// always 0; it is carried so that the record says so.
type Endpoint struct {
	// QPN is the QP's number (24 bits).
	QPN uint32
	// PSN is the first packet sequence number the QP sends (24 bits): the
	// peer's expected PSN.
	PSN uint32
	// GID is the source GID of the QP's packets, the peer's destination.
	GID bth.GID
	// LID is the local identifier, 0 on RoCE (routing is by GID).
	LID uint16
	// MTU is the largest path MTU the side accepts (its port's active MTU,
	// or less); Connect uses the smaller of both sides'.
	MTU MTU
}

// DefaultGIDIndex returns the index of the GID a QP uses when the program
// names none (netdev.DefaultGIDIndex: the first IPv4 GID, else the first IPv6
// GID that is not link-local, else the first one). On loopback, whose GID
// table is an empty slot and ::ffff:127.0.0.1, it is 1; on an interface
// with an IPv4 address it is the index -g 1 names on rxe.
func (d *Device) DefaultGIDIndex() uint8 {
	t := make([]netdev.GID, len(d.gids))
	for i, g := range d.gids {
		t[i] = netdev.GID{Index: i, GID: g}
		if !g.IsZero() {
			t[i].Addr = g.Addr()
		}
	}
	i, _ := netdev.DefaultGIDIndex(t) // Open refuses a table with no GID
	return uint8(i)
}

// LocalEndpoint returns the endpoint of q to send to its peer: q's number,
// a random first PSN (as rdma-core's examples draw one), the device's
// default GID (DefaultGIDIndex) and its active MTU. A program may change
// any field before sending it (another GID of the device, a lower MTU, a
// chosen PSN) and must pass the same value to Connect.
func (d *Device) LocalEndpoint(q *QP) (Endpoint, error) {
	if err := d.owns(q); err != nil {
		return Endpoint{}, err
	}
	g, _ := d.GID(d.DefaultGIDIndex())
	return Endpoint{QPN: q.QPN(), PSN: rand.Uint32() & bth.PSNMask, GID: g, MTU: d.mtu}, nil
}

// owns reports an error unless q is one of d's QPs.
func (d *Device) owns(q *QP) error {
	select {
	case <-d.done:
		return ErrClosed
	default:
	}
	if q == nil || d.LookupQP(q.QPN()) != q {
		return fmt.Errorf("device: %v is not a QP of this device", q)
	}
	return nil
}

// DefaultQKey is the Q_Key Connect gives a UD QP when the options name
// none: the one ibv_ud_pingpong uses. Its high bit is clear: a controlled
// Q_Key (high bit set) cannot be named by a send work request, whose high
// bit there stands for the sender's own Q_Key (IBA 10.2.5).
const DefaultQKey = 0x11111111

// ConnectOptions are the attributes Connect sets besides the endpoints. A
// zero field takes the default written beside it (the values rdma-core's
// pingpongs and perftest use), so ConnectOptions{Access: ...} is a
// complete set; a program that needs one of those attributes to be 0
// itself (a retry count of 0, say) brings the QP up with QP.Modify.
type ConnectOptions struct {
	// Access is what an RC or UC peer may do to this side's memory through
	// the QP: RemoteWrite, RemoteRead, RemoteAtomic (RC only
	// for the last two). Zero allows SEND only. A region must grant the
	// same right for an operation on it to pass.
	Access Access
	// QKey is a UD QP's Q_Key (0: DefaultQKey).
	QKey uint32
	// PathMTU bounds the path MTU below both endpoints' (0: no bound).
	PathMTU MTU
	// Timeout is the local ACK timeout exponent, 4.096 µs × 2^Timeout
	// (0: 14, 67 ms).
	Timeout uint8
	// RetryCnt is how often an RC request is retransmitted after a timeout
	// or a sequence error NAK (0: 7).
	RetryCnt uint8
	// RNRRetry is how often after an RNR NAK; 7 means without end (0: 7).
	RNRRetry uint8
	// MinRNRTimer is the RNR NAK timer code this side's responder asks
	// for (IBA table 45; 0: 12, 0.64 ms; RNRTimer655ms: code 0).
	MinRNRTimer uint8
	// MaxRdAtomic is how many READs and atomics this side keeps
	// outstanding (0: MaxRdAtomic). A peer with fewer responder
	// resources (mlx5: 16) needs it lowered to its max_dest_rd_atomic.
	MaxRdAtomic uint8
	// MaxDestRdAtomic is how many READs and atomics from the peer this side
	// holds responder resources for (0: MaxRdAtomic).
	MaxDestRdAtomic uint8
}

// RNRTimer655ms asks ConnectOptions for IBA table 45's code 0, the
// longest RNR NAK timer (655.36 ms), which MinRNRTimer's zero value
// cannot name. The kernel's CM gives an RC QP's RTR that code
// (cm_init_qp_rtr_attr), so rdma_cm programs that post their receives
// late still meet their sends.
const RNRTimer655ms = 0x20

func (o *ConnectOptions) defaults() {
	def := func(v *uint8, d uint8) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Timeout, 14)
	def(&o.RetryCnt, 7)
	def(&o.RNRRetry, 7)
	if o.MinRNRTimer == RNRTimer655ms {
		o.MinRNRTimer = 0
	} else {
		def(&o.MinRNRTimer, 12)
	}
	def(&o.MaxRdAtomic, MaxRdAtomic)
	def(&o.MaxDestRdAtomic, MaxRdAtomic)
	if o.QKey == 0 {
		o.QKey = DefaultQKey
	}
}

// Connect moves q from RESET to RTS: INIT with o's access flags (UD: the
// Q_Key), RTR towards remote (RC, UC: its QPN, first PSN and GID as the
// destination, from local's GID as the source, the path MTU the smaller
// of both endpoints' and o.PathMTU), then RTS sending from local's PSN.
// local is what LocalEndpoint returned (and what the peer was sent). If a
// step fails, the error names the transition and why, and a QP Connect
// moved out of RESET goes back to it, so the caller may fix the cause and
// try again. A UD QP has no one peer: remote is not used, and sends name
// theirs with an address handle (AHAttr).
func (d *Device) Connect(q *QP, local, remote Endpoint, o ConnectOptions) error {
	if err := d.owns(q); err != nil {
		return err
	}
	fail := func(err error) error {
		return fmt.Errorf("device: connect %v: %w", q, err)
	}
	if local.QPN != q.QPN() {
		return fail(fmt.Errorf("the local endpoint is QP 0x%06x's", local.QPN))
	}
	steps, err := d.ConnectSteps(q.Type(), local, remote, o)
	if err != nil {
		return fail(err)
	}
	for i, s := range steps {
		if err := q.Modify(&s.Attr, s.Mask); err != nil {
			if i > 0 {
				q.Modify(&QPAttr{State: Reset}, AttrState)
			}
			return fail(fmt.Errorf("to %v: %w", s.Attr.State, err))
		}
	}
	return nil
}

// ConnectStep is one Modify of Connect: the attributes and their mask.
type ConnectStep struct {
	Attr QPAttr     // the state the step moves to and its attributes
	Mask QPAttrMask // which of Attr's fields the step sets
}

// ConnectSteps returns the three Modify calls (INIT, RTR, RTS) by which
// Connect brings a QP of type t from RESET to RTS towards remote, without
// a QP: for one that its owner moves itself, as a librdmacm program moves
// the QP it connects through rdma_init_qp_attr.
func (d *Device) ConnectSteps(t QPType, local, remote Endpoint, o ConnectOptions) ([3]ConnectStep, error) {
	o.defaults()
	init := QPAttr{State: Init, PortNum: 1, AccessFlags: o.Access, QKey: o.QKey}
	rtr := QPAttr{State: RTR}
	rts := QPAttr{State: RTS, SQPSN: local.PSN, Timeout: o.Timeout, RetryCnt: o.RetryCnt,
		RNRRetry: o.RNRRetry, MaxRdAtomic: o.MaxRdAtomic}
	initMask := AttrState | AttrPKeyIndex | AttrPort
	rtrMask, rtsMask := AttrState, AttrState|AttrSQPSN
	switch t {
	case UD:
		initMask |= AttrQKey
	case RC, UC, XRCIni, XRCTgt:
		av, err := d.AHAttr(local, remote)
		if err != nil {
			return [3]ConnectStep{}, err
		}
		mtu := min(local.MTU, remote.MTU)
		if o.PathMTU != 0 {
			mtu = min(mtu, o.PathMTU)
		}
		if !mtu.Valid() {
			return [3]ConnectStep{}, fmt.Errorf("no valid path MTU: local %d, remote %d, bound %d (want 1..5)", local.MTU, remote.MTU, o.PathMTU)
		}
		if remote.QPN > bth.PSNMask || remote.PSN > bth.PSNMask {
			return [3]ConnectStep{}, fmt.Errorf("remote QPN 0x%x or PSN 0x%x exceeds 24 bits", remote.QPN, remote.PSN)
		}
		initMask |= AttrAccessFlags
		rtr.AH, rtr.PathMTU, rtr.DestQPN, rtr.RQPSN = av, mtu, remote.QPN, remote.PSN
		rtrMask |= AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN
		// The masks ibv_modify_qp requires: RC's both halves; an XRC
		// initiator RC's sending half, a target its receiving half.
		if t == RC || t == XRCTgt {
			rtr.MaxDestRdAtomic, rtr.MinRNRTimer = o.MaxDestRdAtomic, o.MinRNRTimer
			rtrMask |= AttrMaxDestRdAtomic | AttrMinRNRTimer
			rtsMask |= AttrTimeout
		}
		if t == RC || t == XRCIni {
			rtsMask |= AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic
		}
	}
	return [3]ConnectStep{{init, initMask}, {rtr, rtrMask}, {rts, rtsMask}}, nil
}

// AHAttr returns the address vector from local to remote: remote's GID as
// the destination, the index of local's GID in the device's table as the
// source. Connect uses it for an RC or UC QP's path; a UD sender passes it
// to CreateAH.
func (d *Device) AHAttr(local, remote Endpoint) (AHAttr, error) {
	if remote.GID.IsZero() {
		return AHAttr{}, errors.New("the remote endpoint has no GID")
	}
	i, ok := d.GIDIndex(local.GID.Addr())
	if !ok {
		return AHAttr{}, fmt.Errorf("the local endpoint's GID %v is not in the device's GID table %v", local.GID, d.gids)
	}
	return AHAttr{DGID: remote.GID, SGIDIndex: i, PortNum: 1}, nil
}

// The text form of an Endpoint, one line of five fields in a fixed order:
// "lid=0 qpn=0x000011 psn=0x3a5c21 gid=::ffff:192.0.2.1 mtu=1024".
var endpointKeys = [...]string{"lid", "qpn", "psn", "gid", "mtu"}

// String returns e's text form, which ParseEndpoint reads back.
func (e Endpoint) String() string {
	return fmt.Sprintf("lid=%d qpn=0x%06x psn=0x%06x gid=%v mtu=%d", e.LID, e.QPN, e.PSN, e.GID, e.MTU.Bytes())
}

// MarshalText returns e's text form (encoding.TextMarshaler).
func (e Endpoint) MarshalText() ([]byte, error) { return []byte(e.String()), nil }

// UnmarshalText parses the text form (encoding.TextUnmarshaler).
func (e *Endpoint) UnmarshalText(b []byte) error {
	x, err := ParseEndpoint(string(b))
	if err != nil {
		return err
	}
	*e = x
	return nil
}

// ParseEndpoint parses an endpoint's text form (Endpoint.String). The five
// fields come in String's order; numbers may be decimal or 0x-prefixed
// hex, the GID any form netip.ParseAddr reads (an IPv4 address stands for
// its IPv4-mapped GID), the MTU one of 256, 512, 1024, 2048, 4096.
func ParseEndpoint(s string) (Endpoint, error) {
	fail := func(format string, a ...any) (Endpoint, error) {
		return Endpoint{}, fmt.Errorf("device: endpoint %q: "+format, append([]any{s}, a...)...)
	}
	fields := strings.Fields(s)
	if len(fields) != len(endpointKeys) {
		return fail("%d fields, want lid= qpn= psn= gid= mtu=", len(fields))
	}
	var v [len(endpointKeys)]string
	for i, f := range fields {
		k, val, ok := strings.Cut(f, "=")
		if !ok || k != endpointKeys[i] {
			return fail("field %d is %q, want %s=", i+1, f, endpointKeys[i])
		}
		v[i] = val
	}
	var e Endpoint
	lid, err := strconv.ParseUint(v[0], 0, 16)
	if err != nil {
		return fail("bad lid %q", v[0])
	}
	qpn, err := strconv.ParseUint(v[1], 0, 24)
	if err != nil {
		return fail("bad qpn %q (24 bits)", v[1])
	}
	psn, err := strconv.ParseUint(v[2], 0, 24)
	if err != nil {
		return fail("bad psn %q (24 bits)", v[2])
	}
	a, err := netip.ParseAddr(v[3])
	if err != nil || a.Zone() != "" {
		return fail("bad gid %q", v[3])
	}
	mtu, err := strconv.Atoi(v[4])
	e.MTU = mtuOfBytes(mtu)
	if err != nil || e.MTU == 0 {
		return fail("bad mtu %q (256, 512, 1024, 2048 or 4096)", v[4])
	}
	e.LID, e.QPN, e.PSN, e.GID = uint16(lid), uint32(qpn), uint32(psn), bth.GIDFromAddr(a)
	return e, nil
}

// mtuOfBytes returns the MTU enum of a size in bytes, 0 if it is none.
func mtuOfBytes(n int) MTU {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m
		}
	}
	return 0
}

// EndpointLen is the size of an endpoint's binary form: a version byte
// (1), the MTU enum, the LID, QPN and PSN big-endian (2, 4, 4 bytes), the
// GID (16 bytes).
const EndpointLen = 28

const endpointVersion = 1

// MarshalBinary returns e's binary form (encoding.BinaryMarshaler).
func (e Endpoint) MarshalBinary() ([]byte, error) {
	b := make([]byte, EndpointLen)
	b[0], b[1] = endpointVersion, byte(e.MTU)
	binary.BigEndian.PutUint16(b[2:], e.LID)
	binary.BigEndian.PutUint32(b[4:], e.QPN)
	binary.BigEndian.PutUint32(b[8:], e.PSN)
	copy(b[12:], e.GID[:])
	return b, nil
}

// UnmarshalBinary parses the binary form (encoding.BinaryUnmarshaler): it
// accepts exactly what MarshalBinary makes of an endpoint with a valid MTU
// and 24-bit QPN and PSN.
func (e *Endpoint) UnmarshalBinary(b []byte) error {
	if len(b) != EndpointLen {
		return fmt.Errorf("device: endpoint: %d bytes, want %d", len(b), EndpointLen)
	}
	if b[0] != endpointVersion {
		return fmt.Errorf("device: endpoint: version %d, want %d", b[0], endpointVersion)
	}
	x := Endpoint{MTU: MTU(b[1]), LID: binary.BigEndian.Uint16(b[2:]),
		QPN: binary.BigEndian.Uint32(b[4:]), PSN: binary.BigEndian.Uint32(b[8:]), GID: bth.GID(b[12:])}
	if !x.MTU.Valid() {
		return fmt.Errorf("device: endpoint: MTU enum %d, want 1..5", b[1])
	}
	if x.QPN > bth.PSNMask || x.PSN > bth.PSNMask {
		return fmt.Errorf("device: endpoint: QPN 0x%x or PSN 0x%x exceeds 24 bits", x.QPN, x.PSN)
	}
	*e = x
	return nil
}
