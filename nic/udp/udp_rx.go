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
	"github.com/goroce/goroce/internal/spin"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/internal/linkio"
	"golang.org/x/sys/unix"
)

// Receive path of the UDP link. recvmmsg fills a ring of slots; each slot
// keeps free space before its data so the IP and UDP headers the kernel
// stripped can be rebuilt in place in front of a packet. With UDP GRO one
// slot may hold many coalesced packets of one flow, and the slot is a row
// of iovecs, each one segment size (the stride) long behind room for its
// headers: the kernel's copy then lays each coalesced packet in its own
// iovec, and every packet is handed up where it lies, with no copy. The
// stride is learned from the segment sizes that arrive; a buffer cut at
// another size has its packets copied out (Stats.RxGROCopies).

const (
	// udpHdrRoom is the space before each iovec's data: headroom plus the
	// longest IP and UDP headers, rounded up for alignment.
	udpHdrRoom = (nic.Headroom + inet.IPv6HeaderLen + inet.UDPHeaderLen + 7) &^ 7
	udpSlots   = 64     // slots without GRO
	udpGROSlot = 16     // slots with GRO: each holds up to 64 KiB
	udpGROData = 65536  // largest coalesced payload
	udpCopies  = 256    // GRO segments copied out per Recv at most
	udpCtrlLen = 5 * 24 // TOS/TCLASS, TTL/HOPLIMIT, UDP_GRO, SO_RXQ_OVFL

	// udpMinSeg is the shortest UDP payload a RoCEv2 packet has (BTH and
	// ICRC): a GRO segment size below it is malformed.
	udpMinSeg = bth.BTHLen + bth.ICRCLen
	// udpMinStride bounds the stride from below: segments shorter than
	// a 256-byte MTU's packets (ACK bursts) are cheaper to copy than a
	// row of thousands of iovecs is to hand the kernel.
	udpMinStride = 256
	// udpRxMaxIov is the most iovecs a slot's row has.
	udpRxMaxIov = (udpGROData + udpMinStride - 1) / udpMinStride
)

// layout is where a receive slot's data lies: a row of iovecs, each stride
// bytes behind room bytes of header room. A byte at offset o of the
// received message (its logical offset) lies at phys(o) in the slot.
type layout struct{ stride, room int }

func (y layout) phys(o int) int { return o/y.stride*(y.room+y.stride) + y.room + o%y.stride }

// inPlace reports whether segment [a, e) (e > a) can be handed up where it
// lies: within one iovec, at its start, where header room precedes it.
func (y layout) inPlace(a, e int) bool { return a%y.stride == 0 && (e-1)/y.stride == a/y.stride }

// gather copies the message's bytes [a, e) out of slot into dst.
func (y layout) gather(dst, slot []byte, a, e int) {
	for a < e {
		p := y.phys(a)
		n := min(e-a, y.stride-a%y.stride)
		copy(dst[:n], slot[p:p+n])
		dst, a = dst[n:], a+n
	}
}

// compact moves the message's bytes [0, e), a first segment longer than
// the stride, to lie contiguous behind the first iovec's room: each later
// piece moves back over the room before it. It writes only below phys(e),
// so the segments after the first are still where phys says.
func (y layout) compact(slot []byte, e int) {
	for a := y.stride; a < e; a += y.stride {
		p := y.phys(a)
		n := min(e-a, y.stride)
		copy(slot[y.room+a:y.room+a+n], slot[p:p+n])
	}
}

// segments returns how many packets a message of n bytes that GRO cut at
// seg bytes holds (all seg long but the last, which may be shorter); ok is
// false for a segment size no RoCEv2 sender cuts at.
func segments(n, seg int) (int, bool) {
	if n <= 0 || seg < udpMinSeg || seg > udpGROData {
		return 0, false
	}
	return (n + seg - 1) / seg, true
}

// segment returns packet k's bytes [a, e) of a message of n bytes cut at seg.
func segment(k, n, seg int) (a, e int) {
	a = k * seg
	return a, min(a+seg, n)
}

// firstStride is the stride a GRO socket starts with: a full packet of
// the largest RoCE MTU the link's IP MTU carries (BTH, payload, ICRC), the
// segment size of a message's MIDDLE packets.
func firstStride(ipMTU int) int {
	pmtu := 256
	for _, p := range []int{4096, 2048, 1024, 512} {
		if p+inet.IPv6HeaderLen+inet.UDPHeaderLen+bth.BTHLen+bth.ICRCLen <= ipMTU {
			pmtu = p
			break
		}
	}
	return pmtu + bth.BTHLen + bth.ICRCLen
}

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
	lay      layout // of the slots recvmmsg last filled
	learnt   int    // the stride the next recvmmsg lays the slots out for
	maxIov   int    // iovecs per slot at most
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
	gaps     rxGaps        // the receiver's only
	packets  atomic.Uint64 // delivered from this queue
}

// udpRxMsg is what one received message says about its packets.
type udpRxMsg struct {
	from     netip.AddrPort
	tos, ttl uint8
	segLen   int // GRO segment size, or the whole length
	len      int
	nseg     int
	bad      bool // a malformed UDP_GRO control message
}

func (r *udpRx) init(l *Link, raw syscall.RawConn) {
	r.l, r.raw = l, raw
	n := udpSlots
	r.dataCap = nic.MaxFrame
	r.lay = layout{stride: nic.MaxFrame, room: udpHdrRoom}
	r.maxIov = 1
	r.slot = udpHdrRoom + nic.MaxFrame
	if l.gro {
		n, r.dataCap = udpGROSlot, udpGROData
		r.copies = make([]byte, udpCopies*nic.BufSize)
		r.lay.stride = firstStride(l.info.MTU)
		r.maxIov = udpRxMaxIov
		// Room for the most iovecs, and for the data rounded up to the
		// longest stride.
		r.slot = udpRxMaxIov*udpHdrRoom + udpGROData + nic.MaxFrame
	}
	r.learnt = r.lay.stride
	r.buf = make([]byte, n*r.slot)
	r.msgs = make([]unix.Mmsghdr, n)
	r.iov = make([]unix.Iovec, n*r.maxIov)
	r.names = make([][linkio.SockaddrLen]byte, n)
	r.ctrl = make([][udpCtrlLen]byte, n)
	for i := range n {
		h := &r.msgs[i].Hdr
		h.Iov = &r.iov[i*r.maxIov]
		h.Name = &r.names[i][0]
		h.Control = &r.ctrl[i][0]
	}
	r.relayout()
	budget := l.cfg.BusyPoll
	// Adaptive busy polling, the default (BusyPoll 0), needs a cheap
	// clock: it reads it at every receive.
	adaptive := budget == 0 && spin.Every(true) == 1
	// fn takes the queue before each recvmmsg and keeps it only when
	// something came: the receiver waits for the socket without it, so a
	// poller can take what arrives meanwhile. It blocks for the queue
	// rather than give up and wait for the socket again: a packet a
	// poller left behind has signalled readiness already, and would wait
	// for the next one.
	r.fn = func(fd uintptr) bool {
		var since time.Time
		var spinFor time.Duration
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
				if l.closing.IsClosed() {
					return false
				}
				if since.IsZero() {
					spinFor = budget
					if adaptive && r.hold.Polls() == 0 {
						spinFor = r.gaps.budget()
					}
					if spinFor <= 0 {
						return false
					}
					since = time.Now()
				} else if time.Since(since) >= spinFor {
					if adaptive {
						r.gaps.spun(false)
					}
					return false
				}
				runtime.Gosched()
				continue
			}
			if adaptive && n > 0 {
				if !since.IsZero() {
					r.gaps.spun(true)
				}
				r.gaps.received(time.Now())
			}
			r.n, r.errno = n, e
			return true
		}
	}
	r.pollFn = func(fd uintptr) {
		r.prep(r.pwant)
		r.n, r.errno = linkio.Mmsg(unix.SYS_RECVMMSG, fd, r.msgs[:r.want], 0)
	}
	if raw == nil {
		return // a test's receive state, fed by hand
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

// relayout points every slot's iovecs at a row of r.lay.stride bytes
// each, enough of them to hold r.dataCap.
func (r *udpRx) relayout() {
	k := (r.dataCap + r.lay.stride - 1) / r.lay.stride
	for i := range r.msgs {
		slot := r.buf[i*r.slot : (i+1)*r.slot]
		for j := range k {
			v := &r.iov[i*r.maxIov+j]
			v.Base = &slot[r.lay.phys(j*r.lay.stride)]
			v.SetLen(r.lay.stride)
		}
		r.msgs[i].Hdr.SetIovlen(k)
	}
}

// prep readies the message headers for a recvmmsg of up to want (under
// hold), laid out for the stride last learnt: every message before has
// been delivered.
func (r *udpRx) prep(want int) {
	if r.learnt != r.lay.stride {
		r.lay.stride = r.learnt
		r.relayout()
	}
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
			// The kernel puts the segment size in an int (udp_cmsg_recv).
			if g := linkio.CmsgInt(d); len(d) == 4 && g >= udpMinSeg && g <= udpGROData {
				m.segLen = min(g, m.len)
			} else {
				m.bad = true
			}
		case level == unix.SOL_SOCKET && typ == unix.SO_RXQ_OVFL:
			r.l.ctr.RxKernelDrops.Store(uint64(linkio.CmsgInt(d)))
		}
	})
	if m.bad {
		return false
	}
	m.nseg, ok = segments(m.len, m.segLen)
	if ok && m.nseg > 1 && m.segLen != r.lay.stride && m.segLen >= udpMinStride && m.segLen <= nic.MaxFrame && r.l.gro {
		// Lay the next receive out for this flow's segment size.
		r.learnt = m.segLen
	}
	return ok
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
	var moved uint64
	y := r.lay
loop:
	for n < len(frames) && r.msg < r.got {
		if r.seg == 0 && !r.parseMsg(r.msg) {
			dropped++
			r.msg++
			continue
		}
		m := &r.cur
		a, e := segment(r.seg, m.len, m.segLen)
		if hl+e-a > nic.MaxFrame {
			// Longer than any RoCE frame (a jumbo datagram, or GRO
			// segments of them): dropped, and never copied into a
			// buffer of one frame's size.
			dropped++
			r.next(m)
			continue
		}
		slot := r.buf[r.msg*r.slot : (r.msg+1)*r.slot]
		var b []byte
		switch {
		case y.inPlace(a, e):
			p := y.phys(a)
			b = slot[p-hl-nic.Headroom : p+e-a]
		case r.seg == 0:
			// A first packet longer than the stride (a FIRST with its
			// extended headers, alone): its tail moves back over the
			// header room it crossed.
			y.compact(slot, e)
			b = slot[y.room-hl-nic.Headroom : y.room+e]
			moved++
		default:
			if copies == udpCopies {
				break loop // the rest next time
			}
			b = r.copies[copies*nic.BufSize : copies*nic.BufSize+nic.Headroom+hl+e-a]
			y.gather(b[nic.Headroom+hl:], slot, a, e)
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
	linkio.AddIf(&l.ctr.RxGROCopies, uint64(copies)+moved)
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
