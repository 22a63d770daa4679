package bth

import "github.com/goroce/goroce/inet"

// Draft is one RoCEv2 packet being built in place: the one packet builder
// that every sender shares (the queue pairs, QP1's MADs, the tests'
// scripted peers and roced conform's). The layout is the outer IP and UDP
// headers, the BTH, the opcode's extended headers, the payload, the pad
// and the ICRC. NewDraft writes the BTH; the caller fills the extended
// headers and the payload through Ext and Payload and may still change
// the BTH (AckReq, SE); Seal writes the outer headers and the ICRC last,
// since the ICRC covers every header before it.
type Draft struct {
	o    *Outer
	dg   []byte // outer headers through ICRC
	hl   int    // outer header length
	hdr  int    // BTH and extended headers
	pay  int
	info *Info
}

// DraftLen returns the length of the datagram NewDraft lays out: the
// outer headers, the opcode's transport headers (the BTH alone for a
// reserved opcode), payLen bytes, their pad and the ICRC.
func DraftLen(o *Outer, op OpCode, payLen int) int {
	return o.Len() + draftHdrLen(op.Info()) + payLen + PadFor(payLen) + ICRCLen
}

func draftHdrLen(info *Info) int {
	if info.valid {
		return info.HdrLen
	}
	return BTHLen
}

// NewDraft lays a packet out at the start of b, which must hold
// DraftLen(o, f.OpCode, payLen) bytes, and encodes its BTH from f with
// the pad count payLen needs. The pad bytes are zeroed; the extended
// headers and the payload are the caller's to fill. o is read again by
// Seal. A reserved opcode gets the BTH alone, so a test can send one.
func NewDraft(b []byte, o *Outer, f BTHFields, payLen int) Draft {
	info := f.OpCode.Info()
	hl, hdr := o.Len(), draftHdrLen(info)
	pad := PadFor(payLen)
	n := hl + hdr + payLen + pad + ICRCLen
	dg := b[:n]
	f.PadCount = uint8(pad)
	BTH(dg[hl:]).Encode(&f)
	clear(dg[n-ICRCLen-pad : n-ICRCLen])
	return Draft{o: o, dg: dg, hl: hl, hdr: hdr, pay: payLen, info: info}
}

// Info returns the opcode's description (zero for a reserved opcode).
func (d *Draft) Info() *Info { return d.info }

// BTH returns the packet's BTH.
func (d *Draft) BTH() BTH { return BTH(d.dg[d.hl:]) }

// Ext returns extended header e, which the opcode must carry.
func (d *Draft) Ext(e Ext) []byte {
	o := d.hl + d.info.Offset(e)
	return d.dg[o : o+e.Size()]
}

// Payload returns the payload.
func (d *Draft) Payload() []byte { return d.dg[d.hl+d.hdr : d.hl+d.hdr+d.pay] }

// RoCE returns the transport bytes: BTH through ICRC.
func (d *Draft) RoCE() []byte { return d.dg[d.hl:] }

// Cut keeps the first n transport bytes before the ICRC, for a test that
// sends a packet shorter than its opcode says; Seal computes the ICRC
// over what is left. n outside (0, current length) changes nothing.
func (d *Draft) Cut(n int) {
	if n > 0 && n < len(d.dg)-d.hl-ICRCLen {
		d.dg = d.dg[:d.hl+n+ICRCLen]
		d.pay = max(0, min(d.pay, n-d.hdr))
	}
}

// Seal writes the outer IP and UDP headers and the ICRC, and returns the
// datagram: IP header through ICRC.
func (d *Draft) Seal() []byte {
	roce := d.dg[d.hl:]
	d.o.Put(d.dg, len(roce))
	Seal(d.dg[:d.hl-inet.UDPHeaderLen], d.dg[d.hl-inet.UDPHeaderLen:d.hl], roce)
	return d.dg
}
