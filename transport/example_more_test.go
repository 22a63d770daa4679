package transport_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

// The examples after Example share its set-up, written once here: a node
// is one side (a device on an in-memory net, a protection domain, a
// registered buffer and a completion queue), newQP creates a queue pair
// on it, connect brings two QPs up towards each other, and wait returns
// the next completion. Each stops the program (log.Fatal) on any error.

type node struct {
	dev    *transport.Device
	pd     *transport.PD
	region *transport.MR
	cq     *transport.CQ
}

// nodes opens a and b on an in-memory net of their own; b's region grants
// access (what a may do to it).
func nodes(access transport.Access) (a, b *node) {
	network := mem.NewNet(1)
	return newNode(network, "192.0.2.1", 0), newNode(network, "192.0.2.2", access)
}

// newNode opens a device at addr on network and registers 4 KiB with
// access (what the peer may do to it: transport.RemoteWrite, RemoteRead,
// RemoteAtomic; each needs transport.LocalWrite too).
func newNode(network *mem.Net, addr string, access transport.Access) *node {
	link, err := network.Attach(netip.MustParseAddr(addr), mem.Options{})
	if err != nil {
		log.Fatal(err)
	}
	dev, err := transport.Open(link, transport.Options{})
	if err != nil {
		log.Fatal(err)
	}
	pd := dev.AllocPD()
	region, err := pd.Register(make([]byte, 4096), access|transport.LocalWrite)
	if err != nil {
		log.Fatal(err)
	}
	return &node{dev: dev, pd: pd, region: region, cq: dev.CreateCQ(16)}
}

// newQP creates a QP of type typ on n, receiving through srq if not nil.
func (n *node) newQP(typ transport.QPType, srq *transport.SRQ) *transport.QP {
	q, err := n.dev.CreateQP(n.pd, transport.QPInitAttr{Type: typ, SendCQ: n.cq, RecvCQ: n.cq, SRQ: srq,
		Cap: transport.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		log.Fatal(err)
	}
	return q
}

// connect brings qa (on a) and qb (on b) to RTS towards each other. The
// endpoints go through their text form, as they would over a socket.
// access is what each side's QP lets the other do (IBV_QP_ACCESS_FLAGS).
func connect(a *node, qa *transport.QP, b *node, qb *transport.QP, access transport.Access) (ea, eb transport.Endpoint) {
	ea, err := a.dev.LocalEndpoint(qa)
	if err != nil {
		log.Fatal(err)
	}
	eb, err = b.dev.LocalEndpoint(qb)
	if err != nil {
		log.Fatal(err)
	}
	// ea.String() is what a would send b, ParseEndpoint what b does with it.
	fromA, err := transport.ParseEndpoint(ea.String())
	if err != nil {
		log.Fatal(err)
	}
	fromB, err := transport.ParseEndpoint(eb.String())
	if err != nil {
		log.Fatal(err)
	}
	if err := a.dev.Connect(qa, ea, fromB, transport.ConnectOptions{Access: access}); err != nil {
		log.Fatal(err)
	}
	if err := b.dev.Connect(qb, eb, fromA, transport.ConnectOptions{Access: access}); err != nil {
		log.Fatal(err)
	}
	return ea, eb
}

// wait returns c's next completion, failing unless it is a success.
func wait(c *transport.CQ) transport.WC {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]transport.WC, 1)
	if _, err := c.PollWait(ctx, wc); err != nil {
		log.Fatal(err)
	}
	if wc[0].Status != transport.Success {
		log.Fatalf("%v completed with %v", wc[0].Opcode, wc[0].Status)
	}
	return wc[0]
}

// post posts wr on q.
func post(q *transport.QP, wr transport.SendWR) {
	if err := q.PostSend(&wr); err != nil {
		log.Fatal(err)
	}
}

// Example_rdmaWrite writes into the peer's memory. The target region and
// the target QP both allow transport.RemoteWrite; the peer learns the address
// and rkey out of band, as the endpoints.
func Example_rdmaWrite() {
	a, b := nodes(transport.RemoteWrite)
	defer a.dev.Close()
	defer b.dev.Close()
	qa, qb := a.newQP(transport.RC, nil), b.newQP(transport.RC, nil)
	connect(a, qa, b, qb, transport.RemoteWrite)

	n := copy(a.region.Bytes(), "written by a")
	post(qa, transport.SendWR{Opcode: transport.WRRDMAWrite, Flags: transport.Signaled, SGL: []transport.SGE{a.region.SGE(0, n)},
		RemoteAddr: b.region.Addr() + 100, RKey: b.region.RKey()})
	wc := wait(a.cq) // an RC WRITE completes once b has placed it
	fmt.Printf("a: %v %v\n", wc.Opcode, wc.Status)
	fmt.Printf("b's memory at 100: %q\n", b.region.Bytes()[100:100+n])
	// Output:
	// a: RDMA_WRITE success
	// b's memory at 100: "written by a"
}

// Example_rdmaRead reads the peer's memory. The source region and the
// QP that serves the READ allow transport.RemoteRead; the reader's buffer needs
// transport.LocalWrite, which every newNode region has.
func Example_rdmaRead() {
	a, b := nodes(transport.RemoteRead)
	defer a.dev.Close()
	defer b.dev.Close()
	qa, qb := a.newQP(transport.RC, nil), b.newQP(transport.RC, nil)
	connect(a, qa, b, qb, transport.RemoteRead)

	n := copy(b.region.Bytes(), "read from b")
	post(qa, transport.SendWR{Opcode: transport.WRRDMARead, Flags: transport.Signaled, SGL: []transport.SGE{a.region.SGE(0, n)},
		RemoteAddr: b.region.Addr(), RKey: b.region.RKey()})
	wc := wait(a.cq)
	fmt.Printf("a: %v %v %d bytes: %q\n", wc.Opcode, wc.Status, wc.ByteLen, a.region.Bytes()[:n])
	// Output:
	// a: RDMA_READ success 11 bytes: "read from b"
}

// Example_atomics adds to and then compares-and-swaps a 64-bit word in
// the peer's memory. The word is 8-byte aligned and, as on rxe, in host
// (little-endian) byte order; the original value lands in the local
// 8-byte buffer in the same order. The target region and QP allow
// transport.RemoteAtomic.
func Example_atomics() {
	a, b := nodes(transport.RemoteAtomic)
	defer a.dev.Close()
	defer b.dev.Close()
	qa, qb := a.newQP(transport.RC, nil), b.newQP(transport.RC, nil)
	connect(a, qa, b, qb, transport.RemoteAtomic)

	word := b.region.Bytes()[8:16]
	binary.LittleEndian.PutUint64(word, 40)
	orig := a.region.SGE(0, 8)
	post(qa, transport.SendWR{Opcode: transport.WRAtomicFetchAndAdd, Flags: transport.Signaled, SGL: []transport.SGE{orig},
		RemoteAddr: b.region.Addr() + 8, RKey: b.region.RKey(), CompareAdd: 2})
	wait(a.cq)
	fmt.Println("fetch-and-add 2: was", binary.LittleEndian.Uint64(a.region.Bytes()), "now", binary.LittleEndian.Uint64(word))

	post(qa, transport.SendWR{Opcode: transport.WRAtomicCmpAndSwp, Flags: transport.Signaled, SGL: []transport.SGE{orig},
		RemoteAddr: b.region.Addr() + 8, RKey: b.region.RKey(), CompareAdd: 42, Swap: 7})
	wait(a.cq)
	fmt.Println("compare 42, swap 7: was", binary.LittleEndian.Uint64(a.region.Bytes()), "now", binary.LittleEndian.Uint64(word))
	// Output:
	// fetch-and-add 2: was 40 now 42
	// compare 42, swap 7: was 42 now 7
}

// Example_ud sends a datagram. A UD QP has no one peer: each send names
// its destination with an address handle and the peer's QPN and Q_Key.
// The receive buffer starts with the 40-byte GRH area.
func Example_ud() {
	a, b := nodes(0)
	defer a.dev.Close()
	defer b.dev.Close()
	qa, qb := a.newQP(transport.UD, nil), b.newQP(transport.UD, nil)
	ea, eb := connect(a, qa, b, qb, 0)

	if err := qb.PostRecv(&transport.RecvWR{SGL: []transport.SGE{b.region.SGE(0, 1024)}}); err != nil {
		log.Fatal(err)
	}
	av, err := a.dev.AHAttr(ea, eb)
	if err != nil {
		log.Fatal(err)
	}
	ah, err := a.dev.CreateAH(a.pd, av)
	if err != nil {
		log.Fatal(err)
	}
	n := copy(a.region.Bytes(), "a datagram")
	post(qa, transport.SendWR{Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{a.region.SGE(0, n)},
		AH: ah, RemoteQPN: eb.QPN, RemoteQKey: transport.DefaultQKey})
	wc := wait(b.cq)
	fmt.Printf("b: %v from QP 0x%x, GRH %v: %q\n", wc.Opcode, wc.SrcQP, wc.Flags&transport.WithGRH != 0,
		b.region.Bytes()[40:wc.ByteLen])
	fmt.Printf("a: %v\n", wait(a.cq).Status)
	// Output:
	// b: RECV from QP 0x11, GRH true: "a datagram"
	// a: success
}

// Example_srq receives on two QPs from one shared receive queue: b posts
// its receives once, to the SRQ, and either QP takes the next one.
func Example_srq() {
	a, b := nodes(0)
	defer a.dev.Close()
	defer b.dev.Close()
	srq, err := b.dev.CreateSRQ(b.pd, transport.SRQAttr{MaxWR: 16, MaxSGE: 1})
	if err != nil {
		log.Fatal(err)
	}
	for i := range 2 {
		if err := srq.PostRecv(&transport.RecvWR{WRID: uint64(i), SGL: []transport.SGE{b.region.SGE(i*64, 64)}}); err != nil {
			log.Fatal(err)
		}
	}
	for _, msg := range []string{"first", "second"} {
		qa, qb := a.newQP(transport.RC, nil), b.newQP(transport.RC, srq)
		connect(a, qa, b, qb, 0)
		n := copy(a.region.Bytes(), msg)
		post(qa, transport.SendWR{Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{a.region.SGE(0, n)}})
		wc := wait(b.cq)
		wait(a.cq)
		fmt.Printf("QP 0x%x took receive %d: %q\n", wc.QPNum, wc.WRID, b.region.Bytes()[wc.WRID*64:][:wc.ByteLen])
	}
	// Output:
	// QP 0x11 took receive 0: "first"
	// QP 0x12 took receive 1: "second"
}

// Example_completionChannel waits for a completion event instead of
// polling: ReqNotify arms the CQ, the next completion sends one value on
// Events, and the consumer polls then re-arms (ibv_req_notify_cq and
// ibv_get_cq_event).
func Example_completionChannel() {
	a, b := nodes(0)
	defer a.dev.Close()
	defer b.dev.Close()
	qa, qb := a.newQP(transport.RC, nil), b.newQP(transport.RC, nil)
	connect(a, qa, b, qb, 0)

	b.cq.ReqNotify(false)
	if err := qb.PostRecv(&transport.RecvWR{WRID: 9, SGL: []transport.SGE{b.region.SGE(0, 64)}}); err != nil {
		log.Fatal(err)
	}
	n := copy(a.region.Bytes(), "wake up")
	post(qa, transport.SendWR{Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{a.region.SGE(0, n)}})
	select {
	case <-b.cq.Events():
	case <-time.After(10 * time.Second):
		log.Fatal("no completion event")
	}
	b.cq.ReqNotify(false) // re-arm before polling, so no completion slips between
	wc := make([]transport.WC, 4)
	got, err := b.cq.Poll(wc)
	if err != nil {
		log.Fatal(err)
	}
	for _, w := range wc[:got] {
		fmt.Printf("event, then %v wr %d: %q\n", w.Opcode, w.WRID, b.region.Bytes()[:w.ByteLen])
	}
	wait(a.cq)
	// Output:
	// event, then RECV wr 9: "wake up"
}

// Example_memoryWindow grants a peer a part of a region and revokes it
// again, without registering anything: b binds a type 2 memory window
// onto 16 bytes of its region (which needs transport.MWBind) and sends a the
// window's rkey; a writes through it; b's LOCAL_INV revokes it, and a's
// next WRITE with that rkey gets a remote access error (which ends a's
// connection, as every remote error does).
func Example_memoryWindow() {
	network := mem.NewNet(1)
	a, b := newNode(network, "192.0.2.1", 0), newNode(network, "192.0.2.2", transport.MWBind)
	defer a.dev.Close()
	defer b.dev.Close()
	qa, qb := a.newQP(transport.RC, nil), b.newQP(transport.RC, nil)
	connect(a, qa, b, qb, transport.RemoteWrite) // the QPs allow WRITE; the window grants it

	w, err := b.pd.AllocMW(transport.MWType2)
	if err != nil {
		log.Fatal(err)
	}
	rkey := transport.IncRKey(w.RKey()) // a new variant, so older keys of the window stay dead
	window := transport.BindInfo{MR: b.region, Addr: b.region.Addr() + 64, Length: 16, Access: transport.RemoteWrite}
	post(qb, transport.SendWR{Opcode: transport.WRBindMW, Flags: transport.Signaled, Bind: transport.MWBindWR{MW: w, RKey: rkey, Info: window}})
	fmt.Println("b:", wait(b.cq).Opcode)

	n := copy(a.region.Bytes(), "through a window")
	post(qa, transport.SendWR{Opcode: transport.WRRDMAWrite, Flags: transport.Signaled, SGL: []transport.SGE{a.region.SGE(0, n)},
		RemoteAddr: window.Addr, RKey: rkey})
	fmt.Println("a:", wait(a.cq).Opcode)
	fmt.Printf("b's memory at 64: %q\n", b.region.Bytes()[64:64+n])

	post(qb, transport.SendWR{Opcode: transport.WRLocalInv, Flags: transport.Signaled, InvRKey: rkey})
	fmt.Println("b:", wait(b.cq).Opcode)
	post(qa, transport.SendWR{Opcode: transport.WRRDMAWrite, Flags: transport.Signaled, SGL: []transport.SGE{a.region.SGE(0, 1)},
		RemoteAddr: window.Addr, RKey: rkey})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]transport.WC, 1)
	if _, err := a.cq.PollWait(ctx, wc); err != nil {
		log.Fatal(err)
	}
	fmt.Println("a:", wc[0].Opcode, wc[0].Status)
	// Output:
	// b: BIND_MW
	// a: RDMA_WRITE
	// b's memory at 64: "through a window"
	// b: LOCAL_INV
	// a: RDMA_WRITE remote access error
}
