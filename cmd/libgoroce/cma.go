package main

// librdmacm's API (cma.c) over package cm: one cm.Manager per device the
// library opens for it, made at the device's first listener or
// connection; an event channel is a queue here and an eventfd in C; a
// cm_id is a cmID. A listener is a DeferAccept cm.Listener, so that each
// REQ becomes a CONNECT_REQUEST event with a new cm_id that the program
// answers with rdma_accept (after rdma_create_qp on it) or rdma_reject.
// The connections' own events (ESTABLISHED, REJECTED, UNREACHABLE,
// CONNECT_ERROR, DISCONNECTED, TIMEWAIT_EXIT) come from the manager's
// Events and find their cm_id by the connection's QP number: the id's QP,
// which the program made before rdma_connect or rdma_accept, or the
// external QP its conn_param->qp_num names (an id with no QP, whose QP
// the program moves itself through rdma_init_qp_attr).

/*
#include <stdlib.h>
#include "cma.h"
*/
import "C"

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime/cgo"
	"strconv"
	"sync"
	"syscall"
	"unsafe"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/internal/endpoint"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/nic/netdev"
	"github.com/goroce/goroce/transport"
	"golang.org/x/sys/unix"
)

// cmDev is a device as the connection manager uses it.
type cmDev struct {
	index int
	ctx   *devctx

	once sync.Once
	m    *cm.Manager
	err  error

	mu    sync.Mutex
	byQPN map[uint32]*cmID // the cm_id of each connection's QP number
}

var cmDevs []*cmDev // set once by goroce_cm_init

// cmListening are the cm_ids that listen, for the stats socket's report
// (endpoint.SetCMIDs): what "rdma resource show cm_id" shows of a
// kernel's, so that a program's listener can be seen from outside.
var cmListening struct {
	sync.Mutex
	ids map[*cmID]bool
}

//export goroce_cm_init
func goroce_cm_init(n C.int, hs *C.uintptr_t) {
	for i, h := range unsafe.Slice(hs, n) {
		cmDevs = append(cmDevs, &cmDev{index: i, ctx: handle[*devctx](h), byQPN: map[uint32]*cmID{}})
	}
	cmListening.ids = map[*cmID]bool{}
	endpoint.SetCMIDs(listeningIDs)
}

// listeningIDs lists the listening cm_ids, one entry per device each
// listens on, in no particular order.
func listeningIDs() []endpoint.CMID {
	cmListening.Lock()
	ids := make([]*cmID, 0, len(cmListening.ids))
	for id := range cmListening.ids {
		ids = append(ids, id)
	}
	cmListening.Unlock()
	var out []endpoint.CMID
	for _, id := range ids {
		id.mu.Lock()
		ps := "TCP"
		if id.ps == C.RDMA_PS_UDP {
			ps = "UDP"
		}
		for _, d := range id.listenDevs {
			out = append(out, endpoint.CMID{Dev: "goroce" + strconv.Itoa(d.index), Netdev: d.ctx.ep.Netdev,
				PS: ps, State: "LISTEN", Src: id.local.String()})
		}
		id.mu.Unlock()
	}
	return out
}

// manager starts the device's connection manager, once.
func (d *cmDev) manager() (*cm.Manager, error) {
	d.once.Do(func() {
		d.m, d.err = cm.New(d.ctx.dev, cm.Options{})
		if d.err == nil {
			go d.forward(d.m)
		}
	})
	return d.m, d.err
}

// forward hands each connection event to its cm_id's channel.
func (d *cmDev) forward(m *cm.Manager) {
	for e := range m.Events() {
		d.mu.Lock()
		id := d.byQPN[e.Conn.QPN()]
		d.mu.Unlock()
		if id == nil {
			continue // its cm_id is destroyed
		}
		ev := cmEvent{id: id.cid}
		switch e.Type {
		case cm.EventEstablished:
			ev.typ = C.RDMA_CM_EVENT_ESTABLISHED
			ev.rr, ev.depth = e.Conn.ResponderResources(), e.Conn.InitiatorDepth()
			id.mu.Lock()
			if id.conn == nil {
				id.conn = e.Conn // before Dial returns
			}
			active := id.req == nil
			id.mu.Unlock()
			if active {
				ev.priv = e.Conn.PrivateData() // the REP's
			}
		case cm.EventRejected:
			ev.typ = C.RDMA_CM_EVENT_REJECTED
			var rej *cm.RejectError
			if errors.As(e.Err, &rej) {
				ev.status = int32(rej.Reason)
				ev.priv = rej.PrivateData
			}
		case cm.EventUnreachable:
			ev.typ, ev.status = C.RDMA_CM_EVENT_UNREACHABLE, -int32(syscall.ETIMEDOUT)
		case cm.EventConnectError:
			ev.typ, ev.status = C.RDMA_CM_EVENT_CONNECT_ERROR, -int32(syscall.ECONNRESET)
		case cm.EventDisconnected:
			ev.typ = C.RDMA_CM_EVENT_DISCONNECTED
		case cm.EventTimewaitExit:
			ev.typ = C.RDMA_CM_EVENT_TIMEWAIT_EXIT
		case cm.EventConnectResponse:
			// An external QP's REP: the program moves its QP and calls
			// rdma_establish (librdmacm hands the kernel's
			// CONNECT_RESPONSE over as is to an id with no QP).
			ev.typ = C.RDMA_CM_EVENT_CONNECT_RESPONSE
			ev.rr, ev.depth = e.Conn.ResponderResources(), e.Conn.InitiatorDepth()
			ev.priv = e.Conn.PrivateData()
			id.mu.Lock()
			if id.conn == nil {
				id.conn = e.Conn // before Dial returns
			}
			id.mu.Unlock()
		default:
			continue
		}
		id.post(ev)
	}
}

// cmEvent is one event waiting in a channel.
type cmEvent struct {
	typ       C.int
	status    int32
	id        *C.struct_rdma_cm_id
	listen    *C.struct_rdma_cm_id
	priv      []byte
	rr, depth uint8
	ud        *cm.UDPeer // a UD peer (ROUTE_RESOLVED... ESTABLISHED of RDMA_PS_UDP)
}

// cmChannel is an rdma_event_channel: its events, one count each on fd.
type cmChannel struct {
	fd int
	mu sync.Mutex
	q  []cmEvent
}

func (ch *cmChannel) push(e cmEvent) {
	ch.mu.Lock()
	ch.q = append(ch.q, e)
	ch.mu.Unlock()
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(ch.fd, one[:])
}

//export goroce_cm_channel
func goroce_cm_channel(fd C.int, h *C.uintptr_t) C.int {
	*h = C.uintptr_t(cgo.NewHandle(&cmChannel{fd: int(fd)}))
	return 0
}

//export goroce_cm_channel_close
func goroce_cm_channel_close(h C.uintptr_t) { cgo.Handle(h).Delete() }

//export goroce_cm_get_event
func goroce_cm_get_event(h C.uintptr_t, out *C.struct_gq_cm_ev) C.int {
	ch := handle[*cmChannel](h)
	ch.mu.Lock()
	if len(ch.q) == 0 {
		ch.mu.Unlock()
		return C.int(syscall.EAGAIN)
	}
	e := ch.q[0]
	ch.q = ch.q[1:]
	ch.mu.Unlock()
	*out = C.struct_gq_cm_ev{id: e.id, listen_id: e.listen, event: C.int32_t(e.typ), status: C.int32_t(e.status),
		responder_resources: C.uint8_t(e.rr), initiator_depth: C.uint8_t(e.depth)}
	n := copy(unsafe.Slice((*byte)(&out.priv[0]), len(out.priv)), e.priv)
	out.priv_len = C.uint32_t(n)
	if u := e.ud; u != nil {
		out.ud, out.qp_num, out.qkey = 1, C.uint32_t(u.QPN), C.uint32_t(u.QKey)
		copy(unsafe.Slice((*byte)(&out.ah.dgid[0]), 16), u.AH.DGID[:])
		out.ah.flow_label, out.ah.sgid_index = C.uint32_t(u.AH.FlowLabel), C.uint8_t(u.AH.SGIDIndex)
		out.ah.hop_limit, out.ah.traffic_class, out.ah.sl = C.uint8_t(u.AH.HopLimit), C.uint8_t(u.AH.TrafficClass), C.uint8_t(u.AH.SL)
	}
	return 0
}

// cmID is an rdma_cm_id.
type cmID struct {
	cid *C.struct_rdma_cm_id // its C struct
	ps  int

	mu         sync.Mutex
	ch         *cmChannel
	dev        *cmDev         // the device it is bound to (nil: none yet)
	local      netip.AddrPort // bound or resolved
	remote     netip.AddrPort
	resolved   bool
	listeners  []*cm.Listener
	udls       []*cm.UDListener
	listenDevs []*cmDev        // the devices its listeners are on
	req        *cm.ConnRequest // a passive side's request (CONNECT_REQUEST)
	sidr       *cm.SIDRRequest // a UD service's request
	conn       *cm.Conn
	qpn        uint32 // its connection's QP's number, registered in dev.byQPN (0: none)
	cancel     context.CancelFunc
	ackTimeout uint8
	gone       bool
}

// post queues an event of the id's on its channel, unless it is destroyed.
func (id *cmID) post(e cmEvent) {
	id.mu.Lock()
	ch, gone := id.ch, id.gone
	id.mu.Unlock()
	if !gone {
		ch.push(e)
	}
}

//export goroce_cm_create_id
func goroce_cm_create_id(chh C.uintptr_t, cid *C.struct_rdma_cm_id, ps C.int, h *C.uintptr_t) C.int {
	*h = C.uintptr_t(cgo.NewHandle(&cmID{cid: cid, ps: int(ps), ch: handle[*cmChannel](chh)}))
	return 0
}

//export goroce_cm_migrate
func goroce_cm_migrate(h, chh C.uintptr_t) C.int {
	id := handle[*cmID](h)
	id.mu.Lock()
	id.ch = handle[*cmChannel](chh)
	id.mu.Unlock()
	return 0
}

//export goroce_cm_destroy_id
func goroce_cm_destroy_id(h C.uintptr_t) {
	id := handle[*cmID](h)
	cgo.Handle(h).Delete()
	cmListening.Lock()
	delete(cmListening.ids, id)
	cmListening.Unlock()
	id.mu.Lock()
	id.gone = true
	id.listenDevs = nil
	ls, udls, req, sidr, conn, qpn, dev, cancel := id.listeners, id.udls, id.req, id.sidr, id.conn, id.qpn, id.dev, id.cancel
	id.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	for _, l := range udls {
		l.Close()
	}
	if req != nil {
		req.Reject(nil) // not answered yet: as rdma_cm rejects it (ErrAnswered otherwise)
	}
	if sidr != nil {
		sidr.Reject(mad.SIDRReject, nil)
	}
	if conn != nil {
		conn.Close() // a DREQ if still connected, as destroying a kernel cm_id sends it
	}
	if cancel != nil {
		cancel()
	}
	if qpn != 0 {
		dev.mu.Lock()
		if dev.byQPN[qpn] == id {
			delete(dev.byQPN, qpn)
		}
		dev.mu.Unlock()
	}
}

// addrPort reads a flattened sockaddr.
func addrPort(s *C.struct_gq_sa) netip.AddrPort {
	a := netip.AddrFrom16(*(*[16]byte)(unsafe.Pointer(&s.addr[0])))
	if s.family == C.AF_INET {
		a = a.Unmap()
	}
	return netip.AddrPortFrom(a, uint16(s.port))
}

func toSA(ap netip.AddrPort) C.struct_gq_sa {
	s := C.struct_gq_sa{port: C.uint16_t(ap.Port()), family: C.AF_INET6}
	if ap.Addr().Is4() {
		s.family = C.AF_INET
	}
	b := ap.Addr().As16()
	copy(unsafe.Slice((*byte)(&s.addr[0]), 16), b[:])
	return s
}

// deviceOf returns the device whose GID table holds a.
func deviceOf(a netip.Addr) *cmDev {
	for _, d := range cmDevs {
		if _, ok := d.ctx.dev.GIDIndex(a); ok {
			return d
		}
	}
	return nil
}

// bind binds id to local. An unspecified address binds no device, and
// so does a loopback address no device holds: the kernel's rdma_bind_addr
// leaves id->verbs NULL for 127.0.0.1 or ::1 (seen on rxe, kernels 6.1
// and 6.12), and libfabric's verbs provider counts on it, taking the
// devices' own addresses when "localhost" gives an id no device. Such an
// id listens on every device for this host's own connections (cm's
// takes). Port 0 is a port from the kernel's default ephemeral range,
// chosen here as rdma_bind_addr chooses it: a program may read it with
// rdma_get_src_port before rdma_listen and hand it to its peer (qperf's
// server does). Called with id.mu held.
func (id *cmID) bind(local netip.AddrPort) C.int {
	if a := local.Addr(); !a.IsUnspecified() {
		d := deviceOf(a)
		if d == nil && !a.IsLoopback() {
			return C.int(syscall.EADDRNOTAVAIL)
		}
		if d != nil {
			id.dev = d
			C.gq_cm_set_dev(id.cid, C.int(d.index))
		}
	}
	if local.Port() == 0 {
		local = netip.AddrPortFrom(local.Addr(), uint16(32768+rand.IntN(28232)))
	}
	id.local = local
	sa := toSA(local)
	C.gq_cm_set_addr(id.cid, 0, &sa)
	return 0
}

// firstAddr is the first device's first address of the family (IPv4 if
// v4), passing over link-local ones, else none.
func firstAddr(v4 bool) netip.Addr {
	for _, d := range cmDevs {
		for _, g := range d.ctx.ep.GIDs {
			a := netip.AddrFrom16(g).Unmap()
			if a.Is4() == v4 && !a.IsUnspecified() && !a.IsLinkLocalUnicast() {
				return a
			}
		}
	}
	return netip.Addr{}
}

//export goroce_cm_bind
func goroce_cm_bind(h C.uintptr_t, sa *C.struct_gq_sa) C.int {
	id := handle[*cmID](h)
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.bind(addrPort(sa))
}

// goroce_cm_resolve_addr resolves dst (binding src first, if given), as
// the kernel's rdma_resolve_addr does on RoCE: a destination of another
// family than the bound source is EINVAL and one the routing table has no
// route to ENETUNREACH, both at once; a route whose source address no
// device here holds (an interface not in GOROCE_NETDEV) is an
// RDMA_CM_EVENT_ADDR_ERROR with status -ENODEV, as rdma_cm's addr_handler
// reports a source no RDMA device has; else ADDR_RESOLVED. The next hop's
// MAC is the kernel's to find under the link's sockets, so no neighbour
// timeout (ADDR_ERROR -ETIMEDOUT) is reported here.
//
//export goroce_cm_resolve_addr
func goroce_cm_resolve_addr(h C.uintptr_t, src, dst *C.struct_gq_sa) C.int {
	id := handle[*cmID](h)
	id.mu.Lock()
	defer id.mu.Unlock()
	if src.family != 0 {
		if rc := id.bind(addrPort(src)); rc != 0 {
			return rc
		}
	}
	remote := addrPort(dst)
	if id.local.IsValid() && !id.local.Addr().IsUnspecified() && id.local.Addr().Is4() != remote.Addr().Is4() {
		return C.int(syscall.EINVAL)
	}
	local, err := routeSource(remote.Addr())
	if err != nil {
		return errno(err)
	}
	// A loopback destination with no device of this process on the
	// loopback interface is the id's own device, as the kernel's
	// cma_resolve_loopback binds an unbound id to the first device
	// (cma_bind_loopback) and makes the destination GID the source's:
	// the CM speaks to that device's address, the id shows the address
	// it was given. Where a device is on loopback (GOROCE_NETDEV=
	// 127.0.0.2 and the like: programs of one host on addresses of
	// 127/8), a loopback destination is another program's device.
	self := remote.Addr().IsLoopback() && deviceOf(remote.Addr()) == nil && !sourceOn(local).IsValid()
	if id.dev == nil {
		a := sourceOn(local)
		if self {
			a = firstAddr(remote.Addr().Is4())
		}
		if !a.IsValid() {
			id.ch.push(cmEvent{typ: C.RDMA_CM_EVENT_ADDR_ERROR, status: -int32(syscall.ENODEV), id: id.cid})
			return 0
		}
		if rc := id.bind(netip.AddrPortFrom(a, id.local.Port())); rc != 0 {
			return rc
		}
	}
	id.remote = remote
	sa := toSA(remote)
	if self {
		id.remote = netip.AddrPortFrom(id.local.Addr(), remote.Port())
	}
	C.gq_cm_set_addr(id.cid, 1, &sa)
	id.resolved = true
	id.ch.push(cmEvent{typ: C.RDMA_CM_EVENT_ADDR_RESOLVED, id: id.cid})
	return 0
}

// sourceOn is the device address to send from where the routing table
// chose src: src itself if a device holds it, else the address of src's
// family of the device on src's interface (a device over one address of
// an interface, as GOROCE_NETDEV=127.0.77.2 makes on loopback), else
// none: no RDMA device is on the way.
func sourceOn(src netip.Addr) netip.Addr {
	if deviceOf(src) != nil {
		return src
	}
	ifname, err := netdev.Of(src)
	if err != nil {
		return netip.Addr{}
	}
	for _, d := range cmDevs {
		if d.ctx.ep.Netdev != ifname {
			continue
		}
		for _, g := range d.ctx.ep.GIDs {
			a := netip.AddrFrom16(g).Unmap()
			if a.Is4() == src.Is4() && !a.IsUnspecified() && !a.IsLinkLocalUnicast() {
				return a
			}
		}
	}
	return netip.Addr{}
}

// routeSource is the source address the routing table picks towards dst
// (a UDP "connect", which sends nothing), or the routing error
// (ENETUNREACH).
func routeSource(dst netip.Addr) (netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
	if err != nil {
		var se syscall.Errno
		if errors.As(err, &se) {
			return netip.Addr{}, se
		}
		return netip.Addr{}, syscall.ENETUNREACH
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

//export goroce_cm_resolve_route
func goroce_cm_resolve_route(h C.uintptr_t) C.int {
	id := handle[*cmID](h)
	id.mu.Lock()
	defer id.mu.Unlock()
	if !id.resolved {
		return C.int(syscall.EINVAL)
	}
	id.ch.push(cmEvent{typ: C.RDMA_CM_EVENT_ROUTE_RESOLVED, id: id.cid})
	return 0
}

// goroce_cm_qp_attr gives rdma_init_qp_attr the RTR or RTS attributes
// of id's connection, for its own QP or an external one alike: what the
// CM applies to a QP of its own (cm.Conn.QPAttr), or, for a request not
// accepted yet, what the kernel's rdma_cm gives then (towards the
// requester's QP and PSN, expecting the PSN the REP will carry:
// cm.ConnRequest.QPAttr), so that a program moving its own QP agrees with
// what the REQ and REP announce. No request or connection, or one still
// waiting for the peer's REP, is EINVAL.
//
//export goroce_cm_qp_attr
func goroce_cm_qp_attr(h C.uintptr_t, state C.int, out *C.struct_gq_qp_attr, mask *C.int) C.int {
	id := handle[*cmID](h)
	id.mu.Lock()
	c, req, ackTO := id.conn, id.req, id.ackTimeout
	id.mu.Unlock()
	var a transport.QPAttr
	var m transport.QPAttrMask
	err := error(syscall.EINVAL)
	switch s := transport.QPState(state); {
	case c != nil:
		a, m, err = c.QPAttr(s)
	case req != nil:
		a, m, err = req.QPAttr(s, ackTO)
	}
	if err != nil {
		return C.int(syscall.EINVAL)
	}
	*out, *mask = qpAttrC(a), C.int(m)
	return 0
}

// goroce_cm_establish sends the RTU of an external QP's connection whose
// REP came (CONNECT_RESPONSE), as librdmacm's rdma_establish: the
// passive side is then established. An id with a QP of its own, or with
// no connection waiting for it, is EINVAL, as librdmacm answers.
//
//export goroce_cm_establish
func goroce_cm_establish(h C.uintptr_t) C.int {
	id := handle[*cmID](h)
	id.mu.Lock()
	c := id.conn
	id.mu.Unlock()
	if c == nil || c.QP() != nil || c.Establish() != nil {
		return C.int(syscall.EINVAL)
	}
	return 0
}

// goroce_cm_qp_info says what rdma_init_qp_attr can tell of id's
// connection for INIT: conn 0 none, 1 a request not accepted yet, 2 a
// connection; rr whether the request or connection has
// responder resources (RDMA READ and atomics granted).
//
//export goroce_cm_qp_info
func goroce_cm_qp_info(h C.uintptr_t, conn, rr *C.int) {
	id := handle[*cmID](h)
	id.mu.Lock()
	defer id.mu.Unlock()
	var n uint8
	switch {
	case id.conn != nil:
		*conn, n = 2, id.conn.ResponderResources()
	case id.req != nil:
		*conn, n = 1, id.req.ResponderResources()
	default:
		*conn = 0
	}
	*rr = 0
	if n > 0 {
		*rr = 1
	}
}

//export goroce_cm_ack_timeout
func goroce_cm_ack_timeout(h C.uintptr_t, t C.uint8_t) C.int {
	id := handle[*cmID](h)
	id.mu.Lock()
	id.ackTimeout = uint8(t)
	id.mu.Unlock()
	return 0
}

// maxBacklog is the kernel's rdma_ucm max_backlog (net.rdma_ucm.max_backlog's
// default): the requests a listener holds that the program has not read,
// what a backlog of 0 (ucmatose's, cmtime's), a negative one or a larger
// one means (ucma_listen). The requests past it are rejected (REJ 3, no
// resources), as ucma's event handler refuses them.
const maxBacklog = 1024

//export goroce_cm_listen
func goroce_cm_listen(h C.uintptr_t, backlog C.int) C.int {
	id := handle[*cmID](h)
	id.mu.Lock()
	defer id.mu.Unlock()
	if backlog <= 0 || backlog > maxBacklog {
		backlog = maxBacklog
	}
	if !id.local.IsValid() {
		return C.int(syscall.EINVAL) // rdma_bind_addr first
	}
	if len(id.listeners)+len(id.udls) > 0 {
		return 0
	}
	devs := cmDevs
	if id.dev != nil {
		devs = []*cmDev{id.dev}
	}
	for _, d := range devs {
		m, err := d.manager()
		if err == nil {
			if id.ps == C.RDMA_PS_UDP {
				var l *cm.UDListener
				if l, err = m.ListenUD(id.local, int(backlog)); err == nil {
					id.udls = append(id.udls, l)
					go id.serveUD(d, l)
				}
			} else {
				var l *cm.Listener
				if l, err = m.Listen(id.local, cm.ListenConfig{DeferAccept: true, Backlog: int(backlog)}); err == nil {
					id.listeners = append(id.listeners, l)
					go id.serve(d, l)
				}
			}
		}
		if err != nil {
			for _, l := range id.listeners {
				l.Close()
			}
			for _, l := range id.udls {
				l.Close()
			}
			id.listeners, id.udls, id.listenDevs = nil, nil, nil
			return C.int(syscall.EADDRINUSE)
		}
		id.listenDevs = append(id.listenDevs, d)
	}
	cmListening.Lock()
	cmListening.ids[id] = true
	cmListening.Unlock()
	return 0
}

// child makes the cm_id of a request to id's listener on d.
func (id *cmID) child(d *cmDev, local, remote netip.AddrPort) (*cmID, C.uintptr_t) {
	cid := C.gq_cm_child(id.cid, C.int(d.index))
	if cid == nil {
		return nil, 0
	}
	id.mu.Lock()
	c := &cmID{cid: cid, ps: id.ps, ch: id.ch, dev: d, local: local, remote: remote, resolved: true}
	id.mu.Unlock()
	la, ra := toSA(local), toSA(remote)
	C.gq_cm_set_addr(cid, 0, &la)
	C.gq_cm_set_addr(cid, 1, &ra)
	h := C.uintptr_t(cgo.NewHandle(c))
	(*C.struct_gq_cm_id)(unsafe.Pointer(cid)).h = h
	return c, h
}

// serve turns each connection request to l into a CONNECT_REQUEST event
// with a new cm_id.
func (id *cmID) serve(d *cmDev, l *cm.Listener) {
	for {
		r, err := l.Request(context.Background())
		if err != nil {
			return
		}
		c, _ := id.child(d, r.LocalAddr(), r.RemoteAddr())
		if c == nil {
			r.Reject(nil)
			continue
		}
		c.req = r
		id.post(cmEvent{typ: C.RDMA_CM_EVENT_CONNECT_REQUEST, id: c.cid, listen: id.cid, priv: r.PrivateData(),
			rr: r.ResponderResources(), depth: r.InitiatorDepth()})
	}
}

// serveUD turns each SIDR request to l into a CONNECT_REQUEST event with
// a new cm_id.
func (id *cmID) serveUD(d *cmDev, l *cm.UDListener) {
	for {
		r, err := l.Accept(context.Background())
		if err != nil {
			return
		}
		c, _ := id.child(d, r.LocalAddr(), r.RemoteAddr())
		if c == nil {
			r.Reject(mad.SIDRReject, nil)
			continue
		}
		c.sidr = r
		id.post(cmEvent{typ: C.RDMA_CM_EVENT_CONNECT_REQUEST, id: c.cid, listen: id.cid, priv: r.PrivateData()})
	}
}

// params are the connection parameters of a C rdma_conn_param, or
// EINVAL for READ and atomic depths past the device's, as librdmacm's
// ucma_valid_param refuses them (RC ids only). RDMA_MAX_RESP_RES and
// RDMA_MAX_INIT_DEPTH (255, libfabric's verbs provider passes them) are
// the device's maximum, as librdmacm's rdma_connect and rdma_accept take
// them; the CM then takes the smaller of each and the peer's opposite.
func (id *cmID) params(p *C.struct_gq_conn) (cm.ConnParams, C.int) {
	cp := cm.ConnParams{ACKTimeout: id.ackTimeout}
	if p.given != 0 {
		depth := func(n C.uint8_t) (uint8, bool) {
			switch {
			case n == 255:
				return transport.MaxRdAtomic, true
			case n > transport.MaxRdAtomic && id.ps != C.RDMA_PS_UDP:
				return 0, false
			}
			return uint8(n), true
		}
		var ok1, ok2 bool
		cp.ResponderResources, ok1 = depth(p.responder_resources)
		cp.InitiatorDepth, ok2 = depth(p.initiator_depth)
		if !ok1 || !ok2 {
			return cp, C.int(syscall.EINVAL)
		}
		// Three bits each in the REQ and REP: the kernel's rdma_cm takes
		// min(7, n) (cma_connect_ib, cma_accept_ib), and programs pass
		// more (retry_count = 10) expecting it.
		cp.RetryCount, cp.RNRRetryCount = min(uint8(p.retry_count), 7), min(uint8(p.rnr_retry_count), 7)
		if p.priv != nil && p.priv_len > 0 {
			cp.PrivateData = C.GoBytes(p.priv, C.int(p.priv_len))
		}
	}
	return cp, 0
}

// qpConfig is the QP id's connection is made with: the id's own (qph,
// rdma_create_qp's), else the program's external QP that p's qp_num names,
// as the kernel's rdma_cm takes conn_param->qp_num for an id with no QP
// (rdma_connect, rdma_accept). Neither: EINVAL. The QP's number is
// registered for the events. Called with id.mu held.
func (id *cmID) qpConfig(qph C.uintptr_t, p *C.struct_gq_conn) (cm.QPConfig, C.int) {
	var qc cm.QPConfig
	switch {
	case qph != 0:
		q := handle[*qpair](qph)
		qc = cm.QPConfig{PD: q.pd, QP: q.qp}
		id.qpn = q.qp.QPN()
	case p.given != 0 && p.qp_num != 0:
		qc = cm.QPConfig{ExternalQPN: uint32(p.qp_num)}
		id.qpn = qc.ExternalQPN
	default:
		return qc, C.int(syscall.EINVAL)
	}
	id.dev.mu.Lock()
	id.dev.byQPN[id.qpn] = id
	id.dev.mu.Unlock()
	return qc, 0
}

//export goroce_cm_connect
func goroce_cm_connect(h, qph C.uintptr_t, p *C.struct_gq_conn) C.int {
	id := handle[*cmID](h)
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.dev == nil || !id.resolved {
		return C.int(syscall.EINVAL)
	}
	m, err := id.dev.manager()
	if err != nil {
		return errno(err)
	}
	params, rc := id.params(p)
	if rc != 0 {
		return rc
	}
	ctx, cancel := context.WithCancel(context.Background())
	id.cancel = cancel
	local, remote := id.local, id.remote
	if id.ps == C.RDMA_PS_UDP {
		// SIDR: the service's QPN and Q_Key come as ESTABLISHED, with
		// the address vector to reach it.
		go func() {
			u, err := m.ResolveUD(ctx, local, remote, params.PrivateData)
			e := cmEvent{id: id.cid, typ: C.RDMA_CM_EVENT_ESTABLISHED, ud: u}
			var se *cm.SIDRError
			switch {
			case err == nil:
				e.priv = u.PrivateData
			case errors.As(err, &se):
				e.typ, e.status = C.RDMA_CM_EVENT_UNREACHABLE, int32(se.Status)
			case errors.Is(err, cm.ErrTimeout):
				e.typ, e.status = C.RDMA_CM_EVENT_UNREACHABLE, -int32(syscall.ETIMEDOUT)
			default:
				e.typ, e.status = C.RDMA_CM_EVENT_ADDR_ERROR, -int32(syscall.EINVAL)
			}
			id.post(e)
		}()
		return 0
	}
	qc, rc := id.qpConfig(qph, p)
	if rc != 0 {
		return rc
	}
	go func() {
		c, err := m.Dial(ctx, local, remote, qc, params)
		if err == nil {
			id.mu.Lock()
			id.conn = c
			id.mu.Unlock()
		}
	}()
	return 0
}

//export goroce_cm_accept
func goroce_cm_accept(h, qph C.uintptr_t, p *C.struct_gq_conn) C.int {
	id := handle[*cmID](h)
	id.mu.Lock()
	defer id.mu.Unlock()
	params, rc := id.params(p)
	if rc != 0 {
		return rc
	}
	if s := id.sidr; s != nil {
		if qph == 0 {
			return C.int(syscall.EINVAL)
		}
		return errno(s.Accept(handle[*qpair](qph).qp, params.PrivateData))
	}
	if id.req == nil {
		return C.int(syscall.EINVAL)
	}
	qc, rc := id.qpConfig(qph, p)
	if rc != 0 {
		return rc
	}
	c, err := id.req.Accept(qc, params)
	if err != nil {
		return errno(err)
	}
	id.conn = c
	return 0
}

//export goroce_cm_reject
func goroce_cm_reject(h C.uintptr_t, priv unsafe.Pointer, n C.int) C.int {
	id := handle[*cmID](h)
	id.mu.Lock()
	defer id.mu.Unlock()
	var b []byte
	if priv != nil && n > 0 {
		b = C.GoBytes(priv, n)
	}
	switch {
	case id.sidr != nil:
		return errno(id.sidr.Reject(mad.SIDRReject, b))
	case id.req != nil:
		return errno(id.req.Reject(b))
	}
	return C.int(syscall.EINVAL)
}

//export goroce_cm_disconnect
func goroce_cm_disconnect(h C.uintptr_t) C.int {
	id := handle[*cmID](h)
	id.mu.Lock()
	c := id.conn
	id.mu.Unlock()
	if c == nil {
		return C.int(syscall.EINVAL)
	}
	return errno(c.Close())
}
