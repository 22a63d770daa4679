package bth

// A congestion notification packet (RoCEv2, IBA Annex A17.9): the BTH
// with opcode CNP (0x81) and BECN set, naming the QP whose packets
// arrived marked Congestion Experienced, then 16 reserved bytes and the
// ICRC. Its PSN is 0, and so its AckReq, SE and pad count; the P_Key is
// the QP's. mlx5 sends it from the notification point to the sender
// (the reaction point), which cuts that QP's rate.

// NewCNP lays out a CNP at the start of b (DraftLen(o, CNP, 0) bytes) to
// QP destQP over path o: the caller seals it (Draft.Seal). The reserved
// bytes are zero.
func NewCNP(b []byte, o *Outer, pkey uint16, destQP uint32) Draft {
	d := NewDraft(b, o, BTHFields{OpCode: CNP, PKey: pkey, BECN: true, DestQP: destQP}, 0)
	clear(d.Ext(ExtCNPPad))
	return d
}

// IsCNP reports whether a parsed packet is a CNP.
func (p Packet) IsCNP() bool { return p.OpCode() == CNP }
