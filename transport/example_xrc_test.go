package transport_test

import (
	"fmt"
	"log"

	"github.com/goroce/goroce/transport"
)

// Example_xrc shares one receive queue at a target among initiators
// (XRC): b opens an XRC domain, creates an XRC SRQ in it with its CQ, and
// one XRC target QP per initiator; a's two XRC initiator QPs (as if of
// two processes) each connect to one target QP, and every SEND names the
// SRQ by its number, which b tells a out of band as it tells its
// endpoints. The receives complete on the SRQ's CQ. An initiator may also
// WRITE, READ and run atomics; each request names an SRQ too.
func Example_xrc() {
	a, b := nodes(transport.RemoteWrite)
	defer a.dev.Close()
	defer b.dev.Close()
	xrcd, err := b.dev.OpenXRCD()
	if err != nil {
		log.Fatal(err)
	}
	srq, err := b.dev.CreateSRQEx(b.pd, transport.SRQInitAttr{Type: transport.SRQXRC, XRCD: xrcd, CQ: b.cq,
		Attr: transport.SRQAttr{MaxWR: 16, MaxSGE: 1}})
	if err != nil {
		log.Fatal(err)
	}
	for i := range 2 {
		if err := srq.PostRecv(&transport.RecvWR{WRID: uint64(i), SGL: []transport.SGE{b.region.SGE(i*64, 64)}}); err != nil {
			log.Fatal(err)
		}
	}
	for _, msg := range []string{"from process 1", "from process 2"} {
		ini, err := a.dev.CreateQP(a.pd, transport.QPInitAttr{Type: transport.XRCIni, SendCQ: a.cq, Cap: transport.QPCap{MaxSendWR: 16, MaxSendSGE: 1}})
		if err != nil {
			log.Fatal(err)
		}
		tgt, err := b.dev.CreateQP(nil, transport.QPInitAttr{Type: transport.XRCTgt, XRCD: xrcd}) // no PD, CQ or queue of its own
		if err != nil {
			log.Fatal(err)
		}
		connect(a, ini, b, tgt, transport.RemoteWrite)
		n := copy(a.region.Bytes(), msg)
		post(ini, transport.SendWR{Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{a.region.SGE(0, n)}, RemoteSRQN: srq.SRQN()})
		wc := wait(b.cq)
		wait(a.cq)
		fmt.Printf("SRQ %d receive %d via %v QP 0x%x from 0x%x: %q\n", srq.SRQN(), wc.WRID, tgt.Type(), wc.QPNum, wc.SrcQP,
			b.region.Bytes()[wc.WRID*64:][:wc.ByteLen])
		// A WRITE through the same initiator lands in b's region.
		post(ini, transport.SendWR{Opcode: transport.WRRDMAWrite, Flags: transport.Signaled, SGL: []transport.SGE{a.region.SGE(0, n)},
			RemoteAddr: b.region.Addr() + 1024, RKey: b.region.RKey(), RemoteSRQN: srq.SRQN()})
		wait(a.cq)
		fmt.Printf("WRITE: %q\n", b.region.Bytes()[1024:][:n])
	}
	// Output:
	// SRQ 1 receive 0 via XRC_TGT QP 0x11 from 0x11: "from process 1"
	// WRITE: "from process 1"
	// SRQ 1 receive 1 via XRC_TGT QP 0x12 from 0x12: "from process 2"
	// WRITE: "from process 2"
}
