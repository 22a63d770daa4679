package transport_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/goroce/goroce/cq"
	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/transport"
)

// peer is what the two sides exchange out of band before they connect,
// as the rdma-core examples exchange LID:QPN:PSN:GID over TCP.
type peer struct {
	qpn uint32
	psn uint32
	gid [16]byte
}

// Example shows the whole bring-up of an RC connection: open a device over
// a link, allocate a protection domain, register memory, create completion
// queues and a queue pair, move it to RTS with the peer's QPN, PSN and GID,
// post work and poll for its completion. Here both ends run in one process
// over an in-memory link; with nic.OpenUDP or AF_PACKET the code is the same.
func Example() {
	net := nic.NewMemNet(1)
	type end struct {
		dev *transport.Device
		mr  *mr.MR
		cq  *cq.CQ
		qp  *qp.QP
		buf []byte
		me  peer
	}
	open := func(addr string) *end {
		link, _ := net.Attach(netip.MustParseAddr(addr), nic.MemOptions{})
		dev, _ := transport.Open(link, transport.Options{})
		pd := dev.AllocPD()
		buf := make([]byte, 4096)
		region, _ := pd.Register(buf, mr.LocalWrite|mr.RemoteWrite)
		c := dev.CreateCQ(16)
		q, _ := dev.CreateQP(pd, qp.InitAttr{Type: qp.RC, SendCQ: c, RecvCQ: c,
			Cap: qp.Cap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		gid, _ := dev.GID(1) // index 1: the IPv4 GID, as -g 1 on rxe
		return &end{dev: dev, mr: region, cq: c, qp: q, buf: buf, me: peer{qpn: q.QPN(), psn: 0x1234, gid: gid}}
	}
	a, b := open("192.0.2.1"), open("192.0.2.2")
	defer a.dev.Close()
	defer b.dev.Close()

	connect := func(e *end, remote peer) {
		e.qp.Modify(&qp.Attr{State: qp.Init, PKeyIndex: 0, PortNum: 1,
			AccessFlags: mr.LocalWrite | mr.RemoteWrite},
			qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrAccessFlags)
		e.qp.Modify(&qp.Attr{State: qp.RTR, PathMTU: qp.MTU1024, DestQPN: remote.qpn, RQPSN: remote.psn,
			MaxDestRdAtomic: 1, MinRNRTimer: 12, AH: qp.AHAttr{DGID: remote.gid, SGIDIndex: 1, PortNum: 1}},
			qp.AttrState|qp.AttrAV|qp.AttrPathMTU|qp.AttrDestQPN|qp.AttrRQPSN|qp.AttrMaxDestRdAtomic|qp.AttrMinRNRTimer)
		e.qp.Modify(&qp.Attr{State: qp.RTS, SQPSN: e.me.psn, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			qp.AttrState|qp.AttrSQPSN|qp.AttrTimeout|qp.AttrRetryCnt|qp.AttrRNRRetry|qp.AttrMaxQPRdAtomic)
	}
	connect(a, b.me)
	connect(b, a.me)

	// b posts a receive; a sends into it.
	b.qp.PostRecv(&qp.RecvWR{WRID: 1, SGL: []mr.SGE{b.mr.SGE(0, 4096)}})
	copy(a.buf, "hello, RDMA")
	a.qp.PostSend(&qp.SendWR{WRID: 2, Opcode: qp.WRSend, Flags: qp.Signaled, SGL: []mr.SGE{a.mr.SGE(0, 11)}})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wc := make([]cq.WC, 1)
	b.cq.PollWait(ctx, wc)
	fmt.Printf("b: %v %v %d bytes: %q\n", wc[0].Opcode, wc[0].Status, wc[0].ByteLen, b.buf[:wc[0].ByteLen])
	a.cq.PollWait(ctx, wc)
	fmt.Printf("a: %v %v\n", wc[0].Opcode, wc[0].Status)
	// Output:
	// b: RECV success 11 bytes: "hello, RDMA"
	// a: SEND success
}
