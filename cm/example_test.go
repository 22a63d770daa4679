package cm_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cq"
	"github.com/goroce/goroce/mr"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/qp"
	"github.com/goroce/goroce/transport"
)

// Example connects two devices through the connection manager, as an
// rdma_cm program would: the server listens on a port and accepts, the
// client dials it with private data; both get an RC QP already in RTS,
// and a SEND crosses. Over nic.OpenUDP the code is the same, and the peer
// may be any rdma_cm program (rping, say) on an HCA or rxe.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	network := nic.NewMemNet(1)
	type side struct {
		mgr    *cm.Manager
		cq     *cq.CQ
		region *mr.MR
		qc     cm.QPConfig
	}
	open := func(addr string) side {
		link, err := network.Attach(netip.MustParseAddr(addr), nic.MemOptions{})
		if err != nil {
			log.Fatal(err)
		}
		dev, err := transport.Open(link, transport.Options{})
		if err != nil {
			log.Fatal(err)
		}
		mgr, err := cm.New(dev, cm.Options{})
		if err != nil {
			log.Fatal(err)
		}
		pd := dev.AllocPD()
		region, err := pd.Register(make([]byte, 4096), mr.LocalWrite)
		if err != nil {
			log.Fatal(err)
		}
		c := dev.CreateCQ(16)
		qc := cm.QPConfig{PD: pd, Init: qp.InitAttr{SendCQ: c, RecvCQ: c,
			Cap: qp.Cap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}}
		return side{mgr, c, region, qc}
	}
	server, client := open("192.0.2.1"), open("192.0.2.2")

	l, err := server.mgr.Listen(netip.MustParseAddrPort("192.0.2.1:7174"), cm.ListenConfig{QP: server.qc})
	if err != nil {
		log.Fatal(err)
	}
	accepted := make(chan *cm.Conn)
	go func() {
		c, err := l.Accept(ctx)
		if err != nil {
			log.Fatal(err)
		}
		accepted <- c
	}()
	conn, err := client.mgr.Dial(ctx, netip.AddrPort{}, netip.MustParseAddrPort("192.0.2.1:7174"), client.qc,
		cm.ConnParams{PrivateData: []byte("hi")})
	if err != nil {
		log.Fatal(err)
	}
	peer := <-accepted
	fmt.Printf("server: connection from %v, private data %q, QP %v\n",
		peer.RemoteAddr().Addr(), peer.PrivateData()[:2], peer.QP().State())

	if err := peer.QP().PostRecv(&qp.RecvWR{WRID: 1, SGL: []mr.SGE{server.region.SGE(0, 4096)}}); err != nil {
		log.Fatal(err)
	}
	n := copy(client.region.Bytes(), "hello over rdma_cm")
	if err := conn.QP().PostSend(&qp.SendWR{WRID: 2, Opcode: qp.WRSend, Flags: qp.Signaled,
		SGL: []mr.SGE{client.region.SGE(0, n)}}); err != nil {
		log.Fatal(err)
	}
	wc := make([]cq.WC, 1)
	if _, err := server.cq.PollWait(ctx, wc); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("server: %v %q\n", wc[0].Opcode, server.region.Bytes()[:wc[0].ByteLen])

	if err := conn.Disconnect(ctx); err != nil { // DREQ, DREP
		log.Fatal(err)
	}
	<-peer.Done()
	fmt.Println("server:", peer.Err())
	// Output:
	// server: connection from 192.0.2.2, private data "hi", QP RTS
	// server: RECV "hello over rdma_cm"
	// server: cm: disconnected
}
