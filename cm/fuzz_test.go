package cm

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/bth/pcapfile"
	"github.com/goroce/goroce/internal/manualclock"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

// The captured rping exchange: rxe's client at 198.51.100.1 connects to
// rxe's server at 198.51.100.2; the fuzz target plays the server's address.
const capC5 = "../bth/testdata/captures/rping_c5.pcap"

var (
	fuzzPeer  = netip.MustParseAddr("198.51.100.1")
	fuzzLocal = netip.MustParseAddr("198.51.100.2")
)

// capturedCM returns the CM MADs of a capture in order.
func capturedCM(t testing.TB, file string) [][]byte {
	pkts, err := pcapfile.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, p := range pkts {
		fr, err := bth.DecodeLink(bth.LinkType(p.LinkType), p.Data)
		if err != nil {
			continue
		}
		pk, err := bth.Parse(fr.RoCE())
		if err == nil && pk.BTH().DestQP() == 1 {
			out = append(out, append([]byte(nil), pk.Payload()...))
		}
	}
	return out
}

// record frames one fuzz step: a byte saying how far to move the clock
// first (0: not at all; else 4.096 µs × 2^(b&31)), then a MAD.
const recordLen = 1 + mad.Len

// FuzzHandle feeds a manager with a listener on rping's port a sequence of
// MADs (seeded with the captured rping connection, REQ to DREP, and its
// pieces, and SIDR_REQs for a UD listener) with the clock moved between
// them, and checks after every step:
// the manager did not panic; everything it sent is a well-formed CM Send
// of 256 bytes, and each REJ, REP, DREP or SIDR_REP answers the
// transaction of the MAD that drew it; its tables agree (every connection
// known by its peer's IDs is the one known by its own; no connection is
// gone yet listed; a listener's count of pending connections is the
// number of connections in REP sent); each listed connection's QP still
// exists; no more connections than the backlog allows wait for Accept;
// and every SIDR request kept is answered or waits for Accept, within the
// backlog, and is known by its own sender and request ID.
func FuzzHandle(f *testing.F) {
	mads := capturedCM(f, capC5)
	var all []byte
	for _, m := range mads {
		all = append(all, 0)
		all = append(all, m...)
	}
	f.Add(all)
	for i, m := range mads {
		f.Add(append([]byte{byte(i * 7)}, m...))
	}
	f.Add(append(append([]byte{0}, mads[0]...), append([]byte{0}, mads[0]...)...)) // a duplicate REQ
	f.Add(append(append([]byte{0}, mads[0]...), append([]byte{20}, mads[0]...)...))
	// SIDR_REQs for the UD listener's port, a duplicate, and one for a
	// port nobody listens on, as the scripted peer sends them.
	sidr := func(port uint16, id uint32) []byte {
		msg := mad.NewCM(mad.AttrSIDRREQ)
		msg.SetTID(uint64(id))
		priv := make([]byte, mad.SIDRREQPrivateDataLen)
		mad.CMAHdr(priv).SetAddrs(fuzzPeer, fuzzLocal)
		msg.SIDRREQ().Put(mad.SIDRREQFields{RequestID: id, PKey: 0xffff,
			ServiceID: mad.ServiceID(mad.PortSpaceUDP, port), PrivateData: priv})
		return append([]byte{0}, msg...)
	}
	f.Add(append(append(sidr(7174, 1), sidr(7174, 1)...), sidr(9, 2)...))

	net := mem.NewNet(1)
	clk := manualclock.New()
	link, err := net.Attach(fuzzLocal, mem.Options{})
	if err != nil {
		f.Fatal(err)
	}
	n := openNode(f, link, fuzzLocal, clk)
	type sentMAD struct {
		b   []byte
		err error
	}
	var sent []sentMAD
	orig := sendGSI
	sendGSI = func(_ *transport.Device, src, dst netip.Addr, b []byte) error {
		_, err := mad.ParseCM(b)
		sent = append(sent, sentMAD{append([]byte(nil), b...), err})
		return nil
	}
	f.Cleanup(func() { sendGSI = orig })
	const backlog = 2

	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := New(n.dev, Options{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		// The first connection gets the communication ID rxe's server
		// gave the captured one, so that the captured RTU and DREQ reach
		// it.
		next := uint32(0x3d986ae9)
		m.ids = func() uint32 { next++; return next - 1 }
		l, err := m.Listen(netip.AddrPortFrom(netip.IPv4Unspecified(), 7174), ListenConfig{QP: n.qpConfig(), Backlog: backlog})
		if err != nil {
			t.Fatal(err)
		}
		ul, err := m.ListenUD(netip.AddrPortFrom(netip.IPv4Unspecified(), 7174), backlog)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			var qps []*Conn
			m.mu.Lock()
			for _, c := range m.conns {
				qps = append(qps, c)
			}
			m.mu.Unlock()
			for len(l.ch) > 0 {
				qps = append(qps, <-l.ch)
			}
			m.Close()
			for _, c := range qps {
				n.dev.DestroyQP(c.qp)
			}
		}()
		for len(data) >= recordLen {
			step, b := data[0], data[1:recordLen]
			data = data[recordLen:]
			if step != 0 {
				clk.Advance(ibaTime(step & 31))
			}
			sent = sent[:0]
			m.handle(fuzzPeer, fuzzLocal, b)
			in, inErr := mad.ParseCM(b)
			for _, s := range sent {
				if s.err != nil || len(s.b) != mad.Len || mad.MAD(s.b).Method() != mad.MethodSend {
					t.Fatalf("sent a bad MAD (%v): %x", s.err, s.b)
				}
				switch out := mad.MAD(s.b); out.AttrID() {
				case mad.AttrREJ, mad.AttrREP, mad.AttrDREP, mad.AttrSIDRREP:
					if inErr == nil && out.TID() != in.TID() && !retry(out) {
						t.Fatalf("%v answers TID %#x, the input's is %#x", out.AttrID(), out.TID(), in.TID())
					}
				}
			}
			checkTables(t, m, l, n, backlog)
			checkSIDR(t, m, ul, backlog)
		}
	})
}

// retry reports whether out is a message a timer sends (a REJ withdrawing
// a connection after its retries, a REP retried), not an answer.
func retry(out mad.MAD) bool {
	switch out.AttrID() {
	case mad.AttrREJ:
		return out.REJ().Reason() == mad.RejTimeout
	case mad.AttrREP:
		return true // a REP retried by an Advance carries its own REQ's TID
	}
	return false
}

func checkTables(t *testing.T, m *Manager, l *Listener, n *node, backlog int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	pending := 0
	for id, c := range m.conns {
		if c.localID != id || c.state == stateGone || c.state == stateIdle {
			t.Fatalf("connection %#x listed as %#x in state %v", c.localID, id, c.state)
		}
		if n.dev.LookupQP(c.qp.QPN()) != c.qp {
			t.Fatalf("connection %#x in state %v has lost its QP", id, c.state)
		}
		if c.state == stateREPSent || c.state == stateMRAREPRcvd {
			pending++
		}
	}
	for k, c := range m.remote {
		if c.remoteKey != k || m.conns[c.localID] != c {
			t.Fatalf("the peer's %v names connection %#x, which is not listed", k, c.localID)
		}
	}
	if pending != l.pending || l.pending+len(l.ch) > backlog {
		t.Fatalf("%d connections in REP sent, the listener counts %d, %d wait for Accept", pending, l.pending, len(l.ch))
	}
}

func checkSIDR(t *testing.T, m *Manager, l *UDListener, backlog int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	waiting := 0
	for k, r := range m.sidrIn {
		if r.key != k {
			t.Fatalf("SIDR request %v listed as %v", r.key, k)
		}
		if r.reply == nil {
			waiting++
		}
	}
	if waiting != len(l.ch) || waiting > backlog {
		t.Fatalf("%d SIDR requests unanswered, %d wait for Accept", waiting, len(l.ch))
	}
}
