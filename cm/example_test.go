package cm_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

// Example connects two devices through the connection manager, as an
// rdma_cm program would: the server listens on a port and accepts, the
// client dials it with private data; both get an RC QP already in RTS,
// and a SEND crosses. Over udp.Open the code is the same, and the peer
// may be any rdma_cm program (rping, say) on an HCA or rxe.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	network := mem.NewNet(1)
	server, client := openExampleSide(network, "192.0.2.1"), openExampleSide(network, "192.0.2.2")

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

	if err := peer.QP().PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{server.region.SGE(0, 4096)}}); err != nil {
		log.Fatal(err)
	}
	n := copy(client.region.Bytes(), "hello over rdma_cm")
	if err := conn.QP().PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRSend, Flags: transport.Signaled,
		SGL: []transport.SGE{client.region.SGE(0, n)}}); err != nil {
		log.Fatal(err)
	}
	wc := make([]transport.WC, 1)
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

// ExampleManager_ResolveUD serves a UD service in the UDP port space, as
// an rdma_cm program on a UDP ID does (librdmacm's udaddy), and resolves
// it from another device through SIDR: the client learns the server's QPN
// and Q_Key and an address vector, and sends it a datagram; the server
// answers the sender the datagram names. A request the server refuses is
// a *cm.SIDRError.
func ExampleManager_ResolveUD() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	network := mem.NewNet(1)
	server, client := openExampleSide(network, "192.0.2.1"), openExampleSide(network, "192.0.2.2")
	// Each side's UD QP, in RTS with rdma_cm's Q_Key (cm.UDPQKey).
	sq, err := server.mgr.CreateUDQP(server.qc)
	if err != nil {
		log.Fatal(err)
	}
	uq, err := client.mgr.CreateUDQP(client.qc)
	if err != nil {
		log.Fatal(err)
	}

	l, err := server.mgr.ListenUD(netip.MustParseAddrPort("192.0.2.1:7174"), 0)
	if err != nil {
		log.Fatal(err)
	}
	// A UD receive buffer starts with 40 bytes for the GRH.
	if err := sq.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{server.region.SGE(0, 4096)}}); err != nil {
		log.Fatal(err)
	}
	go func() {
		for i := 0; ; i++ {
			req, err := l.Accept(ctx)
			if err != nil {
				return
			}
			if i == 0 {
				req.Accept(sq, []byte("welcome"))
			} else {
				req.Reject(mad.SIDRReject, nil)
			}
		}
	}()
	peer, err := client.mgr.ResolveUD(ctx, netip.AddrPort{}, netip.MustParseAddrPort("192.0.2.1:7174"), nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("client: QPN matches %v, Q_Key %#x, private data %q\n",
		peer.QPN == sq.QPN(), peer.QKey, peer.PrivateData[:7])

	ah, err := client.dev.CreateAH(client.region.PD(), peer.AH)
	if err != nil {
		log.Fatal(err)
	}
	n := copy(client.region.Bytes(), "hello over SIDR")
	if err := uq.PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRSend, Flags: transport.Signaled,
		SGL: []transport.SGE{client.region.SGE(0, n)}, AH: ah, RemoteQPN: peer.QPN, RemoteQKey: peer.QKey}); err != nil {
		log.Fatal(err)
	}
	wc := make([]transport.WC, 1)
	if _, err := server.cq.PollWait(ctx, wc); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("server: %v %q from QP %v\n", wc[0].Opcode,
		server.region.Bytes()[40:40+wc[0].ByteLen-40], wc[0].SrcQP == uq.QPN())

	_, err = client.mgr.ResolveUD(ctx, netip.AddrPort{}, netip.MustParseAddrPort("192.0.2.1:7174"), nil)
	fmt.Println("client:", err)
	_, err = client.mgr.ResolveUD(ctx, netip.AddrPort{}, netip.MustParseAddrPort("192.0.2.1:9"), nil)
	fmt.Println("client:", err)
	// Output:
	// client: QPN matches true, Q_Key 0x1234567, private data "welcome"
	// server: RECV "hello over SIDR" from QP true
	// client: cm: SIDR: reject (2)
	// client: cm: SIDR: unsupported (1)
}

// exampleSide is one device of the examples: its connection manager, a
// CQ, a registered region and the QPConfig of its QPs.
type exampleSide struct {
	dev    *transport.Device
	mgr    *cm.Manager
	cq     *transport.CQ
	region *transport.MR
	qc     cm.QPConfig
}

// openExampleSide attaches a device at addr to network and starts its
// connection manager.
func openExampleSide(network *mem.Net, addr string) exampleSide {
	link, err := network.Attach(netip.MustParseAddr(addr), mem.Options{})
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
	region, err := pd.Register(make([]byte, 4096), transport.LocalWrite)
	if err != nil {
		log.Fatal(err)
	}
	c := dev.CreateCQ(16)
	qc := cm.QPConfig{PD: pd, Init: transport.QPInitAttr{SendCQ: c, RecvCQ: c,
		Cap: transport.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}}
	return exampleSide{dev, mgr, c, region, qc}
}
