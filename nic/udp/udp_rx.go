package udp

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/inet"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/internal/linkio"
	"golang.org/x/sys/unix"
)

// Receive path of the UDP link. recvmmsg fills a ring of slots; each slot
// keeps free space before its data so the IP and UDP headers the kernel
// stripped can be rebuilt in place in front of the (first) packet. With
// UDP GRO one slot may hold many coalesced packets of one flow; those after
// the first are copied out, each behind room for its own headers.

const (
	// udpHdrRoom is the space before a slot's data: headroom plus the
	// longest IP and UDP headers, rounded up for alignment.
	udpHdrRoom = (nic.Headroom + inet.IPv6HeaderLen + inet.UDPHeaderLen + 7) &^ 7
	udpSlots   = 64     // slots without GRO
	udpGROSlot = 16     // slots with GRO: each holds up to 64 KiB
	udpGROData = 65536  // largest coalesced payload
	udpCopies  = 256    // GRO segments copied out per Recv at most
	udpCtrlLen = 5 * 24 // TOS/TCLASS, TTL/HOPLIMIT, UDP_GRO, SO_RXQ_OVFL
)

type udpRx struct {
	// hold is this queue's (nic.Poller): every field below aside is its
	// holder's.
	hold   nic.QueueHold
	rwant  int              // messages the receiver asks for (the receiver's only)
	pwant  int              // messages a poller asks for
	pollFn func(fd uintptr) // a poller's recvmmsg, made once so that a poll does not allocate
	aside  bool             // Read's function saw pollers active (the receiver's only)

	l        *Link
	raw      syscall.RawConn
	slot     int // bytes per slot
	dataCap  int
	buf      []byte
	msgs     []unix.Mmsghdr
	iov      []unix.Iovec
	names    [][linkio.SockaddrLen]byte
	ctrl     [][udpCtrlLen]byte
	copies   []byte
	got, msg int // messages from the last recvmmsg, next to deliver
	seg      int // next segment of msg
	cur      udpRxMsg
	want, n  int
	errno    unix.Errno
	fn       func(fd uintptr) bool
	packets  atomic.Uint64 // delivered from this queue
}

// udpRxMsg is what one received message says about its packets.
type udpRxMsg struct {
	from     netip.AddrPort
	tos, ttl uint8
	segLen   int // GRO segment size, or the whole length
	len      int
	nseg     int
}

func (r *udpRx) init(l *Link, raw syscall.RawConn) {
	r.l, r.raw = l, raw
	n := udpSlots
	r.dataCap = nic.MaxFrame
	if l.gro {
		n, r.dataCap = udpGROSlot, udpGROData
		r.copies = make([]byte, udpCopies*nic.BufSize)
	}
	r.slot = udpHdrRoom + r.dataCap
	r.buf = make([]byte, n*r.slot)
	r.msgs = make([]unix.Mmsghdr, n)
	r.iov = make([]unix.Iovec, n)
	r.names = make([][linkio.SockaddrLen]byte, n)
	r.ctrl = make([][udpCtrlLen]byte, n)
	for i := range n {
		r.iov[i].Base = &r.buf[i*r.slot+udpHdrRoom]
		r.iov[i].SetLen(r.dataCap)
		h := &r.msgs[i].Hdr
		h.Iov = &r.iov[i]
		h.SetIovlen(1)
		h.Name = &r.names[i][0]
		h.Control = &r.ctrl[i][0]
	}
	budget := l.cfg.BusyPoll
	// fn takes the queue before each recvmmsg and keeps it only when
	// something came: the receiver waits for the socket without it, so a
	// poller can take what arrives meanwhile. It blocks for the queue
	// rather than give up and wait for the socket again: a packet a
	// poller left behind has signalled readiness already, and would wait
	// for the next one.
	r.fn = func(fd uintptr) bool {
		var since time.Time
		for {
			r.hold.Lock()
			if r.msg < r.got {
				// A poller received more than it took: those first.
				r.n, r.errno = -1, 0
				return true
			}
			r.prep(r.rwant)
			n, e := linkio.Mmsg(unix.SYS_RECVMMSG, fd, r.msgs[:r.want], 0)
			if e == unix.EAGAIN || e == unix.EINTR {
				r.hold.Unlock()
				if r.hold.PollersTook() {
					// Pollers took frames since the receiver's last
					// return: they are active, and Recv returns no frames
					// so that its caller can stand aside (nic.Poller)
					// rather than wake, and spin, for every one they take.
					r.aside = true
					return true
				}
				// Busy polling asks again until its budget is spent or the
				// link closes (Close waits for this function to return).
				if budget > 0 && !l.closing.IsClosed() {
					if since.IsZero() {
						since = time.Now()
					} else if time.Since(since) >= budget {
						return false
					}
					runtime.Gosched()
					continue
				}
				return false
			}
			r.n, r.errno = n, e
			return true
		}
	}
	r.pollFn = func(fd uintptr) {
		r.prep(r.pwant)
		r.n, r.errno = linkio.Mmsg(unix.SYS_RECVMMSG, fd, r.msgs[:r.want], 0)
	}
	// SO_RXQ_OVFL reports the socket's drop count with every packet.
	_ = raw.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1) })
}

// Recv blocks until frames arrive on the first receive queue; see nic.Link.
// A link with several queues is received from with RecvQueue.
func (l *Link) Recv(frames []nic.Frame) (int, error) { return l.RecvQueue(0, frames) }

// RecvQueue blocks until frames arrive on receive queue i; see nic.MultiQueue.
// It holds the queue from its return until the next call (nic.Poller).
func (l *Link) RecvQueue(i int, frames []nic.Frame) (int, error) {
	if i < 0 || i >= len(l.rxq) {
		return 0, fmt.Errorf("nic: udp link %v: no receive queue %d of %d", l.cfg.Addr, i, len(l.rxq))
	}
	r := &l.rxq[i].r
	if r.hold.ReceiverLetsGo() {
		r.hold.Unlock()
	}
	if len(frames) == 0 {
		return 0, nil
	}
	for {
		if l.closing.IsClosed() {
			return 0, nic.ErrClosed
		}
		r.hold.Lock()
		if r.msg >= r.got {
			r.hold.Unlock()
			r.rwant = len(frames)
			if err := r.receive(); err != nil {
				if err == errAside {
					r.hold.StandAside()
					return 0, nil
				}
				return 0, err
			}
		}
		if n := r.deliver(frames); n > 0 {
			r.hold.ReceiverKeeps()
			return n, nil
		}
		r.hold.Unlock()
	}
}

// PollQueue receives what has arrived on queue i without waiting; see
// nic.Poller.
func (l *Link) PollQueue(i int, frames []nic.Frame) int {
	if i < 0 || i >= len(l.rxq) || len(frames) == 0 || l.closing.IsClosed() {
		return 0
	}
	r := &l.rxq[i].r
	if !r.hold.TryLock() {
		return 0
	}
	if r.msg >= r.got {
		r.pwant = len(frames)
		err := r.raw.Control(r.pollFn)
		n, e := r.n, r.errno
		if err != nil || e != 0 || n <= 0 {
			// Nothing (EAGAIN), or an error the receiver meets and reports.
			r.hold.Unlock()
			return 0
		}
		r.got, r.msg, r.seg = n, 0, 0
		r.l.ctr.RxBatches.Add(1)
		r.hold.PollTook()
	}
	n := r.deliver(frames)
	if n == 0 {
		r.hold.Unlock()
	}
	return n
}

// EndPoll releases queue i after a PollQueue that returned frames.
func (l *Link) EndPoll(i int) { l.rxq[i].r.hold.Unlock() }

// EndRecv releases queue i if the receiver holds it; see nic.Poller.
func (l *Link) EndRecv(i int) {
	if i < 0 || i >= len(l.rxq) {
		return
	}
	if r := &l.rxq[i].r; r.hold.ReceiverLetsGo() {
		r.hold.Unlock()
	}
}

// prep readies the message headers for a recvmmsg of up to want (under
// hold).
func (r *udpRx) prep(want int) {
	r.want = min(max(want, 1), len(r.msgs))
	for i := range r.want {
		h := &r.msgs[i].Hdr
		h.Namelen = linkio.SockaddrLen
		h.SetControllen(udpCtrlLen)
		h.Flags = 0
	}
}

// errAside is receive's answer when it found nothing and pollers took
// frames since the receiver's last return: RecvQueue returns no frames,
// the queue not held.
var errAside = errors.New("nic: udp link: a poller took the packets")

// receive waits for the socket and runs one recvmmsg for up to want
// messages. It returns holding the queue, or an error without it.
func (r *udpRx) receive() error {
	r.aside = false
	if err := r.raw.Read(r.fn); err != nil {
		return nic.ErrClosed
	}
	if r.aside {
		return errAside
	}
	if r.errno != 0 {
		r.got, r.msg = 0, 0
		r.hold.Unlock()
		return fmt.Errorf("nic: udp link %v: recvmmsg: %w", r.l.cfg.Addr, r.errno)
	}
	if r.n < 0 {
		return nil // fn found messages a poller left
	}
	r.got, r.msg, r.seg = r.n, 0, 0
	r.l.ctr.RxBatches.Add(1)
	return nil
}

// parseMsg reads message i's source, control data and segmentation.
func (r *udpRx) parseMsg(i int) bool {
	h := &r.msgs[i].Hdr
	m := &r.cur
	*m = udpRxMsg{ttl: bth.DefaultHopLimit, len: int(r.msgs[i].Len)}
	var ok bool
	if m.from, ok = linkio.SockaddrAddr(&r.names[i]); !ok || h.Flags&unix.MSG_TRUNC != 0 || m.len == 0 {
		return false
	}
	m.segLen = m.len
	linkio.ForCmsg(r.ctrl[i][:h.Controllen], func(level, typ int32, d []byte) {
		switch {
		case level == unix.IPPROTO_IP && typ == unix.IP_TOS, level == unix.IPPROTO_IPV6 && typ == unix.IPV6_TCLASS:
			m.tos = uint8(linkio.CmsgInt(d))
		case level == unix.IPPROTO_IP && typ == unix.IP_TTL, level == unix.IPPROTO_IPV6 && typ == unix.IPV6_HOPLIMIT:
			m.ttl = uint8(linkio.CmsgInt(d))
		case level == unix.SOL_UDP && typ == unix.UDP_GRO:
			if g := linkio.CmsgInt(d); g > 0 {
				m.segLen = g
			}
		case level == unix.SOL_SOCKET && typ == unix.SO_RXQ_OVFL:
			r.l.ctr.RxKernelDrops.Store(uint64(linkio.CmsgInt(d)))
		}
	})
	m.nseg = (m.len + m.segLen - 1) / m.segLen
	return true
}

// deliver hands out pending packets, rebuilding their headers.
func (r *udpRx) deliver(frames []nic.Frame) int {
	l := r.l
	n, copies := 0, 0
	var pk, by, gro, dropped, unsolved uint64
	hl := inet.IPv4HeaderLen + inet.UDPHeaderLen
	if l.v6 {
		hl = inet.IPv6HeaderLen + inet.UDPHeaderLen
	}
	for n < len(frames) && r.msg < r.got {
		if r.seg == 0 && !r.parseMsg(r.msg) {
			dropped++
			r.msg++
			continue
		}
		m := &r.cur
		start := r.seg * m.segLen
		end := min(start+m.segLen, m.len)
		if hl+end-start > nic.MaxFrame {
			// Longer than any RoCE frame (a jumbo datagram, or GRO
			// segments of them): dropped, and never copied into a
			// buffer of one frame's size.
			dropped++
			r.next(m)
			continue
		}
		slot := r.buf[r.msg*r.slot : (r.msg+1)*r.slot]
		var b []byte
		if r.seg == 0 {
			b = slot[udpHdrRoom-hl-nic.Headroom : udpHdrRoom+end]
		} else {
			if copies == udpCopies {
				break // the rest next time
			}
			b = r.copies[copies*nic.BufSize : copies*nic.BufSize+nic.Headroom+hl+end-start]
			copy(b[nic.Headroom+hl:], slot[udpHdrRoom+start:udpHdrRoom+end])
			copies++
		}
		if m.nseg > 1 {
			gro++
		}
		r.next(m)
		dg := b[nic.Headroom:]
		l.rebuild(dg, m)
		// The kernel checked the real IP header; rebuild wrote this one
		// and its checksum, so decoding need not check it again.
		f, err := bth.DecodeSealed(dg)
		if err != nil {
			dropped++
			continue
		}
		// Solving the IPv4 ID makes the ICRC verify (it is solved from
		// the ICRC's difference), so the frame goes up verified and the
		// device computes no second ICRC. IPv6 carries no ID to solve,
		// and an ID not found leaves the ICRC for the device to reject.
		solved := f.RecoverIPv4ID()
		if !solved {
			unsolved++
		}
		frames[n] = nic.Frame{B: b, Off: nic.Headroom, Verified: solved && !f.IsIPv6(), Decoded: f}
		n++
		pk++
		by += uint64(len(dg))
	}
	linkio.AddIf(&l.ctr.RxPackets, pk)
	linkio.AddIf(&r.packets, pk)
	linkio.AddIf(&l.ctr.RxBytes, by)
	linkio.AddIf(&l.ctr.RxGROSegments, gro)
	linkio.AddIf(&l.ctr.RxDropped, dropped)
	linkio.AddIf(&l.ctr.RxIDUnsolved, unsolved)
	return n
}

// next moves on to the next segment of m, or to the next message.
func (r *udpRx) next(m *udpRxMsg) {
	if r.seg++; r.seg >= m.nseg {
		r.msg++
		r.seg = 0
	}
}

// rebuild writes the IP and UDP headers the kernel stripped in front of a
// UDP payload: the source from the sender's address, the destination is
// the link's own (the socket is bound to it), TOS and TTL from the control
// messages, identification 0 for RecoverIPv4ID to fill in, and a valid
// IPv4 header checksum (bth.DecodeIP checks it). The UDP checksum is left
// 0: the kernel verified it, and the ICRC masks it.
func (l *Link) rebuild(dg []byte, m *udpRxMsg) {
	var u inet.UDP
	if !l.v6 {
		ip := inet.IPv4(dg[:inet.IPv4HeaderLen])
		ip.SetVersionIHL(inet.IPv4HeaderLen)
		ip.SetTOS(m.tos)
		ip.SetTotalLength(uint16(len(dg)))
		ip.SetID(0)
		ip.SetFlagsFragmentOffset(0, 0)
		ip.SetTTL(m.ttl)
		ip.SetProtocol(inet.ProtoUDP)
		ip.SetSrc(m.from.Addr())
		ip.SetDst(l.cfg.Addr)
		ip.SetChecksum(ip.CalculateChecksum())
		u = inet.UDP(dg[inet.IPv4HeaderLen:])
	} else {
		ip := inet.IPv6(dg[:inet.IPv6HeaderLen])
		ip.SetVersionTrafficClassFlowLabel(m.tos, 0)
		ip.SetPayloadLength(uint16(len(dg) - inet.IPv6HeaderLen))
		ip.SetNextHeader(inet.ProtoUDP)
		ip.SetHopLimit(m.ttl)
		ip.SetSrc(m.from.Addr())
		ip.SetDst(l.cfg.Addr)
		u = inet.UDP(dg[inet.IPv6HeaderLen:])
	}
	u.SetSrcPort(m.from.Port())
	u.SetDstPort(bth.UDPPort)
	u.SetLength(uint16(len(u)))
	u.SetChecksum(0)
}
