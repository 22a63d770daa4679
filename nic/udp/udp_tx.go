package udp

import (
	"encoding/binary"
	"net/netip"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/inet"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/internal/linkio"
	"golang.org/x/sys/unix"
)

// Send path of the UDP link. Consecutive frames from one source port go
// out in one sendmmsg; within it, consecutive equal-sized frames to one
// destination with the same traffic class become one UDP GSO message (the
// kernel, or the NIC, cuts it into packets), which is what lifts a socket
// from ~200k to over 1M packets/s.

const (
	udpMaxMsgs = 64 // messages per sendmmsg
	// udpMaxSegs stays within UDP_MAX_SEGMENTS on every kernel with GSO
	// (64 when it arrived in 4.18; 128 since 6.x).
	udpMaxSegs = 64
	// udpMaxGSO bounds a GSO message's payload: one IP datagram.
	udpMaxGSO = 65535 - 8 - 40
	udpMaxIov = 2 * 256
)

// udpTx is the scratch of one Send call; a pool hands one to each
// concurrent caller so that no call allocates.
type udpTx struct {
	l     *Link
	msgs  [udpMaxMsgs]unix.Mmsghdr
	names [udpMaxMsgs][linkio.SockaddrLen]byte
	ctrl  [udpMaxMsgs][3 * linkio.CmsgSpace]byte
	iov   [udpMaxIov]unix.Iovec
	icrc  [udpMaxIov][4]byte
	m     [udpMaxMsgs]udpMsg
	niov  int
	sock  int // index in l.tx of the socket the messages are for
	linkio.MmsgSend
}

type udpMsg struct {
	first   int // index of its first frame in the Send call
	nseg    int
	niov    int
	segLen  int // UDP payload length of each segment but maybe the last
	bytes   int // IP datagram bytes, for the counters
	closed  bool
	dst     netip.AddrPort
	tos     uint8
	ttl     uint8
	payload int // total UDP payload bytes
}

func newUDPTx(l *Link) *udpTx {
	tx := &udpTx{l: l}
	tx.Init(tx.msgs[:])
	return tx
}

// txFrame is what Send learns from one frame's headers.
type txFrame struct {
	sock     int
	dst      netip.AddrPort
	tos, ttl uint8
	payload  []byte // UDP payload: BTH through ICRC
	tot      int    // IP datagram length
	id       uint16 // IPv4 identification and DF the engine wrote
	df       bool
	first    bool // a message's FIRST packet: sent alone
}

// parse checks that the kernel will build the headers the frame carries
// (apart from the IPv4 identification, which Send corrects for) and
// returns what sending it needs.
func (l *Link) parse(f nic.Frame, t *txFrame) bool {
	if f.Off < 0 || f.Off > len(f.B) {
		return false
	}
	dg := f.B[f.Off:]
	var udp inet.UDP
	if !l.v6 {
		ip := inet.IPv4(dg)
		if len(dg) < inet.IPv4HeaderLen+inet.UDPHeaderLen || ip.Version() != 4 || ip.HeaderLen() != inet.IPv4HeaderLen ||
			ip.Protocol() != inet.ProtoUDP {
			return false // options or not UDP: the kernel would not send these headers
		}
		t.tot = int(ip.TotalLength())
		if t.tot > len(dg) || ip.IsFragment() || ip.Src() != l.cfg.Addr.Unmap() {
			return false
		}
		t.id, t.df = ip.ID(), ip.Flags()&inet.IPv4DontFragment != 0
		t.tos, t.ttl = ip.TOS(), ip.TTL()
		t.dst = netip.AddrPortFrom(ip.Dst(), 0)
		udp = inet.UDP(dg[inet.IPv4HeaderLen:t.tot])
	} else {
		ip := inet.IPv6(dg)
		if len(dg) < inet.IPv6HeaderLen+inet.UDPHeaderLen || ip.Version() != 6 || ip.NextHeader() != inet.ProtoUDP {
			return false
		}
		t.tot = inet.IPv6HeaderLen + int(ip.PayloadLength())
		if t.tot > len(dg) || ip.Src() != l.cfg.Addr.WithZone("") {
			return false
		}
		t.tos, t.ttl = ip.TrafficClass(), ip.HopLimit()
		t.dst = netip.AddrPortFrom(ip.Dst(), 0)
		udp = inet.UDP(dg[inet.IPv6HeaderLen:t.tot])
	}
	if len(udp) < inet.UDPHeaderLen+bth.BTHLen+bth.ICRCLen || int(udp.Length()) != len(udp) {
		return false
	}
	t.dst = netip.AddrPortFrom(t.dst.Addr(), udp.DstPort())
	sp := udp.SrcPort()
	t.sock = -1
	for i := range l.tx {
		if l.txPort[i] == sp {
			t.sock = i
			break
		}
	}
	t.payload = udp[inet.UDPHeaderLen:]
	t.first = bth.OpCode(t.payload[0]).Info().Pos == bth.PosFirst
	return t.sock >= 0
}

// Send transmits frames; see nic.Link. Frames the kernel cannot carry as they
// are (wrong source address or port, IP options, fragments) are dropped
// and counted.
func (l *Link) Send(frames []nic.Frame) (int, error) { return l.send(frames, 0) }

// send is Send counting dropped only frames from index seen on: those
// before it were counted by the call that sends them again after a
// refused GSO send.
func (l *Link) send(frames []nic.Frame, seen int) (int, error) {
	if l.closing.IsClosed() {
		return 0, nic.ErrClosed
	}
	tx := l.txPool.Get().(*udpTx)
	defer l.txPool.Put(tx)
	var t txFrame
	var dropped uint64
	for i := 0; i < len(frames); {
		if !l.parse(frames[i], &t) {
			if i >= seen {
				dropped++
			}
			i++
			seen = max(seen, i)
			continue
		}
		seen = max(seen, i+1)
		if tx.N > 0 && (t.sock != tx.sock || !tx.fits(&t)) {
			redo, err := tx.flush()
			if err != nil {
				return i, err
			}
			if redo >= 0 {
				i = redo
				continue
			}
		}
		tx.sock = t.sock
		tx.add(i, &t)
		i++
	}
	if tx.N > 0 {
		redo, err := tx.flush()
		if err != nil {
			return len(frames), err
		}
		if redo >= 0 {
			// GSO was refused: send the rest again without it.
			linkio.AddIf(&l.ctr.TxDropped, dropped)
			n, err := l.send(frames[redo:], len(frames)-redo)
			return redo + n, err
		}
	}
	linkio.AddIf(&l.ctr.TxDropped, dropped)
	return len(frames), nil
}

// fits reports whether t can join the messages built so far: as another
// segment of the last one, or as a new message.
func (tx *udpTx) fits(t *txFrame) bool {
	if tx.canJoin(t) {
		return tx.niov+2 <= udpMaxIov
	}
	return tx.N < udpMaxMsgs && tx.niov+2 <= udpMaxIov
}

func (tx *udpTx) canJoin(t *txFrame) bool {
	if tx.N == 0 || t.first || !tx.l.txGSO[tx.sock].Load() {
		return false
	}
	m := &tx.m[tx.N-1]
	return !m.closed && m.nseg < udpMaxSegs && len(t.payload) <= m.segLen &&
		m.payload+len(t.payload) <= udpMaxGSO && m.dst == t.dst && m.tos == t.tos && m.ttl == t.ttl
}

// add appends frame i: as a segment of the last message when it can join
// it, else as a new message.
func (tx *udpTx) add(i int, t *txFrame) {
	var m *udpMsg
	if tx.canJoin(t) {
		m = &tx.m[tx.N-1]
	} else {
		m = &tx.m[tx.N]
		*m = udpMsg{first: i, segLen: len(t.payload), dst: t.dst, tos: t.tos, ttl: t.ttl}
		h := &tx.msgs[tx.N].Hdr
		h.Name = &tx.names[tx.N][0]
		h.Namelen = linkio.PutSockaddr(&tx.names[tx.N], t.dst, tx.l.scope)
		h.Iov = &tx.iov[tx.niov]
		h.SetIovlen(0)
		tx.N++
	}
	if len(t.payload) < m.segLen {
		m.closed = true // only the last segment may be shorter
	}
	if t.first {
		// A message's FIRST packet goes alone, ahead of the rest as one
		// GSO send: the responder starts on the message (and, for a
		// WRITE's, reads its RETH) without waiting for the run; and it
		// is longer than the MIDDLEs by its extended headers, so the
		// receiver's GRO would otherwise coalesce it with one MIDDLE
		// at a segment size no other packet of the run has.
		m.closed = true
	}
	k := m.nseg
	m.nseg++
	m.payload += len(t.payload)
	m.bytes += t.tot
	h := &tx.msgs[tx.N-1].Hdr
	iovs := 1
	// The kernel gives segment k of a message identification k, with DF
	// (see UDP). Correct the ICRC for any difference from what the engine
	// wrote, in a 4-byte copy: the caller's buffer is not ours to change.
	var diff uint32
	if !tx.l.v6 && (t.id != uint16(k) || !t.df) {
		diff = bth.IPv4IDDiff(t.tot, t.id^uint16(k), !t.df)
	}
	body := t.payload
	if diff != 0 {
		body = t.payload[:len(t.payload)-bth.ICRCLen]
		c := binary.LittleEndian.Uint32(t.payload[len(body):]) ^ diff
		binary.LittleEndian.PutUint32(tx.icrc[tx.niov+1][:], c)
		tx.iov[tx.niov+1].Base = &tx.icrc[tx.niov+1][0]
		tx.iov[tx.niov+1].SetLen(bth.ICRCLen)
		iovs = 2
	}
	tx.iov[tx.niov].Base = &body[0]
	tx.iov[tx.niov].SetLen(len(body))
	tx.niov += iovs
	m.niov += iovs
	h.SetIovlen(m.niov)
}

// finish writes each message's control data: traffic class, hop limit and,
// for more than one segment, the GSO segment size.
func (tx *udpTx) finish() {
	v6 := tx.l.v6
	for j := range tx.N {
		m := &tx.m[j]
		c := tx.ctrl[j][:]
		o := 0
		if v6 {
			o += linkio.PutCmsg(c[o:], unix.IPPROTO_IPV6, unix.IPV6_TCLASS, uint32(m.tos), 4)
			if m.ttl != 0 {
				o += linkio.PutCmsg(c[o:], unix.IPPROTO_IPV6, unix.IPV6_HOPLIMIT, uint32(m.ttl), 4)
			}
		} else {
			o += linkio.PutCmsg(c[o:], unix.IPPROTO_IP, unix.IP_TOS, uint32(m.tos), 4)
			if m.ttl != 0 {
				o += linkio.PutCmsg(c[o:], unix.IPPROTO_IP, unix.IP_TTL, uint32(m.ttl), 4)
			}
		}
		if m.nseg > 1 {
			o += linkio.PutCmsg(c[o:], unix.SOL_UDP, unix.UDP_SEGMENT, uint32(m.segLen), 2)
		}
		h := &tx.msgs[j].Hdr
		h.Control = &c[0]
		h.SetControllen(o)
	}
}

// flush sends the messages built. It returns the index of a frame to
// restart from (>= 0) when the kernel refused GSO and the link turned it
// off, else -1; an error only when the link is closed.
func (tx *udpTx) flush() (redo int, err error) {
	l := tx.l
	tx.finish()
	redo = -1
	var pk, by, gso, dropped, batches uint64
	for tx.Off = 0; tx.Off < tx.N; {
		if werr := l.tx[tx.sock].raw.Write(tx.Fn); werr != nil {
			err = nic.ErrClosed
			break
		}
		if tx.Sent > 0 {
			for _, m := range tx.m[tx.Off : tx.Off+tx.Sent] {
				pk += uint64(m.nseg)
				by += uint64(m.bytes)
				if m.nseg > 1 {
					gso += uint64(m.nseg)
				}
			}
			batches++
			tx.Off += tx.Sent
			continue
		}
		m := &tx.m[tx.Off]
		if m.nseg > 1 && (tx.Errno == unix.EIO || tx.Errno == unix.EINVAL || tx.Errno == unix.ENOPROTOOPT) {
			// No GSO for this socket's route or device (no checksum
			// offload, xfrm, SO_NO_CHECK): this socket never asks again
			// and sends one datagram per packet (sendmmsg); the other
			// sockets keep GSO. Resend from this message's frames.
			if l.txGSO[tx.sock].Swap(false) {
				l.ctr.TxGSORefused.Add(1)
			}
			redo = m.first
			break
		}
		dropped += uint64(m.nseg) // EMSGSIZE, unreachable, ENOBUFS, EPERM...
		tx.Off++
	}
	linkio.AddIf(&l.ctr.TxPackets, pk)
	linkio.AddIf(&l.ctr.TxBytes, by)
	linkio.AddIf(&l.ctr.TxGSOSegments, gso)
	linkio.AddIf(&l.ctr.TxDropped, dropped)
	linkio.AddIf(&l.ctr.TxBatches, batches)
	// Forget the caller's buffers: Send retains nothing.
	for j := range tx.niov {
		tx.iov[j].Base = nil
	}
	tx.N, tx.niov = 0, 0
	return redo, err
}
