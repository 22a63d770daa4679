package transport_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

// A peer writes into memory mapped outside the Go heap: each side maps a
// page of anonymous memory and registers it as it would any buffer; a
// WRITEs its page into b's. b's mapping cannot be unmapped while its
// region is registered.
func ExampleMapAnonymous() {
	network := mem.NewNet(1)
	type side struct {
		dev     *transport.Device
		mapping *transport.Mapping
		region  *transport.MR
		cq      *transport.CQ
		qp      *transport.QP
		ep      transport.Endpoint
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
		mapping, err := transport.MapAnonymous(4096, transport.MapOptions{})
		if err != nil {
			log.Fatal(err)
		}
		pd := dev.AllocPD()
		region, err := pd.Register(mapping.Bytes(), transport.LocalWrite|transport.RemoteWrite)
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
		sides[i] = side{dev, mapping, region, c, q, ep}
	}
	a, b := &sides[0], &sides[1]
	conn := transport.ConnectOptions{Access: transport.RemoteWrite}
	if err := a.dev.Connect(a.qp, a.ep, b.ep, conn); err != nil {
		log.Fatal(err)
	}
	if err := b.dev.Connect(b.qp, b.ep, a.ep, conn); err != nil {
		log.Fatal(err)
	}

	// b would send its region's address and rkey to a.
	n := copy(a.mapping.Bytes(), "hello from outside the Go heap")
	err := a.qp.PostSend(&transport.SendWR{Opcode: transport.WRRDMAWrite, Flags: transport.Signaled,
		SGL: []transport.SGE{a.region.SGE(0, n)}, RemoteAddr: b.region.Addr(), RKey: b.region.RKey()})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]transport.WC, 1)
	if _, err := a.cq.PollWait(ctx, wc); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("a: %v %v\n", wc[0].Opcode, wc[0].Status)
	fmt.Printf("b's mapping: %q\n", b.mapping.Bytes()[:n])

	err = b.mapping.Close()
	fmt.Println("unmap while registered:", errors.Is(err, transport.ErrInUse))
	for _, s := range sides {
		if err := s.region.Dereg(); err != nil {
			log.Fatal(err)
		}
		if err := s.mapping.Close(); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("unmapped after Dereg")
	// Output:
	// a: RDMA_WRITE success
	// b's mapping: "hello from outside the Go heap"
	// unmap while registered: true
	// unmapped after Dereg
}
