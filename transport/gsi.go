package transport

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic"
)

// QP1, the General Services Interface (IBA 13.5): every device has it, and
// the connection manager (package cm) sends and receives its management
// datagrams (MADs) through it. On the wire a MAD is a UD SEND_ONLY to QP1
// with P_Key 0xffff, a DETH of source QP 1 and the GSI Q_Key 0x80010000,
// and 256 bytes of payload, as rxe sends and checks them
// (../shared/rxe-peer/captures/rping_c5.pcap). The device handles QP1
// itself, outside the QP table: it is no verbs QP a program creates. A
// MAD costs an allocation or two (the handler copies it, a send builds
// its own frame); the data path does not pass here.

// GSI constants.
const (
	GSIQPN  = 1          // the QP number of the General Services Interface
	GSIQKey = 0x80010000 // its Q_Key (IBA 10.2.5: well-known, controlled)
	GSIPKey = 0xffff     // the default P_Key MADs carry
	madLen  = 256        // every MAD (package mad's Len)
)

// MADStats counts the MADs of a device's QP1.
type MADStats struct {
	Received  uint64 // well-formed MADs handed to the handler
	Sent      uint64 // MADs sent
	Dropped   uint64 // packets to QP1 that were no MAD: wrong opcode, P_Key, Q_Key or length
	Unclaimed uint64 // MADs that arrived with no handler attached
}

// gsi is a device's QP1.
type gsi struct {
	mu                                 sync.Mutex
	handler                            atomic.Pointer[func(src, dst netip.Addr, mad []byte)]
	psn                                atomic.Uint32
	received, sent, dropped, unclaimed atomic.Uint64
}

// MADStats returns the counters of the device's QP1.
func (d *Device) MADStats() MADStats {
	g := &d.gsi
	return MADStats{Received: g.received.Load(), Sent: g.sent.Load(),
		Dropped: g.dropped.Load(), Unclaimed: g.unclaimed.Load()}
}

// errGSIBusy is AttachGSI's answer when QP1 has a handler already.
var errGSIBusy = errors.New("device: QP1 has a handler already")

// AttachGSI installs h as the handler of the MADs QP1 receives. h runs on
// the receive path: it must copy what it keeps and must not block.
func (d *Device) AttachGSI(h func(src, dst netip.Addr, mad []byte)) (detach func(), err error) {
	g := &d.gsi
	g.mu.Lock()
	defer g.mu.Unlock()
	if d.closedNow() {
		return nil, errDeviceClosed("attach_gsi")
	}
	if g.handler.Load() != nil {
		return nil, errGSIBusy
	}
	p := &h
	g.handler.Store(p)
	return func() { g.handler.CompareAndSwap(p, nil) }, nil
}

// gsiInput takes a packet addressed to QP1: a MAD is handed to the
// handler, anything else is counted and dropped.
func (d *Device) gsiInput(p bth.Packet, f bth.Frame) {
	g := &d.gsi
	if p.OpCode() != bth.UDSendOnly || p.BTH().PKey()&0x7fff != GSIPKey&0x7fff ||
		p.DETH().QKey() != GSIQKey || p.PayloadLen() != madLen {
		g.dropped.Add(1)
		return
	}
	h := g.handler.Load()
	if h == nil {
		g.unclaimed.Add(1)
		return
	}
	g.received.Add(1)
	(*h)(f.SrcAddr(), f.DstAddr(), p.Payload())
}

// SendMAD sends a 256-byte MAD from QP1 at local address src to QP1 at
// dst: a UD SEND_ONLY with the GSI's P_Key, Q_Key and source QP, its PSN
// counting up per MAD as rxe's QP1 does.
func (d *Device) SendMAD(src, dst netip.Addr, mad []byte) error {
	if d.closedNow() {
		return errDeviceClosed("send_mad")
	}
	if len(mad) != madLen {
		return fmt.Errorf("device: send_mad: %d bytes, want %d", len(mad), madLen)
	}
	if src.Unmap().Is4() != dst.Unmap().Is4() {
		return fmt.Errorf("device: send_mad: %v and %v are not of one family", src, dst)
	}
	o := bth.Outer{Src: src, Dst: dst, SrcPort: d.link.SrcPort(GSIQPN)}
	buf := make([]byte, nic.Headroom+bth.DraftLen(&o, bth.UDSendOnly, madLen))
	psn := bth.PSN((d.gsi.psn.Add(1) - 1) & bth.PSNMask)
	p := bth.NewDraft(buf[nic.Headroom:], &o, bth.BTHFields{OpCode: bth.UDSendOnly, PKey: GSIPKey,
		DestQP: GSIQPN, AckReq: true, PSN: psn}, madLen)
	deth := bth.DETH(p.Ext(bth.ExtDETH))
	deth.SetQKey(GSIQKey)
	deth.SetSrcQP(GSIQPN)
	copy(p.Payload(), mad)
	ip := p.Seal()
	if d.trace != nil {
		d.trace(true, ip)
	}
	if _, err := d.link.Send([]nic.Frame{{B: buf, Off: nic.Headroom}}); err != nil {
		return fmt.Errorf("device: send_mad: %w", err)
	}
	d.gsi.sent.Add(1)
	d.counters.SentPkts.Add(1)
	return nil
}
