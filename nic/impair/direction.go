package impair

import (
	"encoding/binary"
	"math/rand/v2"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goroce/goroce/nic/vnet"
	"golang.org/x/sys/unix"
)

// batch is how many frames one recvmmsg or sendmmsg moves.
const batch = 32

// rxSlot holds a virtio_net_hdr and the largest GSO super-frame.
const rxSlot = vnet.HdrLen + 65536 + 64

// direction forwards the frames arriving on one interface to the other.
// One goroutine runs it; nothing in the loop allocates.
type direction struct {
	in, out, wake int
	maxFrame      int // largest Ethernet frame the egress takes: MTU + header + one VLAN tag
	queue         int
	faults        atomic.Pointer[Faults]
	rng           *rand.Rand
	ctr           counters
	start         time.Time

	rxBuf  []byte
	rxMsgs [batch]unix.Mmsghdr
	rxIov  [batch]unix.Iovec

	// Packets to send at the end of this round, each behind a header.
	tx      []txEntry
	txMsgs  [batch]unix.Mmsghdr
	txIov   [batch][2]unix.Iovec
	zeroHdr [vnet.HdrLen]byte

	pool  [][]byte // free packet buffers, for held packets and GSO segments
	owned [][]byte // pool buffers to return once this round's sends are done
	held  heldQueue
	seq   uint64

	// The congested egress of Faults.Bottleneck, made when a Faults
	// naming one is first seen.
	bneck   *Queue
	bneckOf *Bottleneck
}

type txEntry struct {
	hdr   []byte // virtio_net_hdr to send with the frame
	frame []byte
}

func newDirection(in, out, wake, mtu, queue int, seed, dir uint64) (*direction, error) {
	d := &direction{in: in, out: out, wake: wake, queue: queue, maxFrame: mtu + 14 + 4,
		rng: rand.New(rand.NewPCG(seed, dir)), start: time.Now()}
	d.rxBuf = make([]byte, batch*rxSlot)
	for i := range d.rxMsgs {
		d.rxIov[i].Base = &d.rxBuf[i*rxSlot]
		d.rxIov[i].SetLen(rxSlot)
		d.rxMsgs[i].Hdr.Iov = &d.rxIov[i]
		d.rxMsgs[i].Hdr.SetIovlen(1)
	}
	for i := range d.txMsgs {
		d.txMsgs[i].Hdr.Iov = &d.txIov[i][0]
		d.txMsgs[i].Hdr.SetIovlen(2)
	}
	// Room for a full queue of held packets and the segments of a GSO
	// super-frame or two; segment flushes what it has cut when the pool
	// runs dry, which returns the buffers.
	n := queue + 2*batch
	size := (d.maxFrame + 63) &^ 63
	arena := make([]byte, n*size)
	d.pool = make([][]byte, 0, n)
	for i := range n {
		d.pool = append(d.pool, arena[i*size:(i+1)*size:(i+1)*size])
	}
	d.owned = make([][]byte, 0, n)
	d.tx = make([]txEntry, 0, 2*n)
	d.held.items = make([]heldPacket, 0, queue)
	return d, nil
}

func (d *direction) now() int64 { return int64(time.Since(d.start)) }

// run forwards until the wake eventfd fires.
func (d *direction) run() {
	fds := []unix.PollFd{{Fd: int32(d.in), Events: unix.POLLIN}, {Fd: int32(d.wake), Events: unix.POLLIN}}
	var ts unix.Timespec
	for {
		var timeout *unix.Timespec
		if len(d.held.items) > 0 {
			ts = unix.NsecToTimespec(max(0, d.held.items[0].due-d.now()))
			timeout = &ts
		}
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Ppoll(fds, timeout, nil); err != nil && err != unix.EINTR {
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		if fds[0].Revents&unix.POLLIN != 0 {
			d.receive()
		}
		d.releaseDue()
		d.flush()
	}
}

// receive reads one batch of frames and decides each one's fate.
func (d *direction) receive() {
	for i := range d.rxMsgs {
		d.rxMsgs[i].Hdr.Flags = 0
	}
	n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(d.in), uintptr(unsafe.Pointer(&d.rxMsgs[0])), batch, unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return
	}
	for i := range int(n) {
		m := &d.rxMsgs[i]
		b := d.rxBuf[i*rxSlot : i*rxSlot+int(m.Len)]
		d.ctr.frames.Add(1)
		if m.Hdr.Flags&unix.MSG_TRUNC != 0 || len(b) < vnet.HdrLen {
			d.ctr.dropped.Add(1)
			continue
		}
		h, frame := vnet.Parse(b), b[vnet.HdrLen:]
		switch {
		case h.IsUDPGSO():
			d.segment(frame, h)
		case h.GSOType != vnet.GSONone:
			// TCP and the like: not ours to impair; the egress
			// segments it as it would have.
			d.tx = append(d.tx, txEntry{hdr: b[:vnet.HdrLen], frame: frame})
		default:
			if vnet.CompleteChecksum(frame, h) != nil {
				d.ctr.dropped.Add(1)
				continue
			}
			d.packet(frame, nil)
		}
	}
}

// segment cuts a UDP GSO super-frame into pool buffers, one per datagram.
func (d *direction) segment(frame []byte, h vnet.Hdr) {
	n, _, err := vnet.UDPSegments(frame, h)
	if err != nil {
		d.ctr.dropped.Add(1)
		return
	}
	d.ctr.segmented.Add(1)
	for i := range n {
		buf := d.get()
		if buf == nil {
			d.flush()
			if buf = d.get(); buf == nil { // the queue holds every buffer
				d.ctr.dropped.Add(uint64(n - i))
				return
			}
		}
		k, err := vnet.UDPSegment(buf, frame, h, i)
		if err != nil {
			d.put(buf)
			d.ctr.dropped.Add(1)
			continue
		}
		d.packet(buf[:k], buf)
	}
}

// packet applies the faults to one packet. buf is the pool buffer holding
// it, or nil if it lies in the receive buffer.
func (d *direction) packet(p, buf []byte) {
	d.ctr.packets.Add(1)
	if len(p) > d.maxFrame {
		d.ctr.dropped.Add(1)
		d.put(buf)
		return
	}
	f := d.faults.Load()
	if !f.AllFrames && !isRoCE(p) {
		d.send(p, buf, 1)
		return
	}
	d.ctr.impaired.Add(1)
	v := Pass
	if f.Filter != nil {
		v = f.Filter(p)
	}
	// Every packet draws the same numbers whatever the outcome, so one
	// fault's probability does not shift the others' decisions.
	r := d.rng
	lose := r.Float64() < f.Loss || v == Drop
	dup := r.Float64() < f.Duplicate || v == Duplicate
	reorder := r.Float64() < f.Reorder
	corrupt := r.Float64() < f.Corrupt
	bit := r.Uint64()
	jitter := r.Float64()
	if lose {
		d.ctr.lost.Add(1)
		d.put(buf)
		return
	}
	if corrupt && flipBit(p, bit) {
		d.ctr.corrupted.Add(1)
	}
	copies := 1
	if dup {
		d.ctr.duplicated.Add(1)
		copies = 2
	}
	delay := f.Delay + time.Duration(jitter*float64(f.Jitter))
	if reorder {
		d.ctr.reordered.Add(1)
		rd := f.ReorderDelay
		if rd == 0 {
			rd = 500 * time.Microsecond
		}
		delay += rd
	}
	due := d.now() + int64(delay)
	if f.Bottleneck != nil {
		var ok bool
		if due, ok = d.congest(f.Bottleneck, p, due); !ok {
			d.ctr.lost.Add(1)
			d.put(buf)
			return
		}
	}
	if due <= d.now() {
		d.send(p, buf, copies)
		return
	}
	d.hold(p, buf, copies, due)
}

// isRoCE reports whether a frame is a RoCEv2 packet: UDP to port 4791.
func isRoCE(p []byte) bool {
	_, l4, ok := vnet.UDP(p)
	return ok && binary.BigEndian.Uint16(p[l4+2:]) == 4791
}

// flipBit flips one bit of the UDP payload (the RoCEv2 headers, payload and
// ICRC) and fixes the UDP checksum, so the kernel delivers the packet and
// only the ICRC can tell: a corruption the path's checksums missed.
func flipBit(p []byte, r uint64) bool {
	_, l4, ok := vnet.UDP(p)
	if !ok || len(p) <= l4+8 {
		return false
	}
	pay := p[l4+8:]
	i := r % uint64(len(pay)*8)
	pay[i/8] ^= 1 << (i % 8)
	vnet.FixUDPChecksum(p)
	return true
}

// send queues a packet for this round's sendmmsg.
func (d *direction) send(p, buf []byte, copies int) {
	for range copies {
		d.tx = append(d.tx, txEntry{hdr: d.zeroHdr[:], frame: p})
	}
	if buf != nil {
		d.owned = append(d.owned, buf)
	}
}

// hold keeps a packet until due, in a pool buffer.
func (d *direction) hold(p, buf []byte, copies int, due int64) {
	if len(d.held.items) >= d.queue {
		d.ctr.dropped.Add(1)
		d.put(buf)
		return
	}
	if buf == nil {
		if buf = d.get(); buf == nil {
			d.ctr.dropped.Add(1)
			return
		}
		p = buf[:copy(buf, p)]
	}
	d.ctr.delayed.Add(1)
	d.seq++
	d.held.push(heldPacket{due: due, seq: d.seq, buf: buf, n: len(p), copies: uint8(copies)})
}

// releaseDue queues every held packet whose time has come.
func (d *direction) releaseDue() {
	now := d.now()
	for len(d.held.items) > 0 && d.held.items[0].due <= now {
		h := d.held.pop()
		d.send(h.buf[:h.n], h.buf, int(h.copies))
	}
}

// flush sends this round's packets and returns their pool buffers.
func (d *direction) flush() {
	for off := 0; off < len(d.tx); {
		k := min(batch, len(d.tx)-off)
		for j := range k {
			e := d.tx[off+j]
			d.txIov[j][0].Base, d.txIov[j][0].Len = &e.hdr[0], uint64(len(e.hdr))
			d.txIov[j][1].Base, d.txIov[j][1].Len = &e.frame[0], uint64(len(e.frame))
		}
		n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(d.out), uintptr(unsafe.Pointer(&d.txMsgs[0])), uintptr(k), unix.MSG_DONTWAIT, 0, 0)
		switch {
		case e == 0 && n > 0:
			d.ctr.forwarded.Add(uint64(n))
			off += int(n)
		default:
			// The first one failed (queue full, too big, link down):
			// lost like on a wire; go on with the rest.
			d.ctr.dropped.Add(1)
			off++
		}
	}
	clear(d.tx)
	d.tx = d.tx[:0]
	for i, b := range d.owned {
		d.put(b)
		d.owned[i] = nil
	}
	d.owned = d.owned[:0]
}

func (d *direction) get() []byte {
	n := len(d.pool)
	if n == 0 {
		return nil
	}
	b := d.pool[n-1]
	d.pool = d.pool[:n-1]
	return b[:cap(b)]
}

func (d *direction) put(b []byte) {
	if b != nil {
		d.pool = append(d.pool, b)
	}
}
