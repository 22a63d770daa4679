package transport_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testharness"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

type gotMAD struct {
	src, dst netip.Addr
	mad      []byte
}

// attachChan attaches a QP1 handler that copies each MAD into a channel.
func attachChan(t *testing.T, d *transport.Device) chan gotMAD {
	ch := make(chan gotMAD, 16)
	detach, err := d.AttachGSI(func(src, dst netip.Addr, m []byte) {
		ch <- gotMAD{src, dst, append([]byte(nil), m...)}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(detach)
	return ch
}

// TestGSISendReceive: a MAD sent from one device's QP1 arrives at the
// other's handler with both addresses, and travels as rxe frames one: UD
// SEND_ONLY to QP1, P_Key 0xffff, DETH source QP 1 and Q_Key 0x80010000,
// ACK request set, 256 bytes, the PSN counting up per MAD.
func TestGSISendReceive(t *testing.T) {
	net := mem.NewNet(1)
	var sent [][]byte
	o := testharness.Options{}
	o.MemDefaults()
	a := testharness.NewMemPeer(t, net, "192.0.2.1", o)
	b := testharness.NewMemPeer(t, net, "192.0.2.2", o)
	a.Dev.SetTrace(func(out bool, dg []byte) {
		if out {
			sent = append(sent, append([]byte(nil), dg...))
		}
	})
	ch := attachChan(t, b.Dev)
	if _, err := b.Dev.AttachGSI(func(netip.Addr, netip.Addr, []byte) {}); err == nil {
		t.Fatal("a second handler attached")
	}
	for i := range 2 {
		m := bytes.Repeat([]byte{byte(i + 1)}, transport.MADLen)
		if err := a.Dev.SendMAD(a.Addr, b.Addr, m); err != nil {
			t.Fatal(err)
		}
		select {
		case g := <-ch:
			if g.src != a.Addr || g.dst != b.Addr || !bytes.Equal(g.mad, m) {
				t.Fatalf("got %v -> %v %x", g.src, g.dst, g.mad[:4])
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no MAD arrived")
		}
	}
	if len(sent) != 2 {
		t.Fatalf("%d datagrams traced", len(sent))
	}
	for i, dg := range sent {
		f, err := bth.DecodeIP(dg)
		if err != nil || !f.VerifyICRC() {
			t.Fatalf("datagram %d: %v, ICRC ok %v", i, err, err == nil && f.VerifyICRC())
		}
		p, err := bth.Parse(f.RoCE())
		if err != nil {
			t.Fatal(err)
		}
		bh := p.BTH()
		if p.OpCode() != bth.UDSendOnly || bh.PKey() != 0xffff || bh.DestQP() != 1 || !bh.AckReq() ||
			bh.PSN() != bth.PSN(i) || p.DETH().SrcQP() != 1 || p.DETH().QKey() != 0x80010000 || p.PayloadLen() != 256 {
			t.Errorf("datagram %d: %v pkey %#x qp %d ackreq %v psn %d deth %d %#x len %d", i, p.OpCode(), bh.PKey(),
				bh.DestQP(), bh.AckReq(), bh.PSN(), p.DETH().SrcQP(), p.DETH().QKey(), p.PayloadLen())
		}
	}
	if s := a.Dev.MADStats(); s.Sent != 2 {
		t.Errorf("sender %+v", s)
	}
	if s := b.Dev.MADStats(); s.Received != 2 || s.Dropped != 0 {
		t.Errorf("receiver %+v", s)
	}
	if err := a.Dev.SendMAD(a.Addr, b.Addr, make([]byte, 255)); err == nil {
		t.Error("a 255-byte MAD was sent")
	}
}

// TestGSIMalformed: packets to QP1 that are no MAD (another opcode, Q_Key,
// P_Key or length) are counted and dropped, never handed on; a MAD with
// no handler attached is counted as unclaimed.
func TestGSIMalformed(t *testing.T) {
	net := mem.NewNet(1)
	o := testharness.Options{}
	o.MemDefaults()
	b := testharness.NewMemPeer(t, net, "192.0.2.2", o)
	r := newRawPeer(t, net, "192.0.2.9")
	r.dst = b
	send := func(op bth.OpCode, pkey uint16, qkey uint32, n int) {
		ob := bth.Outer{Src: r.addr, Dst: b.Addr, SrcPort: 0xc000}
		buf := make([]byte, nic.Headroom+bth.DraftLen(&ob, op, n))
		d := bth.NewDraft(buf[nic.Headroom:], &ob, bth.BTHFields{OpCode: op, PKey: pkey, DestQP: 1}, n)
		if d.Info().Headers.Has(bth.ExtDETH) {
			bth.DETH(d.Ext(bth.ExtDETH)).SetQKey(qkey)
			bth.DETH(d.Ext(bth.ExtDETH)).SetSrcQP(1)
		}
		d.Seal()
		if err := r.SendBuilt(buf); err != nil {
			t.Fatal(err)
		}
	}
	send(bth.UDSendOnly, 0xffff, transport.GSIQKey, 256) // unclaimed: no handler yet
	waitCount(t, "unclaimed", func() uint64 { return b.Dev.MADStats().Unclaimed }, 1)
	ch := attachChan(t, b.Dev)
	send(bth.UDSendOnly, 0xffff, 0x11111111, 256)
	send(bth.UDSendOnly, 0x1234, transport.GSIQKey, 256)
	send(bth.UDSendOnly, 0xffff, transport.GSIQKey, 255)
	send(bth.UDSendOnly, 0xffff, transport.GSIQKey, 0)
	send(bth.RCSendOnly, 0xffff, 0, 256)
	waitCount(t, "dropped", func() uint64 { return b.Dev.MADStats().Dropped }, 5)
	send(bth.UDSendOnly, 0x7fff, transport.GSIQKey, 256) // a limited-member P_Key is the same partition
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the good MAD did not arrive")
	}
	if s := b.Dev.MADStats(); s.Received != 1 || s.Dropped != 5 || s.Unclaimed != 1 {
		t.Errorf("%+v", s)
	}
	stats := map[string]uint64{}
	for _, c := range b.Dev.Stats() {
		stats[c.Name] = c.Value
	}
	if stats["gsi_rcvd_mads"] != 1 || stats["gsi_dropped"] != 5 || stats["gsi_unclaimed"] != 1 || stats["gsi_sent_mads"] != 0 {
		t.Errorf("Stats: %v", stats)
	}
}
