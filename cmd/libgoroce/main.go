// Command libgoroce is goroce's engine behind bin/libgoroce.so, a library
// that answers libibverbs' calls with it, so that unmodified RDMA programs
// run on a host with no RDMA NIC:
//
//	export LD_PRELOAD=$PWD/bin/libgoroce.so GOROCE_NETDEV=eth0
//	ibv_devinfo -v
//
// GOROCE_NETDEV is a comma-separated list of interfaces (or local
// addresses, as roced's -d takes them); each becomes a device goroce0,
// goroce1, ... with the GID table rxe would build on it.
//
// verbs.c defines the ibv_* functions against the system's
// <infiniband/verbs.h>, with the symbol versions of libibverbs.map, and
// calls the goroce_* functions below; this is the only package of goroce
// that uses cgo. scripts/build-libgoroce.sh builds verbs.c and cma.c, with
// front.c, into libgoroce.so as plain C, and this package with the
// goroce_engine tag (engine.c in their place) into libgoroce-engine.so
// beside it, which libgoroce.so loads at its first goroce_* call: loading
// libgoroce.so starts no Go runtime, so a program may fork() first
// (front.c says what a child forked later gets). Every object a program holds is C memory; the Go objects
// behind it are named by cgo handles, so C memory never holds a Go pointer.
// Work requests and completions cross as flat records (shim.h).
package main

/*
#cgo CFLAGS: -O2 -Wall
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime/cgo"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"github.com/goroce/goroce/internal/endpoint"
	"github.com/goroce/goroce/transport"
	"golang.org/x/sys/unix"
)

func main() {}

// GQ_MAX_INLINE (shim.h) is transport.MaxInline: this does not compile otherwise.
var _ = [1]struct{}{}[C.GQ_MAX_INLINE-transport.MaxInline]

// netdevEntry is one entry of GOROCE_NETDEV.
type netdevEntry struct {
	name string       // the interface or address as GOROCE_NETDEV gives it
	guid [8]byte      // the node GUID: the EUI-64 of the interface's MAC, as rxe's
	dev  endpoint.Dev // the interface and its GID table (sysfs.go's tree says them)
	err  error        // why the interface could not be looked up
}

var (
	devsOnce sync.Once
	devs     []netdevEntry
)

// devices parses GOROCE_NETDEV once.
func devices() []netdevEntry {
	devsOnce.Do(func() {
		for _, n := range strings.Split(os.Getenv("GOROCE_NETDEV"), ",") {
			n = strings.TrimSpace(n)
			if n == "" {
				continue
			}
			d := netdevEntry{name: n}
			if ld, err := endpoint.LookupDev(n); err != nil {
				d.err = err
			} else {
				d.dev = ld
				if len(ld.GIDs) > 0 && !ld.GIDs[0].Empty() {
					copy(d.guid[:], ld.GIDs[0].GID[8:])
				}
			}
			devs = append(devs, d)
		}
	})
	return devs
}

// devctx is an open device (ibv_context).
type devctx struct {
	ep  *endpoint.Endpoint
	dev *transport.Device

	mu  sync.Mutex
	cqs map[*cqueue]struct{} // the CQs with a completion channel
	// The asynchronous events: the device's, each with its object's C
	// struct (elems: a *transport.QP, *transport.SRQ or *transport.CQ to its ibv_qp, ibv_srq or
	// ibv_cq), queued for ibv_get_async_event with one count on asyncFD
	// each.
	elems   map[any]uintptr
	evq     []asyncEvent
	asyncFD int
	od      *openDev // the device, shared with the process's other contexts on it
}

type srqueue struct {
	ctx *devctx
	srq *transport.SRQ
}

type asyncEvent struct {
	typ  transport.EventType
	elem uintptr
}

// maxAsyncEvents bounds the events a program has not read: past it they
// are dropped, as the kernel's async event queue drops them.
const maxAsyncEvents = 1024

// openDev is a device open in this process: one engine (endpoint) for
// every context a program opens on it, as one RDMA device serves every
// ibv_context of it. librdmacm opens each device for itself (cma.c) while
// the program may open it too (perftest -R); a QP of either context must
// be one the device's connection manager can connect.
type openDev struct {
	index  int
	ep     *endpoint.Endpoint
	mu     sync.Mutex
	ctxs   map[*devctx]bool // the open contexts, which forwardEvents serves
	evDone chan struct{}    // closed when forwardEvents has returned
	// board, in poll mode over sockets, is what the C side's empty poll
	// reads instead of calling into Go (shim.h); in C memory, freed
	// after the device closes. nil: the poll calls in.
	board *C.struct_gq_pollboard
}

// newBoard returns the poll board of a device in poll mode whose link has
// descriptors to watch (at most GQ_POLL_FDS of them), kept by the device;
// else nil.
func newBoard(d *transport.Device) *C.struct_gq_pollboard {
	fds := d.PollFDs()
	if !d.PollMode() || len(fds) == 0 || len(fds) > C.GQ_POLL_FDS {
		return nil
	}
	b := (*C.struct_gq_pollboard)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_gq_pollboard{}))))
	b.nfd = C.int(len(fds))
	for i, fd := range fds {
		b.fds[i].fd, b.fds[i].events = C.int(fd), C.POLLIN
	}
	d.SetPollBusy((*uint32)(unsafe.Pointer(&b.busy)))
	return b
}

// opened are the open devices by GOROCE_NETDEV index.
var opened struct {
	sync.Mutex
	devs map[int]*openDev
}

// forwardEvents queues each of the device's events on the contexts it is
// for, until the device closes: an object's on the context holding the
// object (none: it is destroyed, and the event with it), the device's
// own on every context.
func (od *openDev) forwardEvents() {
	defer close(od.evDone)
	for e := range od.ep.Device.Events() {
		od.mu.Lock()
		for c := range od.ctxs {
			c.queueEvent(e)
		}
		od.mu.Unlock()
	}
}

// queueEvent queues e for ibv_get_async_event if it is c's. Called with
// c.od.mu held, so that a closed context's fd is never written.
func (c *devctx) queueEvent(e transport.Event) {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	c.mu.Lock()
	var elem uintptr
	mine := true
	switch {
	case e.QP != nil:
		elem, mine = c.elems[e.QP]
	case e.SRQ != nil:
		elem, mine = c.elems[e.SRQ]
	case e.CQ != nil:
		elem, mine = c.elems[e.CQ]
	}
	queued := mine && len(c.evq) < maxAsyncEvents
	if queued {
		c.evq = append(c.evq, asyncEvent{e.Type, elem})
	}
	c.mu.Unlock()
	if queued {
		unix.Write(c.asyncFD, one[:])
	}
}

// element records (or, with 0, forgets) the C struct of a verbs object,
// for the events that name it.
func (c *devctx) element(obj any, cstruct uintptr) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cstruct == 0 {
		delete(c.elems, obj)
		return
	}
	c.elems[obj] = cstruct
}

type pd struct {
	ctx *devctx
	pd  *transport.PD
}

type region struct{ mr *transport.MR }

type cqueue struct {
	ctx *devctx
	cq  *transport.CQ
}

// unfeed stops the CQ's events feeding its completion channel, if it has
// one and they still do: once it returns, none is being written.
func (c *cqueue) unfeed() {
	c.ctx.mu.Lock()
	_, fed := c.ctx.cqs[c]
	delete(c.ctx.cqs, c)
	c.ctx.mu.Unlock()
	if fed {
		c.cq.SetEventHook(nil)
	}
}

type qpair struct {
	ctx *devctx
	pd  *transport.PD
	qp  *transport.QP
	// sendSGL holds a send's SGEs while PostSend copies them: qp keeps
	// the work request in its queue, so a list on goroce_post_send's stack
	// would be moved to the heap at every post. Several threads may post
	// to one QP, hence the lock.
	sendMu  sync.Mutex
	sendSGL [transport.MaxSGE]transport.SGE
	// staged is a region of the QP's PD that inline data no region
	// covers (ibv_wr_set_inline_data) passes through: the engine copies
	// an inline send at post time, so one post's worth is enough. Made at
	// the first such post, under sendMu.
	staged *transport.MR
	// noSend and noRecv: the program asked for a queue of 0 work requests
	// (qperf's bandwidth tests: the client receives nothing, the server
	// sends nothing). rxe and mlx5 accept that and refuse every post to
	// the queue (ENOMEM: full); the engine wants room for one, which it
	// gets, and which these keep out of reach.
	noSend, noRecv bool
}

func handle[T any](h C.uintptr_t) T { return cgo.Handle(h).Value().(T) }

// errno maps an error of goroce's verbs to the errno libibverbs gives.
func errno(err error) C.int {
	if err == nil {
		return 0 // before e, which errors.As puts on the heap
	}
	var e syscall.Errno
	switch {
	case errors.As(err, &e):
		return C.int(e)
	case errors.Is(err, transport.ErrNoMem), errors.Is(err, transport.ErrTableFull):
		return C.int(syscall.ENOMEM)
	case errors.Is(err, transport.ErrBusy), errors.Is(err, transport.ErrPDBusy):
		return C.int(syscall.EBUSY)
	case errors.Is(err, transport.ErrClosed):
		return C.int(syscall.EIO)
	}
	return C.int(syscall.EINVAL)
}

//export goroce_ndev
func goroce_ndev() C.int { return C.int(len(devices())) }

//export goroce_dev_guid
func goroce_dev_guid(i C.int, out *C.uint8_t) {
	d := devices()
	if int(i) < len(d) {
		copy(unsafe.Slice((*byte)(out), 8), d[i].guid[:])
	}
}

//export goroce_open
func goroce_open(i C.int, asyncFD C.int, h *C.uintptr_t) C.int {
	d := devices()
	if int(i) >= len(d) {
		return C.int(syscall.ENODEV)
	}
	if d[i].err != nil {
		fmt.Fprintf(os.Stderr, "libgoroce: goroce%d (%s): %v\n", i, d[i].name, d[i].err)
		return C.int(syscall.ENODEV)
	}
	opened.Lock()
	defer opened.Unlock()
	od := opened.devs[int(i)]
	if od == nil {
		ep, err := endpoint.Open(endpoint.Config{Dev: d[i].name, GID: -1, AllGIDs: true, LeaveNetpoll: true, PollByDefault: true})
		if err != nil {
			fmt.Fprintf(os.Stderr, "libgoroce: goroce%d (%s): %v\n", i, d[i].name, err)
			return C.int(syscall.ENODEV)
		}
		od = &openDev{index: int(i), ep: ep, ctxs: map[*devctx]bool{}, evDone: make(chan struct{}), board: newBoard(ep.Device)}
		if opened.devs == nil {
			opened.devs = map[int]*openDev{}
		}
		opened.devs[int(i)] = od
		go od.forwardEvents()
	}
	c := &devctx{ep: od.ep, dev: od.ep.Device, elems: map[any]uintptr{}, asyncFD: int(asyncFD), od: od}
	od.mu.Lock()
	od.ctxs[c] = true
	od.mu.Unlock()
	*h = C.uintptr_t(cgo.NewHandle(c))
	return 0
}

//export goroce_async_event
func goroce_async_event(h C.uintptr_t, typ *C.uint32_t, elem *C.uintptr_t) C.int {
	c := handle[*devctx](h)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.evq) == 0 {
		return C.int(syscall.EAGAIN)
	}
	e := c.evq[0]
	c.evq = c.evq[1:]
	*typ, *elem = C.uint32_t(e.typ), C.uintptr_t(e.elem)
	return 0
}

//export goroce_close
func goroce_close(h C.uintptr_t) C.int {
	c := handle[*devctx](h)
	cgo.Handle(h).Delete()
	// A program may close the device with CQs left: stop feeding their
	// channels first, since closing the device wakes them one last time
	// and the program may free a channel once the device is closed.
	c.mu.Lock()
	cqs := make([]*cqueue, 0, len(c.cqs))
	for q := range c.cqs {
		cqs = append(cqs, q)
	}
	c.mu.Unlock()
	for _, q := range cqs {
		q.unfeed()
	}
	// Once out of the device's contexts nothing writes c.asyncFD; the
	// last context closes the device.
	od := c.od
	opened.Lock()
	od.mu.Lock()
	delete(od.ctxs, c)
	last := len(od.ctxs) == 0
	od.mu.Unlock()
	if last {
		delete(opened.devs, od.index)
	}
	opened.Unlock()
	if last {
		od.ep.Device.SetPollBusy(nil)
		od.ep.Close()
		<-od.evDone
		C.free(unsafe.Pointer(od.board))
	}
	return 0
}

// gidTableLen is the port's GID table length as rxe reports it
// (RXE_PORT_GID_TBL_LEN): the entries past the device's own addresses are
// empty slots, which programs probe (rdma-core's
// test_query_gid_ex_bad_flow wants one to query and get ENODATA).
const gidTableLen = 1024

// gidTable is the device's GID table length: rxe's, or more if the
// device has more addresses.
func gidTable(d *devctx) int { return max(gidTableLen, len(d.dev.GIDs())) }

//export goroce_port
func goroce_port(h C.uintptr_t, mtu, ngids *C.int) {
	c := handle[*devctx](h)
	*mtu = C.int(c.dev.ActiveMTU())
	*ngids = C.int(gidTable(c))
}

//export goroce_gid
func goroce_gid(h C.uintptr_t, index C.int, raw *C.uint8_t) C.int {
	// An empty slot (loopback's link-local GID, or any past the device's
	// addresses) reads as zeros, as an unset entry of a kernel GID table
	// does; past the table, EINVAL.
	d := handle[*devctx](h)
	if index < 0 || int(index) >= gidTable(d) {
		return C.int(syscall.EINVAL)
	}
	g := unsafe.Slice((*byte)(raw), 16)
	clear(g)
	if t := d.dev.GIDs(); int(index) < len(t) {
		copy(g, t[index][:])
	}
	return 0
}

//export goroce_alloc_pd
func goroce_alloc_pd(ctx C.uintptr_t, h *C.uintptr_t) C.int {
	c := handle[*devctx](ctx)
	*h = C.uintptr_t(cgo.NewHandle(&pd{ctx: c, pd: c.dev.AllocPD()}))
	return 0
}

//export goroce_dealloc_pd
func goroce_dealloc_pd(h C.uintptr_t) C.int {
	if err := handle[*pd](h).pd.Dealloc(); err != nil {
		return errno(err)
	}
	cgo.Handle(h).Delete()
	return 0
}

// Access bits goroce implements (the low six of enum ibv_access_flags),
// and the optional ones (IBV_ACCESS_OPTIONAL_RANGE, relaxed ordering) a
// device may ignore.
const (
	accessKnown    = 0x3f
	accessHugeTLB  = 1 << 7
	accessOptional = 0x3ff << 20
)

//export goroce_reg_mr
func goroce_reg_mr(h C.uintptr_t, addr unsafe.Pointer, length C.size_t, iova C.uint64_t, access C.uint, out *C.uintptr_t, lkey, rkey *C.uint32_t) C.int {
	a := uint32(access) &^ (accessHugeTLB | accessOptional)
	if a&^accessKnown != 0 {
		return C.int(syscall.EOPNOTSUPP) // on-demand paging and the like
	}
	if addr == nil || length == 0 {
		return C.int(syscall.EINVAL)
	}
	// The program's memory, viewed from Go: goroce reads and writes it in
	// place. It is C memory, so the garbage collector never moves it.
	buf := unsafe.Slice((*byte)(addr), int(length))
	m, err := handle[*pd](h).pd.RegisterIOVA(buf, uint64(iova), transport.Access(a))
	if err != nil {
		return errno(err)
	}
	*lkey, *rkey = C.uint32_t(m.LKey()), C.uint32_t(m.RKey())
	*out = C.uintptr_t(cgo.NewHandle(&region{mr: m}))
	return 0
}

//export goroce_dereg_mr
func goroce_dereg_mr(h C.uintptr_t) C.int {
	if err := handle[*region](h).mr.Dereg(); err != nil {
		return errno(err)
	}
	cgo.Handle(h).Delete()
	return 0
}

//export goroce_create_cq
func goroce_create_cq(ctx C.uintptr_t, cqe C.int, ch *C.struct_gq_channel, ccq *C.struct_ibv_cq, out *C.uintptr_t, depth *C.int) C.int {
	if cqe < 1 || cqe > transport.MaxWR {
		return C.int(syscall.EINVAL)
	}
	d := handle[*devctx](ctx)
	c := &cqueue{ctx: d, cq: d.dev.CreateCQ(int(cqe))}
	d.element(c.cq, uintptr(unsafe.Pointer(ccq)))
	// ccq is the start of its gq_cq, whose pending the queue keeps.
	c.cq.SetMirror((*uint32)(unsafe.Pointer(&(*C.struct_gq_cq)(unsafe.Pointer(ccq)).pending)))
	if d.dev.PollMode() {
		(*C.struct_gq_cq)(unsafe.Pointer(ccq)).poll_mode = 1
		(*C.struct_gq_cq)(unsafe.Pointer(ccq)).board = d.od.board
	}
	if ch != nil {
		// Each event of the CQ (one per ReqNotify that fired) becomes one
		// entry of the channel and one count on its eventfd, written by
		// the thread that pushed the completion: a goroutine fed by
		// Events cost a wake-up per event (ibv_rc_pingpong -e).
		d.mu.Lock()
		if d.cqs == nil {
			d.cqs = make(map[*cqueue]struct{})
		}
		d.cqs[c] = struct{}{}
		d.mu.Unlock()
		c.cq.SetEventHook(func() { C.gq_channel_push(ch, ccq) })
	}
	*depth = C.int(c.cq.Depth())
	*out = C.uintptr_t(cgo.NewHandle(c))
	return 0
}

//export goroce_destroy_cq
func goroce_destroy_cq(h C.uintptr_t) C.int {
	c := handle[*cqueue](h)
	// EBUSY while a QP still completes on it, as libibverbs' providers
	// answer; then the device forgets the CQ, so a program that creates
	// and destroys CQs does not grow.
	if err := c.ctx.dev.DestroyCQ(c.cq); err != nil {
		return errno(err)
	}
	c.ctx.element(c.cq, 0)
	c.cq.SetMirror(nil) // the C struct is freed next
	c.unfeed()
	cgo.Handle(h).Delete()
	return 0
}

//export goroce_resize_cq
func goroce_resize_cq(h C.uintptr_t, cqe C.int, depth *C.int) C.int {
	if cqe < 1 || cqe > transport.MaxWR {
		return C.int(syscall.EINVAL)
	}
	c := handle[*cqueue](h)
	if err := c.cq.Resize(int(cqe)); err != nil {
		if errors.Is(err, transport.ErrTooShallow) {
			return C.int(syscall.EINVAL) // rxe_cq_chk_attr: cqe < queue count
		}
		return errno(err)
	}
	*depth = C.int(c.cq.Depth())
	return 0
}

//export goroce_req_notify_cq
func goroce_req_notify_cq(h C.uintptr_t, solicited C.int) C.int {
	handle[*cqueue](h).cq.ReqNotify(solicited != 0)
	return 0
}

//export goroce_poll_cq
func goroce_poll_cq(h C.uintptr_t, n C.int, out *C.struct_gq_wc) C.int {
	var wcs [16]transport.WC
	if n > C.int(len(wcs)) {
		n = C.int(len(wcs))
	}
	got, err := handle[*cqueue](h).cq.Poll(wcs[:n])
	if got == 0 && err != nil {
		return -1
	}
	dst := unsafe.Slice(out, got)
	for i, w := range wcs[:got] {
		dst[i] = C.struct_gq_wc{
			wr_id: C.uint64_t(w.WRID), status: C.uint32_t(w.Status), opcode: C.uint32_t(w.Opcode),
			vendor_err: C.uint32_t(w.VendorErr), byte_len: C.uint32_t(w.ByteLen),
			qp_num: C.uint32_t(w.QPNum), src_qp: C.uint32_t(w.SrcQP), wc_flags: C.uint32_t(w.Flags),
			pkey_index: C.uint16_t(w.PKeyIndex), slid: C.uint16_t(w.SLID),
			sl: C.uint8_t(w.SL), dlid_path_bits: C.uint8_t(w.DLIDPathBits),
		}
		switch {
		case w.Flags&transport.WithImm != 0:
			dst[i].imm = C.uint32_t(w.ImmData)
		case w.Flags&transport.WithInv != 0:
			dst[i].imm = C.uint32_t(w.InvalidatedRKey)
		}
	}
	return C.int(got)
}

//export goroce_create_qp
func goroce_create_qp(h C.uintptr_t, in *C.struct_gq_qp_init, cqp C.uintptr_t, out *C.uintptr_t, qpn *C.uint32_t) C.int {
	p := handle[*pd](h)
	if in.send_cq == 0 || in.recv_cq == 0 {
		return C.int(syscall.EINVAL)
	}
	ia := transport.QPInitAttr{
		Type:   transport.QPType(in._type),
		SendCQ: handle[*cqueue](in.send_cq).cq,
		RecvCQ: handle[*cqueue](in.recv_cq).cq,
		SigAll: in.sq_sig_all != 0,
		Cap: transport.QPCap{MaxSendWR: uint32(in.max_send_wr), MaxRecvWR: uint32(in.max_recv_wr),
			MaxSendSGE: uint32(in.max_send_sge), MaxRecvSGE: uint32(in.max_recv_sge),
			MaxInlineData: uint32(in.max_inline)},
	}
	if in.srq != 0 {
		ia.SRQ = handle[*srqueue](in.srq).srq
	}
	if ia.Type != transport.RC && ia.Type != transport.UC && ia.Type != transport.UD {
		return C.int(syscall.EOPNOTSUPP)
	}
	noSend, noRecv := ia.Cap.MaxSendWR == 0, ia.Cap.MaxRecvWR == 0 && ia.SRQ == nil
	ia.Cap.MaxSendWR, ia.Cap.MaxRecvWR = max(ia.Cap.MaxSendWR, 1), max(ia.Cap.MaxRecvWR, 1)
	q, err := p.ctx.dev.CreateQP(p.pd, ia)
	if err != nil {
		return errno(err)
	}
	_, got := q.Query()
	in.max_send_wr, in.max_recv_wr = C.uint32_t(got.Cap.MaxSendWR), C.uint32_t(got.Cap.MaxRecvWR)
	if noSend {
		in.max_send_wr = 0
	}
	if noRecv {
		in.max_recv_wr = 0
	}
	in.max_send_sge, in.max_recv_sge = C.uint32_t(got.Cap.MaxSendSGE), C.uint32_t(got.Cap.MaxRecvSGE)
	in.max_inline = C.uint32_t(got.Cap.MaxInlineData)
	p.ctx.element(q, uintptr(cqp))
	*qpn = C.uint32_t(q.QPN())
	*out = C.uintptr_t(cgo.NewHandle(&qpair{ctx: p.ctx, pd: p.pd, qp: q, noSend: noSend, noRecv: noRecv}))
	return 0
}

//export goroce_destroy_qp
func goroce_destroy_qp(h C.uintptr_t) C.int {
	q := handle[*qpair](h)
	if err := q.ctx.dev.DestroyQP(q.qp); err != nil {
		return errno(err)
	}
	q.ctx.element(q.qp, 0)
	if q.staged != nil {
		q.staged.Dereg() // nothing else uses it: its PD must be free to go
	}
	cgo.Handle(h).Delete()
	return 0
}

//export goroce_modify_qp
func goroce_modify_qp(h C.uintptr_t, in *C.struct_gq_qp_attr, mask C.int) C.int {
	a := transport.QPAttr{
		State: transport.QPState(in.state), CurState: transport.QPState(in.cur_state), PathMTU: transport.MTU(in.path_mtu),
		QKey: uint32(in.qkey), RQPSN: uint32(in.rq_psn), SQPSN: uint32(in.sq_psn),
		DestQPN: uint32(in.dest_qp_num), AccessFlags: transport.Access(in.access),
		PKeyIndex: uint16(in.pkey_index), EnSQDAsyncNotify: in.en_sqd_async_notify != 0,
		MaxRdAtomic: uint8(in.max_rd_atomic), MaxDestRdAtomic: uint8(in.max_dest_rd_atomic),
		MinRNRTimer: uint8(in.min_rnr_timer), PortNum: uint8(in.port_num),
		Timeout: uint8(in.timeout), RetryCnt: uint8(in.retry_cnt), RNRRetry: uint8(in.rnr_retry),
		AH: transport.AHAttr{FlowLabel: uint32(in.flow_label), SGIDIndex: uint8(in.sgid_index),
			HopLimit: uint8(in.hop_limit), TrafficClass: uint8(in.traffic_class),
			SL: uint8(in.sl), PortNum: uint8(in.port_num)},
	}
	copy(a.AH.DGID[:], unsafe.Slice((*byte)(&in.dgid[0]), 16))
	return errno(handle[*qpair](h).qp.Modify(&a, transport.QPAttrMask(mask)))
}

//export goroce_query_qp
func goroce_query_qp(h C.uintptr_t, out *C.struct_gq_qp_attr, init *C.struct_gq_qp_init) {
	q := handle[*qpair](h)
	a, ia := q.qp.Query()
	if q.noSend {
		ia.Cap.MaxSendWR = 0
	}
	if q.noRecv {
		ia.Cap.MaxRecvWR = 0
	}
	*out = qpAttrC(a)
	out.max_send_wr, out.max_recv_wr = C.uint32_t(ia.Cap.MaxSendWR), C.uint32_t(ia.Cap.MaxRecvWR)
	out.max_send_sge, out.max_recv_sge = C.uint32_t(ia.Cap.MaxSendSGE), C.uint32_t(ia.Cap.MaxRecvSGE)
	out.max_inline = C.uint32_t(ia.Cap.MaxInlineData)
	init._type = C.uint32_t(ia.Type)
	if ia.SigAll {
		init.sq_sig_all = 1
	}
	init.max_send_wr, init.max_recv_wr = out.max_send_wr, out.max_recv_wr
	init.max_send_sge, init.max_recv_sge = out.max_send_sge, out.max_recv_sge
	init.max_inline = out.max_inline
}

// qpAttrC flattens a QP's attributes (not its capacities) for C, as
// ibv_query_qp and rdma_init_qp_attr hand them over.
func qpAttrC(a transport.QPAttr) C.struct_gq_qp_attr {
	out := C.struct_gq_qp_attr{
		state: C.uint32_t(a.State), cur_state: C.uint32_t(a.State), path_mtu: C.uint32_t(a.PathMTU),
		qkey: C.uint32_t(a.QKey), rq_psn: C.uint32_t(a.RQPSN), sq_psn: C.uint32_t(a.SQPSN),
		dest_qp_num: C.uint32_t(a.DestQPN), access: C.uint32_t(a.AccessFlags),
		flow_label: C.uint32_t(a.AH.FlowLabel), sgid_index: C.uint8_t(a.AH.SGIDIndex),
		hop_limit: C.uint8_t(a.AH.HopLimit), traffic_class: C.uint8_t(a.AH.TrafficClass),
		sl: C.uint8_t(a.AH.SL), port_num: 1, pkey_index: C.uint16_t(a.PKeyIndex),
		max_rd_atomic: C.uint8_t(a.MaxRdAtomic), max_dest_rd_atomic: C.uint8_t(a.MaxDestRdAtomic),
		min_rnr_timer: C.uint8_t(a.MinRNRTimer), timeout: C.uint8_t(a.Timeout),
		retry_cnt: C.uint8_t(a.RetryCnt), rnr_retry: C.uint8_t(a.RNRRetry),
	}
	if a.EnSQDAsyncNotify {
		out.en_sqd_async_notify = 1
	}
	if a.SQDraining {
		out.sq_draining = 1
	}
	copy(unsafe.Slice((*byte)(&out.dgid[0]), 16), a.AH.DGID[:])
	return out
}

// sgl copies a C scatter/gather list into sges (qp copies it again when it
// queues the work request, so the array need not outlive the call).
func sgl(sges []transport.SGE, list *C.struct_ibv_sge, n C.uint32_t) ([]transport.SGE, bool) {
	if n == 0 {
		return nil, true
	}
	if int(n) > len(sges) {
		return nil, false
	}
	for i, s := range unsafe.Slice(list, n) {
		sges[i] = transport.SGE{Addr: uint64(s.addr), Length: uint32(s.length), LKey: uint32(s.lkey)}
	}
	return sges[:n], true
}

//export goroce_post_send
func goroce_post_send(h C.uintptr_t, w *C.struct_gq_send) C.int {
	q := handle[*qpair](h)
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	return q.post(w)
}

// goroce_post_batch posts n work requests (an ibv_wr_* batch) in one
// crossing, stopping at the first the engine refuses: the ones before it
// stay posted, as with ibv_post_send's list.
//
//export goroce_post_batch
func goroce_post_batch(h C.uintptr_t, list *C.struct_gq_send, n C.uint32_t) C.int {
	q := handle[*qpair](h)
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	ws := unsafe.Slice(list, n)
	for i := range ws {
		if rc := q.post(&ws[i]); rc != 0 {
			return rc
		}
	}
	return 0
}

// post posts one work request; q.sendMu is held.
func (q *qpair) post(w *C.struct_gq_send) C.int {
	if q.noSend {
		return C.int(syscall.ENOMEM)
	}
	var list []transport.SGE
	if w.copy != 0 {
		// Inline bytes in C memory no region covers: through the staging
		// region, which the engine copies out of before PostSend returns.
		if q.staged == nil {
			m, err := q.pd.Register(make([]byte, transport.MaxInline), transport.LocalWrite)
			if err != nil {
				return errno(err)
			}
			q.staged = m
		}
		n := int(w.copy)
		if n > transport.MaxInline {
			return C.int(syscall.EINVAL)
		}
		copy(q.staged.Bytes(), unsafe.Slice((*byte)(w.inl), n))
		q.sendSGL[0] = q.staged.SGE(0, n)
		list = q.sendSGL[:1]
	} else {
		var ok bool
		if list, ok = sgl(q.sendSGL[:], w.sge, w.num_sge); !ok {
			return C.int(syscall.EINVAL)
		}
	}
	wr := transport.SendWR{
		WRID: uint64(w.wr_id), SGL: list, Opcode: transport.WROpcode(w.opcode), Flags: transport.SendFlags(w.flags),
		Imm: uint32(w.imm), InvRKey: uint32(w.invalidate_rkey), RemoteAddr: uint64(w.remote_addr),
		RKey: uint32(w.rkey), CompareAdd: uint64(w.compare_add), Swap: uint64(w.swap),
	}
	if w.ah != 0 {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = handle[*transport.AH](w.ah), uint32(w.remote_qpn), uint32(w.remote_qkey)
	}
	if wr.Opcode == transport.WRBindMW {
		info, rc := bindInfo(w.mr, w.bind_addr, w.bind_length, w.bind_access)
		if rc != 0 {
			return rc
		}
		wr.RKey = 0
		wr.Bind = transport.MWBindWR{MW: handle[*transport.MW](w.mw), RKey: uint32(w.rkey), Info: info}
	}
	return errno(q.qp.PostSend(&wr))
}

// bindInfo is ibv_mw_bind_info's range and rights over the region mrh
// (0: none, a type 1 window's unbind).
func bindInfo(mrh C.uintptr_t, addr, length C.uint64_t, access C.uint32_t) (transport.BindInfo, C.int) {
	if uint32(access)&^accessKnown != 0 {
		return transport.BindInfo{}, C.int(syscall.EINVAL)
	}
	info := transport.BindInfo{Addr: uint64(addr), Length: uint64(length), Access: transport.Access(access)}
	if mrh != 0 {
		info.MR = handle[*region](mrh).mr
	}
	return info, 0
}

//export goroce_alloc_mw
func goroce_alloc_mw(h C.uintptr_t, typ C.int, out *C.uintptr_t, rkey *C.uint32_t) C.int {
	w, err := handle[*pd](h).pd.AllocMW(transport.MWType(typ))
	if err != nil {
		return errno(err)
	}
	*rkey = C.uint32_t(w.RKey())
	*out = C.uintptr_t(cgo.NewHandle(w))
	return 0
}

//export goroce_dealloc_mw
func goroce_dealloc_mw(h C.uintptr_t) C.int {
	if err := handle[*transport.MW](h).Dealloc(); err != nil {
		return errno(err)
	}
	cgo.Handle(h).Delete()
	return 0
}

// goroce_bind_mw binds a type 1 window through the QP (ibv_bind_mw) and
// returns the key it will answer to.
//
//export goroce_bind_mw
func goroce_bind_mw(h, mwh, mrh C.uintptr_t, addr, length C.uint64_t, access C.uint32_t, wrID C.uint64_t, flags C.uint32_t, rkey *C.uint32_t) C.int {
	info, rc := bindInfo(mrh, addr, length, access)
	if rc != 0 {
		return rc
	}
	key, err := handle[*qpair](h).qp.BindMW(handle[*transport.MW](mwh), info, uint64(wrID), transport.SendFlags(flags))
	if err != nil {
		return errno(err)
	}
	*rkey = C.uint32_t(key)
	return 0
}

//export goroce_create_srq
func goroce_create_srq(h C.uintptr_t, maxWR, maxSGE *C.uint32_t, limit C.uint32_t, csrq C.uintptr_t, out *C.uintptr_t) C.int {
	p := handle[*pd](h)
	s, err := p.ctx.dev.CreateSRQ(p.pd, transport.SRQAttr{MaxWR: uint32(*maxWR), MaxSGE: uint32(*maxSGE), SRQLimit: uint32(limit)})
	if err != nil {
		return errno(err)
	}
	p.ctx.element(s, uintptr(csrq))
	got := s.Query()
	*maxWR, *maxSGE = C.uint32_t(got.MaxWR), C.uint32_t(got.MaxSGE)
	*out = C.uintptr_t(cgo.NewHandle(&srqueue{ctx: p.ctx, srq: s}))
	return 0
}

//export goroce_modify_srq
func goroce_modify_srq(h C.uintptr_t, maxWR, limit C.uint32_t, mask C.int) C.int {
	return errno(handle[*srqueue](h).srq.Modify(transport.SRQAttr{MaxWR: uint32(maxWR), SRQLimit: uint32(limit)}, transport.SRQAttrMask(mask)))
}

//export goroce_query_srq
func goroce_query_srq(h C.uintptr_t, maxWR, maxSGE, limit *C.uint32_t) {
	a := handle[*srqueue](h).srq.Query()
	*maxWR, *maxSGE, *limit = C.uint32_t(a.MaxWR), C.uint32_t(a.MaxSGE), C.uint32_t(a.SRQLimit)
}

//export goroce_destroy_srq
func goroce_destroy_srq(h C.uintptr_t) C.int {
	s := handle[*srqueue](h)
	if err := s.srq.Destroy(); err != nil {
		return errno(err) // EBUSY while a QP uses it
	}
	s.ctx.element(s.srq, 0)
	cgo.Handle(h).Delete()
	return 0
}

//export goroce_post_srq_recv
func goroce_post_srq_recv(h C.uintptr_t, wrID C.uint64_t, list *C.struct_ibv_sge, n C.uint32_t) C.int {
	// As goroce_post_recv, and not shared with it through a function
	// value: the work request would escape to the heap on every post.
	var store [transport.MaxSGE]transport.SGE
	sg, ok := sgl(store[:], list, n)
	if !ok {
		return C.int(syscall.EINVAL)
	}
	return errno(handle[*srqueue](h).srq.PostRecv(&transport.RecvWR{WRID: uint64(wrID), SGL: sg}))
}

//export goroce_create_ah
func goroce_create_ah(h C.uintptr_t, in *C.struct_gq_ah_attr, out *C.uintptr_t) C.int {
	p := handle[*pd](h)
	a := transport.AHAttr{FlowLabel: uint32(in.flow_label), SGIDIndex: uint8(in.sgid_index),
		HopLimit: uint8(in.hop_limit), TrafficClass: uint8(in.traffic_class),
		SL: uint8(in.sl), PortNum: uint8(in.port_num)}
	copy(a.DGID[:], unsafe.Slice((*byte)(&in.dgid[0]), 16))
	ah, err := p.ctx.dev.CreateAH(p.pd, a)
	if err != nil {
		return errno(err)
	}
	*out = C.uintptr_t(cgo.NewHandle(ah))
	return 0
}

//export goroce_destroy_ah
func goroce_destroy_ah(h C.uintptr_t) C.int {
	if err := handle[*transport.AH](h).Destroy(); err != nil {
		return errno(err)
	}
	cgo.Handle(h).Delete()
	return 0
}

//export goroce_post_recv
func goroce_post_recv(h C.uintptr_t, wrID C.uint64_t, list *C.struct_ibv_sge, n C.uint32_t) C.int {
	q := handle[*qpair](h)
	if q.noRecv {
		return C.int(syscall.ENOMEM)
	}
	var store [transport.MaxSGE]transport.SGE
	sg, ok := sgl(store[:], list, n)
	if !ok {
		return C.int(syscall.EINVAL)
	}
	return errno(q.qp.PostRecv(&transport.RecvWR{WRID: uint64(wrID), SGL: sg}))
}
