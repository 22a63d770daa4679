// Package hook hands goroce's engine the operations of the verbs packages
// (mr, cq, qp) that only the engine calls, so that they stay off those
// packages' public surface: go doc of a verbs package shows the verbs and
// nothing else, and a program cannot create a QP outside a device or
// destroy one behind its device's back.
//
// Each verbs package stores its engine-only functions here in an init
// function. Each package that calls them (qp and device) converts each,
// once, to the function type its comment gives, in a package-level
// variable, and calls that: a direct call through a typed function value,
// with no interface or allocation on the data path. The slots are untyped
// because those types name the verbs packages, which import this one; a
// slot whose type does not match panics when the program starts.
package hook

import (
	"sync"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/dcqcn"
	"github.com/goroce/goroce/nic"
)

// Env is what a QP needs from the device it lives on; the device fills it
// in and passes it to NewQP and NewAH. Its type parameters are package
// qp's QP, MTU and Clock: qp and device both name it as
// Env[qp.QP, qp.MTU, qp.Clock], so its fields are typed where they are
// used, as when it was qp.Env. What it reports (counts, events) it
// reports in its own types, so that they are the device's, not qp's.
type Env[QP, MTU, Clock any] struct {
	Link     nic.Link // where packets go
	Counters Counters // the device's protocol counters that a QP counts
	// GID returns the local GID at a GID-table index.
	GID func(index uint8) (bth.GID, bool)
	// Schedule asks the device to run the QP later, from its worker: the
	// QP has more to send than one run may do at once.
	Schedule func(*QP)
	// Event delivers an asynchronous event affiliated with a QP, and its
	// cause when known (nil: not reported).
	Event func(q *QP, e QPEvent, err error)
	// Died, if set, learns that a QP entered ERR and why: why is the QP's
	// *qp.Death, called under the QP's lock (so it must not call back
	// into the QP).
	Died func(q *QP, why error)
	// Atomic serializes atomic operations on the device's memory, which
	// must be atomic with respect to each other across all QPs (IBA 9.4.5).
	Atomic *sync.Mutex
	// MaxMTU is the largest path MTU the link carries.
	MaxMTU MTU
	// Window bounds the unacknowledged packets an RC requester keeps in
	// flight (0: qp.DefaultWindow).
	Window int
	// Trace, if set, sees every packet the QP sends, after it is sealed.
	Trace func(out bool, datagram []byte)
	// Clock drives the QP's timers (nil: qp.RealClock).
	Clock Clock
	// ECT marks the QP's packets ECN-capable, ECT(0), as mlx5 does with
	// congestion control on (qp/congestion.go).
	ECT bool
	// CC, if set, is DCQCN on: the QP answers CE-marked packets with
	// CNPs and paces its requests by the CNPs it receives, with these
	// parameters; nil is off (CNPs received are counted and ignored).
	CC *dcqcn.Params
}

// Set by package mr.
var (
	NewKeys        any // func() (allocPD func() *mr.PD, owns func(*mr.PD) bool, closeKeys func())
	HoldPD         any // func(*mr.PD)
	ReleasePD      any // func(*mr.PD)
	ClosedPD       any // func(*mr.PD) bool
	LocalAccess    any // func(pd *mr.PD, lkey uint32, addr uint64, n uint32, need mr.Access) ([]byte, *mr.MR, error)
	RemoteAccess   any // func(pd *mr.PD, qp any, rkey uint32, addr uint64, n uint32, need mr.Access) ([]byte, *mr.MR, error)
	EndAccess      any // func(*mr.MR)
	InvalidateRKey any // func(pd *mr.PD, qp any, rkey uint32, remote bool) error
	BindMW         any // func(pd *mr.PD, qp any, w *mr.MW, type1 bool, rkey uint32, b mr.BindInfo) error
	NextType1Key   any // func(*mr.MW) (uint32, error)
	RegFast        any // func(pd *mr.PD, m *mr.MR, r mr.RegInfo) error
)

// Set by package cq.
var (
	NewCQ      any // func(depth int, onError func(*cq.CQ, error)) *cq.CQ
	PushCQ     any // func(c *cq.CQ, wc cq.WC, solicited bool) (ok bool)
	ShutdownCQ any // func(c *cq.CQ, err error)
	// MirrorCQ keeps *p equal to the queue's length (^0 once it has an
	// error) until called with nil: libgoroce's C poll reads it to answer
	// an empty queue without a call into Go.
	MirrorCQ any // func(c *cq.CQ, p *uint32)
	// ProgressCQ gives a new queue, before anyone polls it, what an empty
	// Poll calls to receive and handle what has arrived (the device's
	// poll mode; it returns whether it handled anything), and the yield
	// period of the loops that poll it (CQ.Yield).
	ProgressCQ any // func(c *cq.CQ, progress func() bool, yieldEvery int)
)

// Set by package qp.
var (
	NewQP      any // func(env *Env[qp.QP, qp.MTU, qp.Clock], pd *mr.PD, qpn uint32, ia qp.InitAttr) (*qp.QP, error)
	NewSRQ     any // func(pd *mr.PD, attr qp.SRQAttr, limitReached func(*qp.SRQ)) (*qp.SRQ, error)
	NewXRCD    any // func(closed func() bool, lookup func(srqn uint32) *qp.SRQ) *qp.XRCD
	NewXRCSRQ  any // func(pd *mr.PD, ia qp.SRQInitAttr, srqn uint32, limitReached func(*qp.SRQ), unregister func()) (*qp.SRQ, error)
	NewAH      any // func(env *Env[qp.QP, qp.MTU, qp.Clock], pd *mr.PD, attr qp.AHAttr) (*qp.AH, error)
	DestroyQP  any // func(*qp.QP) error
	ShutdownQP any // func(*qp.QP)
	RunQP      any // func(*qp.QP)
	ReceiveQP  any // func(q *qp.QP, p bth.Packet, f bth.Frame) (joined bool)
	EndBurstQP any // func(*qp.QP)
	CNPQP      any // func(*qp.QP): a CNP arrived for the QP
)

// Set by package device, for package cm: the device's QP1, the General
// Services Interface the connection manager sends and receives its MADs
// through.
var (
	// AttachGSI installs the one handler of a device's QP1 MADs; it is
	// called from the receive path with a MAD valid only during the call.
	AttachGSI any // func(d *device.Device, h func(src, dst netip.Addr, mad []byte)) (detach func(), err error)
	// SendGSI sends a 256-byte MAD from QP1 at src to QP1 at dst.
	SendGSI any // func(d *device.Device, src, dst netip.Addr, mad []byte) error
)
