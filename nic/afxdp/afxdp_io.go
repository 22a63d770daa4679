package afxdp

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/internal/linkio"
	"golang.org/x/sys/unix"
)

// xdpRx is the receive state: chunks lent to the holder until it lets the
// queue go, and buffers for frames that arrived over two chunks.
type xdpRx struct {
	// hold is the rx ring's (nic.Poller): the fields below aside are its
	// holder's.
	hold   nic.QueueHold
	aside  bool // Read's function saw pollers active (the receiver's only)
	l      *Link
	lent   []uint64
	copies []byte
	fn     func(fd uintptr) bool
}

const xdpCopies = 64

func (r *xdpRx) init(l *Link) {
	r.l = l
	r.lent = make([]uint64, 0, l.rx.size)
	r.copies = make([]byte, xdpCopies*nic.BufSize)
	// fn ends the wait for the socket when the ring has frames, or when
	// pollers took frames since the receiver's last return: they are
	// active, and Recv returns none so that its caller can stand aside
	// rather than wake for every frame they take.
	r.fn = func(uintptr) bool {
		if l.rx.pending() {
			return true
		}
		if r.hold.PollersTook() {
			r.aside = true
			return true
		}
		return false
	}
}

// Recv blocks until RoCEv2 frames for us arrive; see nic.Link. B starts at the
// Ethernet header and Off is the IP header's offset. It holds the ring
// from its return until the next call (nic.Poller).
func (l *Link) Recv(frames []nic.Frame) (int, error) {
	r := &l.xr
	if r.hold.ReceiverLetsGo() {
		r.release()
	}
	if len(frames) == 0 {
		return 0, nil
	}
	for {
		r.hold.Lock()
		if l.closing.IsClosed() {
			r.release()
			return 0, nic.ErrClosed
		}
		r.refill()
		if l.rx.avail() > 0 {
			if n := r.consume(frames); n > 0 {
				r.hold.ReceiverKeeps()
				return n, nil
			}
			r.release()
			continue
		}
		r.release()
		// The ring is read without the hold here: a frame a poller takes
		// meanwhile only makes the next round find none.
		r.aside = false
		if err := l.raw.Read(r.fn); err != nil {
			return 0, nic.ErrClosed
		}
		if r.aside {
			r.hold.StandAside()
			return 0, nil
		}
	}
}

// PollQueue takes what the rx ring holds without a system call; see
// nic.Poller. The link has one queue, 0.
func (l *Link) PollQueue(i int, frames []nic.Frame) int {
	r := &l.xr
	if i != 0 || len(frames) == 0 || !r.hold.TryLock() {
		return 0
	}
	// Under the hold: Close unmaps the ring only when nobody holds it.
	if l.closing.IsClosed() || !l.rx.pending() {
		r.release()
		return 0
	}
	r.refill()
	n := r.consume(frames)
	if n == 0 {
		r.release()
		return 0
	}
	r.hold.PollTook()
	return n
}

// EndPoll releases the ring after a PollQueue that returned frames.
func (l *Link) EndPoll(int) { l.xr.release() }

// EndRecv releases the ring if the receiver holds it; see nic.Poller.
func (l *Link) EndRecv(int) {
	if r := &l.xr; r.hold.ReceiverLetsGo() {
		r.release()
	}
}

// release lets go of the hold. After Close, the last holder unmaps the
// rings: Close could not while it held them. Checked after the unlock
// too, so that a Close between the check and the unlock, whose TryLock
// failed, is not missed.
func (r *xdpRx) release() {
	l := r.l
	if l.closing.IsClosed() {
		l.unmap()
	}
	r.hold.Unlock()
	if l.closing.IsClosed() && r.hold.TryLock() {
		l.unmap()
		r.hold.Unlock()
	}
}

// refill gives the chunks of the frames handed out last time back to the
// kernel (under hold: the last holder is done with them). The fill ring
// has room for every receive chunk, so this never waits.
func (r *xdpRx) refill() {
	f := &r.l.fill
	if len(r.lent) == 0 {
		return
	}
	p := *f.prod
	for i, a := range r.lent {
		*f.addr(p + uint32(i)) = a
	}
	f.produce(uint32(len(r.lent)))
	r.lent = r.lent[:0]
}

func (r *xdpRx) consume(frames []nic.Frame) int {
	l := r.l
	rx := &l.rx
	avail := rx.avail()
	idx := *rx.cons
	n, copies := 0, 0
	var by, dropped uint64
	i := uint32(0)
	for i < avail && n < len(frames) {
		d := *rx.desc(idx + i)
		var b []byte
		if d.Options&unix.XDP_PKT_CONTD == 0 {
			b = l.umem[d.Addr : d.Addr+uint64(d.Len)]
			r.lent = append(r.lent, d.Addr&^(xdpChunk-1))
			i++
		} else {
			// A multi-buffer frame: its descriptors are published together.
			j := i
			for j < avail && rx.desc(idx+j).Options&unix.XDP_PKT_CONTD != 0 {
				j++
			}
			if j == avail || copies == xdpCopies {
				break
			}
			j++
			buf := r.copies[copies*nic.BufSize : (copies+1)*nic.BufSize]
			k, ok := 0, true
			for ; i < j; i++ {
				dd := rx.desc(idx + i)
				r.lent = append(r.lent, dd.Addr&^(xdpChunk-1))
				if k+int(dd.Len) > len(buf) {
					ok = false
					continue
				}
				k += copy(buf[k:], l.umem[dd.Addr:dd.Addr+uint64(dd.Len)])
			}
			if !ok {
				dropped++
				continue
			}
			b = buf[:k]
			copies++
		}
		f, err := bth.DecodeEthernet(b)
		if err != nil || !l.ours(f.L3()) {
			dropped++
			continue
		}
		off := len(f.Ethernet())
		frames[n] = nic.Frame{B: b[:off+len(f.L3())], Off: off}
		by += uint64(len(f.L3()))
		n++
	}
	rx.release(i)
	l.ctr.RxBatches.Add(1)
	linkio.AddIf(&l.ctr.RxPackets, uint64(n))
	linkio.AddIf(&l.ctr.RxBytes, by)
	linkio.AddIf(&l.ctr.RxDropped, dropped)
	return n
}

// ours reports whether a datagram is addressed to one of the link's
// addresses (the program steers all of UDP 4791 on the queue).
func (l *Link) ours(dg []byte) bool {
	dst, _, _, ok := linkio.IPDst(dg)
	if !ok {
		return false
	}
	for _, a := range l.cfg.Addrs {
		if a.WithZone("") == dst {
			return true
		}
	}
	return false
}

// Send copies each frame behind an Ethernet header into UMEM chunks and
// kicks the kernel; see nic.Link.
func (l *Link) Send(frames []nic.Frame) (int, error) {
	if l.closing.IsClosed() {
		return 0, nic.ErrClosed
	}
	l.txMu.Lock()
	defer l.txMu.Unlock()
	if l.closing.IsClosed() { // the rings may be unmapped (under txMu)
		return 0, nic.ErrClosed
	}
	l.reclaim()
	tx := &l.tx
	var pk, by, dropped, noNeigh uint64
	queued := uint32(0)
	for _, f := range frames {
		if f.Off < 0 || f.Off > len(f.B) {
			dropped++
			continue
		}
		dg := f.B[f.Off:]
		dst, tot, et, ok := linkio.IPDst(dg)
		need := bth.EthHeaderLen + tot
		chunks := (need + xdpChunk - 1) / xdpChunk
		if !ok || tot > l.info.MTU || chunks > 2 || (chunks > 1 && !l.sg) {
			dropped++
			continue
		}
		mac, ok := l.eth.Hops.Lookup(dst)
		if !ok {
			noNeigh++
			continue
		}
		if len(l.txFree) < chunks || tx.free()-queued < uint32(chunks) {
			tx.produce(queued)
			queued = 0
			l.kick()
			l.reclaim()
			if len(l.txFree) < chunks || tx.free() < uint32(chunks) {
				dropped++
				continue
			}
		}
		// Ethernet header then the datagram, across one or two chunks.
		var h [bth.EthHeaderLen]byte
		copy(h[0:6], mac[:])
		copy(h[6:12], l.mac[:])
		binary.BigEndian.PutUint16(h[12:], et)
		src, used := dg[:tot], 0
		for c := range chunks {
			a := l.txFree[len(l.txFree)-1]
			l.txFree = l.txFree[:len(l.txFree)-1]
			dstb := l.umem[a : a+xdpChunk]
			k := 0
			if c == 0 {
				k = copy(dstb, h[:])
			}
			m := copy(dstb[k:], src[used:])
			used += m
			k += m
			d := tx.desc(*tx.prod + queued)
			d.Addr, d.Len, d.Options = a, uint32(k), 0
			if c < chunks-1 {
				d.Options = unix.XDP_PKT_CONTD
			}
			queued++
		}
		pk++
		by += uint64(tot)
	}
	tx.produce(queued)
	if pk > 0 {
		l.kick()
		l.ctr.TxBatches.Add(1)
	}
	linkio.AddIf(&l.ctr.TxPackets, pk)
	linkio.AddIf(&l.ctr.TxBytes, by)
	linkio.AddIf(&l.ctr.TxDropped, dropped+noNeigh)
	linkio.AddIf(&l.ctr.TxNoNeighbour, noNeigh)
	return len(frames), nil
}

// kick makes the kernel send what the tx ring holds. In copy mode each
// sendto sends a bounded batch and answers EAGAIN while more is left.
// The socket is reached through the file, which holds it open meanwhile:
// Close closes it without txMu, and a Send past its check for Close
// would otherwise kick a descriptor number closed, or reused by then
// for another socket, which would send that socket an empty datagram.
func (l *Link) kick() { _ = l.raw.Control(l.kickFn) }

// kickFD is kick's loop on the socket's descriptor; l.kickFn, made once
// when the link opens, calls it, so that a kick allocates no closure.
func (l *Link) kickFD(fd uintptr) {
	tx := &l.tx
	for tries := 0; *tx.prod != atomic.LoadUint32(tx.cons) && tries < 10000; tries++ {
		_, _, e := unix.Syscall6(unix.SYS_SENDTO, fd, 0, 0, unix.MSG_DONTWAIT, 0, 0)
		if e != 0 && e != unix.EAGAIN && e != unix.EBUSY && e != unix.ENOBUFS && e != unix.EINTR {
			return
		}
	}
}

// reclaim returns completed tx chunks to the free list.
func (l *Link) reclaim() {
	c := &l.comp
	n := c.avail()
	idx := *c.cons
	for i := range n {
		l.txFree = append(l.txFree, *c.addr(idx + i)&^(xdpChunk-1))
	}
	c.release(n)
}
