package bth

import (
	"fmt"
	"strings"
)

// Summary is the one-line description of a parsed packet: opcode, BTH key
// fields, the extended headers' key fields and the payload length. It is
// goroce's one packet formatter: roced decode's lines (bth/dissect), the
// conformance suite's reports, the engine's death reports and its tests'
// messages, so a packet reads the same everywhere; a ladder diagram
// prints KeyFields beside the arrow that shows the rest.
func (p Packet) Summary() string {
	h := p.BTH()
	return fmt.Sprintf("%s qpn=0x%06x psn=0x%06x %s", p.Info().Name, h.DestQP(), uint32(h.PSN()), p.KeyFields())
}

// KeyFields is Summary without the opcode, QP and PSN: the BTH's flags,
// the extended headers' key fields and the payload length.
func (p Packet) KeyFields() string {
	var s strings.Builder
	h := p.BTH()
	info := p.Info()
	fmt.Fprintf(&s, "ackreq=%d", flag01(h.AckReq()))
	for _, f := range []struct {
		on   bool
		name string
	}{{h.SE(), "se"}, {h.FECN(), "fecn"}, {h.BECN(), "becn"}, {h.MigReq(), "mig"}} {
		if f.on {
			s.WriteString(" " + f.name)
		}
	}
	if h.PKey() != DefaultPKey {
		fmt.Fprintf(&s, " pkey=0x%04x", h.PKey())
	}
	if p.PadCount() != 0 {
		fmt.Fprintf(&s, " pad=%d", p.PadCount())
	}
	if x := p.XRCETH(); x != nil {
		fmt.Fprintf(&s, " xrceth srq=0x%06x", x.XRCSRQ())
	}
	if r := p.RDETH(); r != nil {
		fmt.Fprintf(&s, " rdeth eecnxt=0x%06x", r.EECnxt())
	}
	if dt := p.DETH(); dt != nil {
		fmt.Fprintf(&s, " deth qkey=0x%08x srcqp=0x%06x", dt.QKey(), dt.SrcQP())
	}
	if f := p.FETH(); f != nil {
		fmt.Fprintf(&s, " feth sel=%d plt=%d", f.SelectivityLevel(), f.PlacementType())
	}
	if r := p.RETH(); r != nil {
		fmt.Fprintf(&s, " reth va=0x%x rkey=0x%x dmalen=%d", r.VA(), r.RKey(), r.DMALen())
	}
	if a := p.AtomicETH(); a != nil {
		fmt.Fprintf(&s, " atomic va=0x%x rkey=0x%x", a.VA(), a.RKey())
		if info.Kind == KindCompareSwap {
			fmt.Fprintf(&s, " swap=0x%x compare=0x%x", a.SwapAdd(), a.Compare())
		} else {
			fmt.Fprintf(&s, " add=0x%x", a.SwapAdd())
		}
	}
	if i := p.ImmDt(); i != nil {
		fmt.Fprintf(&s, " imm=0x%08x", i.Imm())
	}
	if i := p.IETH(); i != nil {
		fmt.Fprintf(&s, " ieth rkey=0x%08x", i.RKey())
	}
	if a := p.AETH(); a != nil {
		fmt.Fprintf(&s, " aeth %v msn=%d", a.Syndrome(), a.MSN())
	}
	if a := p.AtomicAckETH(); a != nil {
		fmt.Fprintf(&s, " atomicack orig=0x%x", a.OrigData())
	}
	fmt.Fprintf(&s, " payload=%d", p.PayloadLen())
	return s.String()
}

func flag01(v bool) int {
	if v {
		return 1
	}
	return 0
}
