package testharness

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

// NewMemPeer attaches addr to the in-memory net n and makes a peer over
// it, with the in-memory defaults (MemDefaults); its device is closed
// when t ends.
func NewMemPeer(t testing.TB, n *mem.Net, addr string, o Options) *Peer {
	t.Helper()
	o.MemDefaults()
	a := netip.MustParseAddr(addr)
	l, err := n.Attach(a, mem.Options{BusyPoll: o.BusyPoll, RxQueues: o.RxQueues})
	if err != nil {
		t.Fatal(err)
	}
	var link nic.Link = l
	if o.Wrap != nil {
		link = o.Wrap(l)
	}
	d, err := transport.Open(link, o.device(a))
	if err != nil {
		t.Fatal(err)
	}
	p := newQP(t, d, link, a, o, false)
	p.Mem = l
	t.Cleanup(func() { d.Close() })
	return p
}

// MemPair makes two peers, 10.0.0.1 (A) and 10.0.0.2 (B), on a new
// in-memory net seeded with o.Seed and, unless o.NoConnect, connects
// them (ConnectQP), A sending from o.PSN and B from o.PSNB.
func MemPair(t testing.TB, o Options) (a, b *Peer, n *mem.Net) {
	t.Helper()
	o.MemDefaults()
	n = mem.NewNet(o.Seed)
	a = NewMemPeer(t, n, "10.0.0.1", o)
	b = NewMemPeer(t, n, "10.0.0.2", o)
	b.Opt.PSN = o.PSNB
	if !o.NoConnect {
		ConnectQP(t, a, b, o, o.PSN, o.PSNB)
		ConnectQP(t, b, a, o, o.PSNB, o.PSN)
	}
	return a, b, n
}

// ConnectQP moves p's QP to RTS towards peer's with the attributes of o
// (MemDefaults), sending from myPSN and receiving from peerPSN, one
// Modify per state as rc_pingpong's pp_connect_ctx does; UD QPs get
// Q_Key 0x11111111.
func ConnectQP(t testing.TB, p, peer *Peer, o Options, myPSN, peerPSN uint32) {
	t.Helper()
	ConnectQPTo(t, p, peer, o, myPSN, peerPSN, transport.RTS)
}

// ConnectQPTo is ConnectQP stopping at state last (RTR or RTS).
func ConnectQPTo(t testing.TB, p, peer *Peer, o Options, myPSN, peerPSN uint32, last transport.QPState) {
	t.Helper()
	o.MemDefaults()
	gidIdx, _ := peer.Dev.GIDIndex(peer.Addr)
	pg, _ := peer.Dev.GID(gidIdx)
	sIdx, _ := p.Dev.GIDIndex(p.Addr)
	ModifyToRTS(t, p, o, peer.QP.QPN(), transport.AHAttr{DGID: pg, SGIDIndex: sIdx, PortNum: 1}, myPSN, peerPSN, last)
}

// ModifyToRTS moves p's QP to state last (RTR or RTS) towards QP dqpn
// through ah with the attributes of o (MemDefaults), one Modify per state.
func ModifyToRTS(t testing.TB, p *Peer, o Options, dqpn uint32, ah transport.AHAttr, myPSN, peerPSN uint32, last transport.QPState) {
	t.Helper()
	o.MemDefaults()
	q := p.QP
	init := transport.QPAttr{State: transport.Init, PKeyIndex: 0, PortNum: 1, AccessFlags: o.Access, QKey: 0x11111111}
	mask := transport.AttrState | transport.AttrPKeyIndex | transport.AttrPort
	if o.Type == transport.UD {
		mask |= transport.AttrQKey
	} else {
		mask |= transport.AttrAccessFlags
	}
	if err := q.Modify(&init, mask); err != nil {
		t.Fatal(err)
	}
	rtr := transport.QPAttr{State: transport.RTR, PathMTU: o.MTU, DestQPN: dqpn, RQPSN: peerPSN,
		MaxDestRdAtomic: o.RdAtomic, MinRNRTimer: o.MinRNR, AH: ah}
	mask = transport.AttrState
	switch o.Type {
	case transport.RC:
		mask |= transport.AttrAV | transport.AttrPathMTU | transport.AttrDestQPN | transport.AttrRQPSN | transport.AttrMaxDestRdAtomic | transport.AttrMinRNRTimer
	case transport.UC:
		mask |= transport.AttrAV | transport.AttrPathMTU | transport.AttrDestQPN | transport.AttrRQPSN
	}
	if err := q.Modify(&rtr, mask); err != nil {
		t.Fatal(err)
	}
	if last == transport.RTR {
		return
	}
	rts := transport.QPAttr{State: transport.RTS, SQPSN: myPSN, Timeout: o.Timeout, RetryCnt: o.Retry,
		RNRRetry: o.RNRRetry, MaxRdAtomic: o.RdAtomic}
	mask = transport.AttrState | transport.AttrSQPSN
	if o.Type == transport.RC {
		mask |= transport.AttrTimeout | transport.AttrRetryCnt | transport.AttrRNRRetry | transport.AttrMaxQPRdAtomic
	}
	if err := q.Modify(&rts, mask); err != nil {
		t.Fatal(err)
	}
}
