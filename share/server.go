package share

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/nic"
)

// Server owns port 4791 on the addresses its members join on and relays
// to each member what is addressed to it.
type Server struct {
	ln   *net.UnixListener
	path string // ln's socket, unlinked once (unlink)
	open func(netip.Addr) (nic.Link, error)

	mu       sync.Mutex
	ports    map[netip.Addr]nic.Link
	blocks   [Blocks]atomic.Pointer[member] // written under mu; read by the relays without it, once a packet
	next     uint32                         // where the search for a free block starts
	services map[uint64]*member
	conns    map[*net.UnixConn]bool // every accepted connection, a member's or one still joining
	closed   bool
	endIdle  bool // EndWhenIdle
	ending   bool // EndWhenIdle's server whose last member left: joins are refused
	unlinked bool
	wg       sync.WaitGroup
	live     int           // members now (under mu)
	idle     chan struct{} // closed when the last member leaves (Idle)

	st stats
}

// Stats counts what a server relayed and dropped.
type Stats struct {
	Members   int    // members now
	Joined    uint64 // members that joined since the start
	Relayed   uint64 // packets handed to a member
	MADs      uint64 // of those, connection manager MADs
	NoMember  uint64 // packets for a QP of no member's block: dropped
	Unclaimed uint64 // MADs for no member's service or communication ID: dropped
	Refused   uint64 // of those, requests for a service no member listens on: answered REJ 8 or SIDR_REP unsupported
	Malformed uint64 // packets too short or not RoCEv2, MADs that do not parse: dropped
	Overflow  uint64 // packets dropped because the member's queue was full
}

type stats struct {
	joined, relayed, mads, noMember, unclaimed, refused, malformed, overflow atomic.Uint64
	psn                                                                      atomic.Uint32 // QP1's, for the refusals
}

// member is one process on the server's ports.
type member struct {
	s        *Server
	data     *os.File // the server's end of its socket pair
	raw      syscall.RawConn
	block    uint32
	services map[uint64]bool // under s.mu
}

// NewServer serves members on the unix socket ln, opening port 4791 on an
// address with open the first time a member joins on it (the udp link:
// udp.Open). Serve runs it. The server unlinks ln's socket when it ends.
func NewServer(ln *net.UnixListener, open func(netip.Addr) (nic.Link, error)) *Server {
	// Not at ln.Close: by then a successor may have its socket at the
	// path (unlink).
	ln.SetUnlinkOnClose(false)
	return &Server{ln: ln, path: ln.Addr().String(), open: open, ports: map[netip.Addr]nic.Link{}, services: map[uint64]*member{}, conns: map[*net.UnixConn]bool{}, next: FirstBlock, idle: make(chan struct{})}
}

// Serve accepts members until Close; it returns nil then.
func (s *Server) Serve() error {
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			return err
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		s.conns[c] = true
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.member(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// Close stops serving: the members' connections and the ports close.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.unlink()
	s.ln.Close()
	// Every connection, a member's and one whose join has not come yet
	// (whose goroutine would wait for it for ever).
	for c := range s.conns {
		c.Close()
	}
	for _, l := range s.ports {
		l.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// Idle is closed when the last member leaves, once one has joined: a
// server started for the members that need it (roced serve --auto) ends
// then, leaving the port to its owner.
func (s *Server) Idle() <-chan struct{} { return s.idle }

// EndWhenIdle makes the server one that ends when Idle: from the moment
// its last member leaves it takes no join, and its socket is gone, so
// that a program that comes next finds no server and starts one, never
// joins one about to close (whose Close would cut it off).
func (s *Server) EndWhenIdle() {
	s.mu.Lock()
	s.endIdle = true
	s.mu.Unlock()
}

// unlink removes the server's socket, once: after that the path may be
// a successor's. Called with s.mu held.
func (s *Server) unlink() {
	if s.unlinked || strings.HasPrefix(s.path, "@") {
		return
	}
	s.unlinked = true
	os.Remove(s.path)
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	n := 0
	for i := range s.blocks {
		if s.blocks[i].Load() != nil {
			n++
		}
	}
	s.mu.Unlock()
	return Stats{Members: n, Joined: s.st.joined.Load(), Relayed: s.st.relayed.Load(), MADs: s.st.mads.Load(),
		NoMember: s.st.noMember.Load(), Unclaimed: s.st.unclaimed.Load(), Refused: s.st.refused.Load(), Malformed: s.st.malformed.Load(),
		Overflow: s.st.overflow.Load()}
}

// member serves one member's control connection: its join, then its
// listens, until it closes (or its process ends, which closes it).
func (s *Server) member(c *net.UnixConn) {
	defer c.Close()
	m, err := s.join(c)
	if err != nil {
		reply(c, msgErr, []byte(err.Error()))
		return
	}
	defer s.leave(m)
	buf := make([]byte, maxMsg)
	for {
		n, err := c.Read(buf)
		if err != nil || n == 0 {
			return // closed: the member is gone
		}
		msg := buf[:n]
		if (msg[0] != msgListen && msg[0] != msgUnlisten) || len(msg) != 9 {
			reply(c, msgErr, []byte("share: an unknown request"))
			return
		}
		id := binary.BigEndian.Uint64(msg[1:])
		if msg[0] == msgUnlisten {
			s.mu.Lock()
			if s.services[id] == m {
				delete(s.services, id)
				delete(m.services, id)
			}
			s.mu.Unlock()
			continue
		}
		s.mu.Lock()
		owner := s.services[id]
		if owner == nil {
			s.services[id] = m
			m.services[id] = true
		}
		s.mu.Unlock()
		if owner != nil && owner != m {
			reply(c, msgErr, []byte(fmt.Sprintf("service ID %#x is listened on by another process", id)))
			continue
		}
		reply(c, msgOK, nil)
	}
}

func reply(c *net.UnixConn, kind byte, body []byte) {
	c.Write(append([]byte{kind}, body...))
}

// join reads a member's join and its data socket, gives it a block and
// opens the ports it names.
func (s *Server) join(c *net.UnixConn) (*member, error) {
	buf := make([]byte, maxMsg)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	var data *os.File
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(msgs) == 1 {
		if fds, err := unix.ParseUnixRights(&msgs[0]); err == nil && len(fds) == 1 {
			unix.SetNonblock(fds[0], true) // into the runtime's poller
			data = os.NewFile(uintptr(fds[0]), "share data")
		}
	}
	if data == nil {
		return nil, errors.New("share: a join must carry the member's data socket")
	}
	fail := func(err error) (*member, error) { data.Close(); return nil, err }
	if t, err := unix.GetsockoptInt(int(data.Fd()), unix.SOL_SOCKET, unix.SO_TYPE); err != nil || t != unix.SOCK_SEQPACKET {
		return fail(errors.New("share: the data socket is no SOCK_SEQPACKET socket"))
	}
	addrs, err := decodeJoin(buf[:n])
	if err != nil {
		return fail(fmt.Errorf("share: %v", err))
	}
	raw, err := data.SyscallConn()
	if err != nil {
		return fail(err)
	}
	// Room for bursts: a member that falls behind loses what overflows,
	// as a receive queue of an HCA does, and the RC requester resends.
	raw.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 8<<20) != nil {
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, 8<<20)
		}
	})
	m := &member{s: s, data: data, raw: raw, services: map[uint64]bool{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.ending {
		return fail(errors.New("share: the server is ending"))
	}
	for _, a := range addrs {
		if _, ok := s.ports[a]; ok {
			continue
		}
		l, err := s.open(a)
		if err != nil {
			return fail(fmt.Errorf("share: port 4791 on %v: %w", a, err))
		}
		s.ports[a] = l
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.relay(l)
		}()
	}
	for i := range memberBlocks {
		b := (s.next-FirstBlock+uint32(i))%memberBlocks + FirstBlock
		if s.blocks[b].Load() == nil {
			m.block = b
			break
		}
	}
	if m.block == 0 {
		return fail(fmt.Errorf("share: all %d blocks are taken", memberBlocks))
	}
	// Blocks are not reused at once: a late packet for a member that left
	// finds no new owner soon, as QPNs are not reused soon (rxe).
	s.next = (m.block-FirstBlock+1)%memberBlocks + FirstBlock
	s.blocks[m.block].Store(m)
	s.live++
	s.st.joined.Add(1)
	reply(c, msgOK, binary.BigEndian.AppendUint16(nil, uint16(m.block)))
	return m, nil
}

// leave forgets a member that closed its control connection.
func (s *Server) leave(m *member) {
	s.mu.Lock()
	s.blocks[m.block].CompareAndSwap(m, nil)
	for id := range m.services {
		if s.services[id] == m {
			delete(s.services, id)
		}
	}
	if s.live--; s.live == 0 {
		// Ending before Idle says so: whoever sees Idle finds no socket.
		if s.endIdle {
			s.ending = true
			s.unlink()
		}
		select {
		case <-s.idle:
		default:
			close(s.idle)
		}
	}
	s.mu.Unlock()
	m.data.Close()
}

// relay hands each packet a port receives to the member it is for.
func (s *Server) relay(l nic.Link) {
	frames := make([]nic.Frame, 64)
	for {
		n, err := l.Recv(frames)
		if err != nil {
			return // closed
		}
		for _, f := range frames[:n] {
			m, refuse := s.route(f)
			if refuse != nil {
				s.refuse(l, f, refuse)
			}
			if m == nil {
				continue
			}
			m.send(f.Datagram())
		}
	}
}

// route picks the member a received packet is for: by its destination
// QP's block, or, for a MAD to QP1, by the service a request names or the
// communication ID a reply carries. nil: the packet is dropped (counted);
// a request for a service no member listens on is also returned, to be
// refused as the kernel's CM refuses it.
func (s *Server) route(f nic.Frame) (*member, mad.MAD) {
	fr := f.Decoded
	if !f.Verified {
		var err error
		if fr, err = bth.DecodeIP(f.Datagram()); err != nil {
			s.st.malformed.Add(1)
			return nil, nil
		}
	}
	roce := fr.RoCE()
	if len(roce) < bth.BTHLen {
		s.st.malformed.Add(1)
		return nil, nil
	}
	qpn := bth.BTH(roce[:bth.BTHLen]).DestQP()
	if qpn != 1 {
		m := s.blocks[qpn>>BlockShift].Load()
		if m == nil {
			s.st.noMember.Add(1)
		}
		return m, nil
	}
	p, err := bth.Parse(roce)
	if err != nil || p.OpCode() != bth.UDSendOnly {
		s.st.malformed.Add(1)
		return nil, nil
	}
	msg, err := mad.ParseCM(p.Payload())
	if err != nil {
		s.st.malformed.Add(1)
		return nil, nil
	}
	var m *member
	s.mu.Lock()
	switch msg.AttrID() {
	case mad.AttrREQ:
		m = s.services[msg.REQ().ServiceID()]
	case mad.AttrSIDRREQ:
		m = s.services[msg.SIDRREQ().ServiceID()]
	default:
		if id, ok := remoteID(msg); ok {
			m = s.blocks[id>>CommIDShift].Load()
		}
	}
	s.mu.Unlock()
	if m == nil {
		s.st.unclaimed.Add(1)
		if a := msg.AttrID(); a == mad.AttrREQ || a == mad.AttrSIDRREQ {
			return nil, msg
		}
		return nil, nil
	}
	s.st.mads.Add(1)
	return m, nil
}

// remoteID is the ID a CM message names of the side that receives it:
// the communication ID that side chose, or a SIDR request's ID.
func remoteID(m mad.MAD) (uint32, bool) {
	switch m.AttrID() {
	case mad.AttrMRA:
		return m.MRA().RemoteCommID(), true
	case mad.AttrREJ:
		return m.REJ().RemoteCommID(), true
	case mad.AttrREP:
		return m.REP().RemoteCommID(), true
	case mad.AttrRTU:
		return m.RTU().RemoteCommID(), true
	case mad.AttrDREQ:
		return m.DREQ().RemoteCommID(), true
	case mad.AttrDREP:
		return m.DREP().RemoteCommID(), true
	case mad.AttrLAP:
		return m.LAP().RemoteCommID(), true
	case mad.AttrAPR:
		return m.APR().RemoteCommID(), true
	case mad.AttrSIDRREP:
		return m.SIDRREP().RequestID(), true
	}
	return 0, false
}

// send hands the member one datagram without waiting: a member whose
// queue is full loses it.
func (m *member) send(dg []byte) {
	var err error
	cerr := m.raw.Write(func(fd uintptr) bool {
		err = unix.Send(int(fd), dg, unix.MSG_DONTWAIT)
		return true
	})
	switch {
	case cerr != nil:
	case err == nil:
		m.s.st.relayed.Add(1)
	case errors.Is(err, unix.EAGAIN):
		m.s.st.overflow.Add(1)
	}
}

// refuse answers a request for a service no member listens on, as the
// kernel's CM answers one for an unbound service ID: a REQ with REJ
// reason 8 (invalid service ID), a SIDR_REQ with a SIDR_REP "unsupported";
// a client that waits for a late server (GOROCE_SERVER_WAIT) retries on
// either. The answer leaves QP1 on the address the request came to.
func (s *Server) refuse(l nic.Link, f nic.Frame, req mad.MAD) {
	fr := f.Decoded
	if !f.Verified {
		var err error
		if fr, err = bth.DecodeIP(f.Datagram()); err != nil {
			return
		}
	}
	var ans mad.MAD
	switch req.AttrID() {
	case mad.AttrREQ:
		ans = mad.NewCM(mad.AttrREJ)
		r := ans.REJ()
		r.SetRemoteCommID(req.REQ().LocalCommID())
		r.SetMessageRejected(mad.MsgREQ)
		r.SetReason(mad.RejInvalidServiceID)
	case mad.AttrSIDRREQ:
		ans = mad.NewCM(mad.AttrSIDRREP)
		q := req.SIDRREQ()
		if err := ans.SIDRREP().Put(mad.SIDRREPFields{RequestID: q.RequestID(), Status: mad.SIDRUnsupported, ServiceID: q.ServiceID()}); err != nil {
			return
		}
	default:
		return
	}
	ans.SetTID(req.TID())
	o := bth.Outer{Src: fr.DstAddr(), Dst: fr.SrcAddr(), SrcPort: l.SrcPort(1)}
	buf := make([]byte, nic.Headroom+bth.DraftLen(&o, bth.UDSendOnly, len(ans)))
	d := bth.NewDraft(buf[nic.Headroom:], &o, bth.BTHFields{OpCode: bth.UDSendOnly, PKey: 0xffff, DestQP: 1, AckReq: true,
		PSN: bth.PSN((s.st.psn.Add(1) - 1) & bth.PSNMask)}, len(ans))
	deth := bth.DETH(d.Ext(bth.ExtDETH))
	deth.SetQKey(0x80010000) // QP1's Q_Key (IBA 10.2.5)
	deth.SetSrcQP(1)
	copy(d.Payload(), ans)
	d.Seal()
	// Counted before the answer leaves: the requester may read the
	// counters as soon as the REJ reaches it (TestSharedPort does).
	s.st.refused.Add(1)
	if _, err := l.Send([]nic.Frame{{B: buf, Off: nic.Headroom}}); err != nil {
		s.st.refused.Add(^uint64(0)) // not answered after all
	}
}
