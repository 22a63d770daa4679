// Command newcomer is a program a goroce user could write from the
// documentation alone: it imports only the public packages (device,
// nic and its links nic/mem and nic/udp, mr, cq, qp), lives in a module of
// its own that reaches goroce through a replace directive, as a user's
// module would, and runs every operation between two devices: RC SEND,
// SEND with immediate, SEND with invalidate, RDMA WRITE, WRITE with
// immediate, RDMA READ, compare-and-swap and fetch-and-add; UC SEND and
// WRITE; UD SEND through an address handle; RC receives from a shared
// receive queue; and a completion event. Each checks the bytes and
// completions it should produce.
//
//	newcomer -link mem   # both devices on the in-memory link
//	newcomer -link udp   # over kernel UDP on 127.0.0.1 and 127.0.0.2
//
// It prints one line per operation and exits 1 with a one-line error at
// the first failure. make newcomer builds and runs it both ways.
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/nic/udp"
	"github.com/goroce/goroce/transport"
)

// wait bounds every wait for a completion: an upper bound on a hang, never
// how long an operation is expected to take.
const wait = 10 * time.Second

// all is every right a region or QP of this program grants.
const all = transport.LocalWrite | transport.RemoteWrite | transport.RemoteRead | transport.RemoteAtomic

func main() {
	link := flag.String("link", "mem", "mem or udp")
	flag.Parse()
	if err := run(*link); err != nil {
		fmt.Fprintf(os.Stderr, "newcomer -link %s: %v\n", *link, err)
		os.Exit(1)
	}
}

// node is one side: a device, a protection domain, a 4 KiB region and one
// completion queue for everything.
type node struct {
	dev *transport.Device
	pd  *transport.PD
	mr  *transport.MR
	cq  *transport.CQ
}

func openLinks(kind string) (a, b nic.Link, err error) {
	switch kind {
	case "mem":
		n := mem.NewNet(1)
		if a, err = n.Attach(netip.MustParseAddr("192.0.2.1"), mem.Options{}); err != nil {
			return nil, nil, err
		}
		b, err = n.Attach(netip.MustParseAddr("192.0.2.2"), mem.Options{})
	case "udp":
		if a, err = udp.Open(udp.Config{Addr: netip.MustParseAddr("127.0.0.1")}); err != nil {
			return nil, nil, err
		}
		b, err = udp.Open(udp.Config{Addr: netip.MustParseAddr("127.0.0.2")})
	default:
		return nil, nil, fmt.Errorf("unknown link %q: want mem or udp", kind)
	}
	if err != nil {
		a.Close()
	}
	return a, b, err
}

func newNode(l nic.Link) (*node, error) {
	dev, err := transport.Open(l, transport.Options{})
	if err != nil {
		l.Close()
		return nil, err
	}
	pd := dev.AllocPD()
	region, err := pd.Register(make([]byte, 4096), all)
	if err != nil {
		dev.Close()
		return nil, err
	}
	return &node{dev: dev, pd: pd, mr: region, cq: dev.CreateCQ(64)}, nil
}

func (n *node) qp(typ transport.QPType, srq *transport.SRQ) (*transport.QP, error) {
	return n.dev.CreateQP(n.pd, transport.QPInitAttr{Type: typ, SendCQ: n.cq, RecvCQ: n.cq, SRQ: srq,
		Cap: transport.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
}

// connect creates a QP of typ on each side and connects them; the
// endpoints cross as bytes (MarshalBinary), as over a socket.
func connect(a, b *node, typ transport.QPType, srqB *transport.SRQ) (qa, qb *transport.QP, ea, eb transport.Endpoint, err error) {
	if qa, err = a.qp(typ, nil); err != nil {
		return
	}
	if qb, err = b.qp(typ, srqB); err != nil {
		return
	}
	if ea, err = a.dev.LocalEndpoint(qa); err != nil {
		return
	}
	if eb, err = b.dev.LocalEndpoint(qb); err != nil {
		return
	}
	var fromA, fromB transport.Endpoint
	wa, _ := ea.MarshalBinary()
	wb, _ := eb.MarshalBinary()
	if err = fromA.UnmarshalBinary(wa); err != nil {
		return
	}
	if err = fromB.UnmarshalBinary(wb); err != nil {
		return
	}
	access := transport.RemoteWrite
	if typ == transport.RC {
		access = all
	}
	if err = a.dev.Connect(qa, ea, fromB, transport.ConnectOptions{Access: access}); err != nil {
		return
	}
	err = b.dev.Connect(qb, eb, fromA, transport.ConnectOptions{Access: access})
	return
}

// next returns c's next completion, an error unless it succeeded.
func next(c *transport.CQ) (transport.WC, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	wc := make([]transport.WC, 1)
	if _, err := c.PollWait(ctx, wc); err != nil {
		return transport.WC{}, fmt.Errorf("waiting for a completion: %w", err)
	}
	if wc[0].Status != transport.Success {
		return wc[0], fmt.Errorf("wr %d: %v", wc[0].WRID, wc[0].Status)
	}
	return wc[0], nil
}

// expect checks a completion's opcode and the bytes it should have left.
func expect(wc transport.WC, op transport.WCOpcode, got, want []byte) error {
	if wc.Opcode != op {
		return fmt.Errorf("completion %v, want %v", wc.Opcode, op)
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("%v: memory holds %q, want %q", op, got, want)
	}
	return nil
}

// step is one operation; it reports what it showed.
type step struct {
	name string
	do   func(a, b *node) (string, error)
}

func run(kind string) error {
	la, lb, err := openLinks(kind)
	if err != nil {
		return err
	}
	a, err := newNode(la)
	if err != nil {
		lb.Close()
		return err
	}
	defer a.dev.Close()
	b, err := newNode(lb)
	if err != nil {
		return err
	}
	defer b.dev.Close()
	for _, s := range steps {
		got, err := s.do(a, b)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		fmt.Printf("%-22s ok  %s\n", s.name, got)
	}
	return nil
}

var steps = []step{
	{"RC SEND", func(a, b *node) (string, error) { return sendRecv(a, b, transport.RC, transport.WRSend) }},
	{"RC SEND with imm", func(a, b *node) (string, error) { return sendRecv(a, b, transport.RC, transport.WRSendWithImm) }},
	{"RC SEND with inv", sendInv},
	{"RC RDMA WRITE", func(a, b *node) (string, error) { return write(a, b, transport.RC, transport.WRRDMAWrite) }},
	{"RC WRITE with imm", func(a, b *node) (string, error) { return write(a, b, transport.RC, transport.WRRDMAWriteWithImm) }},
	{"RC RDMA READ", read},
	{"RC atomics", atomics},
	{"UC SEND", func(a, b *node) (string, error) { return sendRecv(a, b, transport.UC, transport.WRSend) }},
	{"UC RDMA WRITE", func(a, b *node) (string, error) { return write(a, b, transport.UC, transport.WRRDMAWrite) }},
	{"UD SEND", ud},
	{"RC SRQ", srq},
	{"completion event", event},
}

func sendRecv(a, b *node, typ transport.QPType, op transport.WROpcode) (string, error) {
	qa, qb, _, _, err := connect(a, b, typ, nil)
	if err != nil {
		return "", err
	}
	return sendOn(qa, qb, a, b, typ, op)
}

// sendOn sends one message with op from qa to qb and checks it arrived.
func sendOn(qa, qb *transport.QP, a, b *node, typ transport.QPType, op transport.WROpcode) (string, error) {
	msg := []byte(fmt.Sprintf("%v %v", typ, op))
	if err := qb.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{b.mr.SGE(0, 256)}}); err != nil {
		return "", err
	}
	copy(a.mr.Bytes(), msg)
	if err := qa.PostSend(&transport.SendWR{WRID: 2, Opcode: op, Flags: transport.Signaled, Imm: 0xc0ffee,
		SGL: []transport.SGE{a.mr.SGE(0, len(msg))}}); err != nil {
		return "", err
	}
	wc, err := next(b.cq)
	if err != nil {
		return "", err
	}
	if err := expect(wc, transport.OpRecv, b.mr.Bytes()[:wc.ByteLen], msg); err != nil {
		return "", err
	}
	if op == transport.WRSendWithImm && (wc.Flags&transport.WithImm == 0 || wc.ImmData != 0xc0ffee) {
		return "", fmt.Errorf("immediate %#x (flags %v), want 0xc0ffee", wc.ImmData, wc.Flags)
	}
	if _, err := next(a.cq); err != nil {
		return "", err
	}
	return fmt.Sprintf("%q", msg), nil
}

func sendInv(a, b *node) (string, error) {
	qa, qb, _, _, err := connect(a, b, transport.RC, nil)
	if err != nil {
		return "", err
	}
	// The region to invalidate: its own, so the others stay usable.
	victim, err := b.pd.Register(make([]byte, 64), transport.LocalWrite|transport.RemoteWrite)
	if err != nil {
		return "", err
	}
	if err := qb.PostRecv(&transport.RecvWR{WRID: 1, SGL: []transport.SGE{b.mr.SGE(0, 64)}}); err != nil {
		return "", err
	}
	copy(a.mr.Bytes(), "invalidate")
	if err := qa.PostSend(&transport.SendWR{Opcode: transport.WRSendWithInv, Flags: transport.Signaled, InvRKey: victim.RKey(),
		SGL: []transport.SGE{a.mr.SGE(0, 10)}}); err != nil {
		return "", err
	}
	wc, err := next(b.cq)
	if err != nil {
		return "", err
	}
	if wc.Flags&transport.WithInv == 0 || wc.InvalidatedRKey != victim.RKey() {
		return "", fmt.Errorf("completion flags %v rkey %#x, want WithInv and %#x", wc.Flags, wc.InvalidatedRKey, victim.RKey())
	}
	if _, err := next(a.cq); err != nil {
		return "", err
	}
	return fmt.Sprintf("rkey %#x invalidated", victim.RKey()), nil
}

func write(a, b *node, typ transport.QPType, op transport.WROpcode) (string, error) {
	qa, qb, _, _, err := connect(a, b, typ, nil)
	if err != nil {
		return "", err
	}
	msg := []byte(fmt.Sprintf("%v %v", typ, op))
	const at = 1024
	clear(b.mr.Bytes()[at : at+len(msg)])
	if op == transport.WRRDMAWriteWithImm {
		if err := qb.PostRecv(&transport.RecvWR{WRID: 1}); err != nil {
			return "", err
		}
	}
	copy(a.mr.Bytes(), msg)
	if err := qa.PostSend(&transport.SendWR{Opcode: op, Flags: transport.Signaled, Imm: 7, SGL: []transport.SGE{a.mr.SGE(0, len(msg))},
		RemoteAddr: b.mr.Addr() + at, RKey: b.mr.RKey()}); err != nil {
		return "", err
	}
	if op == transport.WRRDMAWriteWithImm {
		wc, err := next(b.cq)
		if err != nil {
			return "", err
		}
		if wc.Opcode != transport.OpRecvRDMAWithImm || wc.ImmData != 7 {
			return "", fmt.Errorf("peer completion %v imm %d, want RECV_RDMA_WITH_IMM 7", wc.Opcode, wc.ImmData)
		}
	}
	wc, err := next(a.cq)
	if err != nil {
		return "", err
	}
	if typ == transport.UC {
		// A UC WRITE completes when sent, not when placed. A SEND after it
		// on the same QP is received after it (UC keeps order; nothing is
		// lost here), so its receive completion says the WRITE landed.
		if _, err := sendOn(qa, qb, a, b, typ, transport.WRSend); err != nil {
			return "", fmt.Errorf("the SEND after the WRITE: %w", err)
		}
	}
	if err := expect(wc, transport.OpRDMAWrite, b.mr.Bytes()[at:at+len(msg)], msg); err != nil {
		return "", err
	}
	return fmt.Sprintf("%q", msg), nil
}

func read(a, b *node) (string, error) {
	qa, _, _, _, err := connect(a, b, transport.RC, nil)
	if err != nil {
		return "", err
	}
	msg := []byte("read from b's memory")
	copy(b.mr.Bytes()[2048:], msg)
	clear(a.mr.Bytes()[:len(msg)])
	if err := qa.PostSend(&transport.SendWR{Opcode: transport.WRRDMARead, Flags: transport.Signaled, SGL: []transport.SGE{a.mr.SGE(0, len(msg))},
		RemoteAddr: b.mr.Addr() + 2048, RKey: b.mr.RKey()}); err != nil {
		return "", err
	}
	wc, err := next(a.cq)
	if err != nil {
		return "", err
	}
	if err := expect(wc, transport.OpRDMARead, a.mr.Bytes()[:len(msg)], msg); err != nil {
		return "", err
	}
	return fmt.Sprintf("%q", msg), nil
}

func atomics(a, b *node) (string, error) {
	qa, _, _, _, err := connect(a, b, transport.RC, nil)
	if err != nil {
		return "", err
	}
	const at = 3000 // 8-byte aligned from the region's start
	if (b.mr.Addr()+at)&7 != 0 {
		return "", errors.New("the target word is not 8-byte aligned")
	}
	word := b.mr.Bytes()[at : at+8]
	binary.LittleEndian.PutUint64(word, 100)
	for _, c := range []struct {
		op               transport.WROpcode
		compareAdd, swap uint64
		orig, now        uint64
	}{
		{transport.WRAtomicFetchAndAdd, 5, 0, 100, 105},
		{transport.WRAtomicCmpAndSwp, 105, 1, 105, 1},
		{transport.WRAtomicCmpAndSwp, 105, 2, 1, 1}, // compare fails: no swap
	} {
		if err := qa.PostSend(&transport.SendWR{Opcode: c.op, Flags: transport.Signaled, SGL: []transport.SGE{a.mr.SGE(0, 8)},
			RemoteAddr: b.mr.Addr() + at, RKey: b.mr.RKey(), CompareAdd: c.compareAdd, Swap: c.swap}); err != nil {
			return "", err
		}
		if _, err := next(a.cq); err != nil {
			return "", err
		}
		orig, now := binary.LittleEndian.Uint64(a.mr.Bytes()), binary.LittleEndian.Uint64(word)
		if orig != c.orig || now != c.now {
			return "", fmt.Errorf("%v(%d, %d): was %d now %d, want %d and %d", c.op, c.compareAdd, c.swap, orig, now, c.orig, c.now)
		}
	}
	return "100 +5 -> 105, cas 105->1, cas 105->2 refused", nil
}

func ud(a, b *node) (string, error) {
	qa, qb, ea, eb, err := connect(a, b, transport.UD, nil)
	if err != nil {
		return "", err
	}
	if err := qb.PostRecv(&transport.RecvWR{SGL: []transport.SGE{b.mr.SGE(0, 1024)}}); err != nil {
		return "", err
	}
	av, err := a.dev.AHAttr(ea, eb)
	if err != nil {
		return "", err
	}
	ah, err := a.dev.CreateAH(a.pd, av)
	if err != nil {
		return "", err
	}
	msg := []byte("a datagram")
	copy(a.mr.Bytes(), msg)
	if err := qa.PostSend(&transport.SendWR{Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{a.mr.SGE(0, len(msg))},
		AH: ah, RemoteQPN: eb.QPN, RemoteQKey: transport.DefaultQKey}); err != nil {
		return "", err
	}
	wc, err := next(b.cq)
	if err != nil {
		return "", err
	}
	const grh = 40
	if wc.Flags&transport.WithGRH == 0 || wc.SrcQP != ea.QPN || wc.ByteLen < grh {
		return "", fmt.Errorf("completion flags %v from QP %#x, %d bytes", wc.Flags, wc.SrcQP, wc.ByteLen)
	}
	if err := expect(wc, transport.OpRecv, b.mr.Bytes()[grh:wc.ByteLen], msg); err != nil {
		return "", err
	}
	if _, err := next(a.cq); err != nil {
		return "", err
	}
	return fmt.Sprintf("%q from QP %#x", msg, wc.SrcQP), nil
}

func srq(a, b *node) (string, error) {
	s, err := b.dev.CreateSRQ(b.pd, transport.SRQAttr{MaxWR: 8, MaxSGE: 1})
	if err != nil {
		return "", err
	}
	for i := range 2 {
		if err := s.PostRecv(&transport.RecvWR{WRID: uint64(i), SGL: []transport.SGE{b.mr.SGE(i*64, 64)}}); err != nil {
			return "", err
		}
	}
	var took []uint32
	for i, msg := range []string{"to the first QP", "to the second QP"} {
		qa, _, _, _, err := connect(a, b, transport.RC, s)
		if err != nil {
			return "", err
		}
		copy(a.mr.Bytes(), msg)
		if err := qa.PostSend(&transport.SendWR{Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{a.mr.SGE(0, len(msg))}}); err != nil {
			return "", err
		}
		wc, err := next(b.cq)
		if err != nil {
			return "", err
		}
		if wc.WRID != uint64(i) {
			return "", fmt.Errorf("message %d took receive %d", i, wc.WRID)
		}
		if err := expect(wc, transport.OpRecv, b.mr.Bytes()[i*64:i*64+int(wc.ByteLen)], []byte(msg)); err != nil {
			return "", err
		}
		if _, err := next(a.cq); err != nil {
			return "", err
		}
		took = append(took, wc.QPNum)
	}
	return fmt.Sprintf("QPs %#x and %#x shared one SRQ", took[0], took[1]), nil
}

func event(a, b *node) (string, error) {
	qa, qb, _, _, err := connect(a, b, transport.RC, nil)
	if err != nil {
		return "", err
	}
	b.cq.ReqNotify(false)
	if err := qb.PostRecv(&transport.RecvWR{WRID: 5, SGL: []transport.SGE{b.mr.SGE(0, 64)}}); err != nil {
		return "", err
	}
	copy(a.mr.Bytes(), "ping")
	if err := qa.PostSend(&transport.SendWR{Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{a.mr.SGE(0, 4)}}); err != nil {
		return "", err
	}
	select {
	case <-b.cq.Events():
	case <-time.After(wait):
		return "", errors.New("no completion event")
	}
	wc := make([]transport.WC, 1)
	if n, err := b.cq.Poll(wc); err != nil || n != 1 || wc[0].WRID != 5 {
		return "", fmt.Errorf("after the event, poll gave %d completions (%v): %+v", n, err, wc[0])
	}
	if _, err := next(a.cq); err != nil {
		return "", err
	}
	return "event, then the receive", nil
}
