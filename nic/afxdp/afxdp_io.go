package afxdp

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/internal/linkio"
	"golang.org/x/sys/unix"
)

// xdpRx is the receive state: chunks lent to the caller until the next
// Recv, and buffers for frames that arrived over two chunks.
type xdpRx struct {
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
	r.fn = func(uintptr) bool { return l.rx.avail() > 0 }
}

// Recv blocks until RoCEv2 frames for us arrive; see nic.Link. B starts at the
// Ethernet header and Off is the IP header's offset.
func (l *Link) Recv(frames []nic.Frame) (int, error) {
	r := &l.xr
	if len(frames) == 0 {
		return 0, nil
	}
	for {
		if l.closing.IsClosed() {
			return 0, nic.ErrClosed
		}
		r.refill()
		if l.rx.avail() == 0 {
			if err := l.raw.Read(r.fn); err != nil {
				return 0, nic.ErrClosed
			}
		}
		if n := r.consume(frames); n > 0 {
			return n, nil
		}
	}
}

// refill gives the chunks of the frames handed out last time back to the
// kernel. The fill ring has room for every receive chunk, so this never
// waits.
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
		if !ok || tot > l.info.MTU || chunks > 2 || (chunks > 1 && !l.frags) {
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
func (l *Link) kick() {
	tx := &l.tx
	for tries := 0; *tx.prod != atomic.LoadUint32(tx.cons) && tries < 10000; tries++ {
		_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(l.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
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
