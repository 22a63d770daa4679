package transport_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

// Example connects two RC queue pairs and sends a message from one to the
// other: open a device over a link, allocate a protection domain, register
// memory, create a completion queue and a queue pair, exchange endpoints,
// connect, post a receive on one side and a SEND on the other, and wait
// for both completions. Both sides run in one process over an in-memory
// link here; over udp.Open the code is the same, and the endpoints
// travel over any channel the program has (String and ParseEndpoint, or
// MarshalBinary).
func Example() {
	network := mem.NewNet(1)
	type side struct {
		dev    *transport.Device
		region *transport.MR
		cq     *transport.CQ
		qp     *transport.QP
		ep     transport.Endpoint
	}
	var sides [2]side
	for i, addr := range []string{"192.0.2.1", "192.0.2.2"} {
		link, err := network.Attach(netip.MustParseAddr(addr), mem.Options{})
		if err != nil {
			log.Fatal(err)
		}
		dev, err := transport.Open(link, transport.Options{})
		if err != nil {
			log.Fatal(err)
		}
		defer dev.Close()
		pd := dev.AllocPD()
		region, err := pd.Register(make([]byte, 4096), transport.LocalWrite)
		if err != nil {
			log.Fatal(err)
		}
		c := dev.CreateCQ(16)
		q, err := dev.CreateQP(pd, transport.QPInitAttr{Type: transport.RC, SendCQ: c, RecvCQ: c,
			Cap: transport.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			log.Fatal(err)
		}
		ep, err := dev.LocalEndpoint(q)
		if err != nil {
			log.Fatal(err)
		}
		sides[i] = side{dev, region, c, q, ep}
	}
	a, b := &sides[0], &sides[1]
	// Each side sends its endpoint to the other and connects to the one
	// it gets; SEND needs no remote access rights.
	if err := a.dev.Connect(a.qp, a.ep, b.ep, transport.ConnectOptions{}); err != nil {
		log.Fatal(err)
	}
	if err := b.dev.Connect(b.qp, b.ep, a.ep, transport.ConnectOptions{}); err != nil {
		log.Fatal(err)
	}

	if err := b.qp.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{b.region.SGE(0, 4096)}}); err != nil {
		log.Fatal(err)
	}
	n := copy(a.region.Bytes(), "hello, RDMA")
	err := a.qp.PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRSend, Flags: transport.Signaled,
		SGL: []transport.SGE{a.region.SGE(0, n)}})
	if err != nil {
		log.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]transport.WC, 1)
	if _, err := b.cq.PollWait(ctx, wc); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("b: %v %v %q\n", wc[0].Opcode, wc[0].Status, b.region.Bytes()[:wc[0].ByteLen])
	if _, err := a.cq.PollWait(ctx, wc); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("a: %v %v\n", wc[0].Opcode, wc[0].Status)
	// Output:
	// b: RECV success "hello, RDMA"
	// a: SEND success
}
