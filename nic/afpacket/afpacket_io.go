package afpacket

import (
	"encoding/binary"
	"fmt"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/internal/linkio"
	"github.com/goroce/goroce/nic/vnet"
	"golang.org/x/sys/unix"
)

// afpMaxMsgs is how many frames one sendmmsg sends, as the UDP link's.
const afpMaxMsgs = 64

// afpTx is the scratch of one AF_PACKET Send call.
type afpTx struct {
	l     *Link
	msgs  [afpMaxMsgs]unix.Mmsghdr
	iov   [afpMaxMsgs]unix.Iovec
	bytes [afpMaxMsgs]int
	linkio.MmsgSend
}

func newAFPTx(l *Link) *afpTx {
	tx := &afpTx{l: l}
	for i := range tx.msgs {
		tx.msgs[i].Hdr.Iov = &tx.iov[i]
		tx.msgs[i].Hdr.SetIovlen(1)
	}
	tx.Init(tx.msgs[:])
	return tx
}

// Send writes an Ethernet header (and VLAN tag) into each frame's headroom
// and sends the frames; see nic.Link. Frames to a next hop whose MAC is not
// known yet are dropped and counted while the kernel resolves it.
func (l *Link) Send(frames []nic.Frame) (int, error) {
	if l.closing.IsClosed() {
		return 0, nic.ErrClosed
	}
	tx := l.txPool.Get().(*afpTx)
	defer l.txPool.Put(tx)
	hl := bth.EthHeaderLen
	if l.cfg.VLAN != 0 {
		hl += bth.VLANTagLen
	}
	var dropped, noNeigh uint64
	for i := range frames {
		f := frames[i]
		if f.Off < hl || f.Off > len(f.B) {
			dropped++
			continue
		}
		dst, tot, et, ok := linkio.IPDst(f.B[f.Off:])
		if !ok || tot > l.info.MTU {
			dropped++
			continue
		}
		mac, ok := l.eth.Hops.Lookup(dst)
		if !ok {
			noNeigh++
			continue
		}
		h := f.B[f.Off-hl : f.Off]
		copy(h[0:6], mac[:])
		copy(h[6:12], l.mac[:])
		if l.cfg.VLAN != 0 {
			binary.BigEndian.PutUint16(h[12:], bth.EtherTypeVLAN)
			binary.BigEndian.PutUint16(h[14:], uint16(l.cfg.Priority)<<13|l.cfg.VLAN)
		}
		binary.BigEndian.PutUint16(h[hl-2:], et)
		tx.iov[tx.N].Base = &h[0]
		tx.iov[tx.N].SetLen(hl + tot)
		tx.bytes[tx.N] = tot
		tx.N++
		if tx.N == len(tx.msgs) {
			if err := tx.flush(); err != nil {
				return i + 1, err
			}
		}
	}
	if tx.N > 0 {
		if err := tx.flush(); err != nil {
			return len(frames), err
		}
	}
	linkio.AddIf(&l.ctr.TxDropped, dropped+noNeigh)
	linkio.AddIf(&l.ctr.TxNoNeighbour, noNeigh)
	return len(frames), nil
}

func (tx *afpTx) flush() error {
	l := tx.l
	var pk, by, dropped, batches uint64
	var err error
	for tx.Off = 0; tx.Off < tx.N; {
		if werr := l.txRaw.Write(tx.Fn); werr != nil {
			err = nic.ErrClosed
			break
		}
		if tx.Sent > 0 {
			for _, b := range tx.bytes[tx.Off : tx.Off+tx.Sent] {
				by += uint64(b)
			}
			pk += uint64(tx.Sent)
			batches++
			tx.Off += tx.Sent
			continue
		}
		dropped++ // ENOBUFS, ENETDOWN, EMSGSIZE...
		tx.Off++
	}
	linkio.AddIf(&l.ctr.TxPackets, pk)
	linkio.AddIf(&l.ctr.TxBytes, by)
	linkio.AddIf(&l.ctr.TxDropped, dropped)
	linkio.AddIf(&l.ctr.TxBatches, batches)
	for j := range tx.N {
		tx.iov[j].Base = nil
	}
	tx.N = 0
	return err
}

// afpRx receives whole frames into slots with recvmmsg, each behind the
// virtio_net_hdr PACKET_VNET_HDR puts there. A UDP GSO super-frame (a
// Linux UDP sender on the same veth pair, whose offload hands the peer
// the unsegmented send) is cut into its datagrams, as the wire would have
// carried them (nic/vnet); the rest are handed over in place.
type afpRx struct {
	// hold is the socket's (nic.Poller): every field below aside is its
	// holder's.
	hold   nic.QueueHold
	aside  bool // Read's function saw pollers active (the receiver's only)
	pollFn func(fd uintptr)
	rwant  int // messages the receiver asks for (the receiver's only)
	pwant  int // messages a poller asks for

	l     *Link
	slot  int
	buf   []byte
	msgs  []unix.Mmsghdr
	iov   []unix.Iovec
	want  int
	n     int
	errno unix.Errno
	fn    func(fd uintptr) bool
	// The batch is handed out over as many Recv calls as it takes: next
	// is the first message not yet handed out, seg the next datagram of
	// the super-frame being cut.
	next, seg int
	segs      []byte // cut datagrams, BufSize each, reused every Recv
}

// afpSlots is the recvmmsg batch; afpSegs how many datagrams one Recv may
// cut from super-frames.
const (
	afpSlots = 64
	afpSegs  = 64
)

func (r *afpRx) init(l *Link) {
	r.l = l
	r.slot = (vnet.HdrLen + 65536 + 63) &^ 63 // a GSO super-frame is up to 64 KiB
	r.buf = make([]byte, afpSlots*r.slot)
	r.segs = make([]byte, afpSegs*nic.BufSize)
	r.msgs = make([]unix.Mmsghdr, afpSlots)
	r.iov = make([]unix.Iovec, afpSlots)
	for i := range afpSlots {
		r.iov[i].Base = &r.buf[i*r.slot]
		r.iov[i].SetLen(r.slot)
		r.msgs[i].Hdr.Iov = &r.iov[i]
		r.msgs[i].Hdr.SetIovlen(1)
	}
	// fn takes the socket before each recvmmsg and keeps it only when
	// something came: the receiver waits for the socket without it, so a
	// poller can take what arrives meanwhile (as the udp link's).
	r.fn = func(fd uintptr) bool {
		r.hold.Lock()
		if r.next < r.n {
			// A poller received more than it took: those first.
			r.errno = 0
			return true
		}
		n, e := linkio.Mmsg(unix.SYS_RECVMMSG, fd, r.msgs[:r.prep(r.rwant)], 0)
		if e == unix.EAGAIN || e == unix.EINTR {
			r.hold.Unlock()
			if r.hold.PollersTook() {
				// Pollers took frames since the receiver's last return:
				// Recv returns none so that its caller can stand aside.
				r.aside = true
				return true
			}
			return false
		}
		r.n, r.next, r.seg, r.errno = n, 0, 0, e
		return true
	}
	r.pollFn = func(fd uintptr) {
		r.n, r.errno = linkio.Mmsg(unix.SYS_RECVMMSG, fd, r.msgs[:r.prep(r.pwant)], 0)
		r.next, r.seg = 0, 0
	}
}

// prep readies the message headers for a recvmmsg of up to want (under
// hold).
func (r *afpRx) prep(want int) int {
	r.want = min(max(want, 1), len(r.msgs))
	for i := range r.want {
		r.msgs[i].Hdr.Flags = 0
	}
	return r.want
}

// Recv blocks until RoCEv2 frames for us arrive; see nic.Link. A frame's B
// starts at its Ethernet header and Off is where the IP header starts. It
// holds the socket from its return until the next call (nic.Poller).
func (l *Link) Recv(frames []nic.Frame) (int, error) {
	r := &l.r
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
		if r.next >= r.n {
			r.hold.Unlock()
			r.aside = false
			r.rwant = len(frames)
			if err := l.rxRaw.Read(r.fn); err != nil {
				return 0, nic.ErrClosed
			}
			if r.aside {
				r.hold.StandAside()
				return 0, nil
			}
			// fn returns holding the socket.
			if r.errno != 0 {
				e := r.errno
				r.n, r.next = 0, 0
				r.hold.Unlock()
				return 0, fmt.Errorf("nic: afpacket %s: recvmmsg: %w", l.cfg.Interface, e)
			}
			l.ctr.RxBatches.Add(1)
		}
		if n := r.deliver(frames); n > 0 {
			r.hold.ReceiverKeeps()
			return n, nil
		}
		r.hold.Unlock()
	}
}

// PollQueue receives what has arrived without waiting; see nic.Poller.
// The link has one queue, 0.
func (l *Link) PollQueue(i int, frames []nic.Frame) int {
	r := &l.r
	if i != 0 || len(frames) == 0 || l.closing.IsClosed() || !r.hold.TryLock() {
		return 0
	}
	if r.next >= r.n {
		r.pwant = len(frames)
		err := l.rxRaw.Control(r.pollFn)
		if err != nil || r.errno != 0 || r.n <= 0 {
			// Nothing (EAGAIN), or an error the receiver meets and reports.
			r.n, r.next = 0, 0
			r.hold.Unlock()
			return 0
		}
		l.ctr.RxBatches.Add(1)
		r.hold.PollTook()
	}
	n := r.deliver(frames)
	if n == 0 {
		r.hold.Unlock()
	}
	return n
}

// EndPoll releases the socket after a PollQueue that returned frames.
func (l *Link) EndPoll(int) { l.r.hold.Unlock() }

// EndRecv releases the socket if the receiver holds it; see nic.Poller.
func (l *Link) EndRecv(int) {
	if r := &l.r; r.hold.ReceiverLetsGo() {
		r.hold.Unlock()
	}
}

// deliver hands out frames of the batch received last, cutting GSO
// super-frames into datagrams (under hold).
func (r *afpRx) deliver(frames []nic.Frame) int {
	l := r.l
	n, cut := 0, 0
	var by, dropped uint64
	take := func(b []byte) { // lend an Ethernet frame holding RoCEv2
		f, err := bth.DecodeEthernet(b)
		if err != nil {
			dropped++
			return
		}
		off := len(f.Ethernet())
		frames[n] = nic.Frame{B: b[:off+len(f.L3())], Off: off}
		by += uint64(len(f.L3()))
		n++
	}
	for r.next < r.n && n < len(frames) && cut < afpSegs {
		m := &r.msgs[r.next]
		b := r.buf[r.next*r.slot : r.next*r.slot+int(m.Len)]
		if m.Hdr.Flags&unix.MSG_TRUNC != 0 || len(b) < vnet.HdrLen {
			dropped++
			r.next++
			continue
		}
		h, fr := vnet.Parse(b), b[vnet.HdrLen:]
		if !h.IsUDPGSO() {
			r.next++
			take(fr)
			continue
		}
		total, _, err := vnet.UDPSegments(fr, h)
		if err != nil {
			dropped++
			r.next++
			continue
		}
		for ; r.seg < total && n < len(frames) && cut < afpSegs; r.seg++ {
			dst := r.segs[cut*nic.BufSize : (cut+1)*nic.BufSize]
			cut++
			if k, err := vnet.UDPSegment(dst, fr, h, r.seg); err == nil {
				take(dst[:k])
			} else {
				dropped++
			}
		}
		if r.seg == total {
			r.next++
			r.seg = 0
			linkio.AddIf(&l.ctr.RxGROSegments, uint64(total))
		}
	}
	linkio.AddIf(&l.ctr.RxPackets, uint64(n))
	linkio.AddIf(&l.ctr.RxBytes, by)
	linkio.AddIf(&l.ctr.RxDropped, dropped)
	return n
}
