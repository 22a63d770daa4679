package ladder

import (
	"fmt"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/mad"
)

// gsiQKey is the Q_Key of QP1, the General Services Interface, which
// carries the connection manager's MADs.
const gsiQKey = 0x80010000

// cmNote explains a UD packet to or from QP1 that carries a connection
// manager MAD (REQ, REP, RTU, REJ, ...): which message, the communication
// IDs that tie a connection's messages together, and what each says about
// the connection. It returns "" for any other packet.
func cmNote(p bth.Packet) string {
	d := p.DETH()
	if d == nil || (p.BTH().DestQP() != 1 && d.SrcQP() != 1) || d.QKey() != gsiQKey {
		return ""
	}
	m, err := mad.ParseCM(p.Payload())
	if err != nil {
		return fmt.Sprintf("a MAD to or from QP1 that is not a CM message the receiver takes: %v", err)
	}
	tid := fmt.Sprintf("tid 0x%x", m.TID())
	switch a := m.AttrID(); a {
	case mad.AttrREQ:
		r := m.REQ()
		svc := fmt.Sprintf("service 0x%x", r.ServiceID())
		if ps, port, ok := mad.SplitServiceID(r.ServiceID()); ok {
			svc = fmt.Sprintf("service 0x%x (rdma_cm port %d, port space 0x%04x)", r.ServiceID(), port, uint16(ps))
		}
		s := fmt.Sprintf("CM REQ, %s: connect, comm id 0x%08x, %s; requester QP 0x%06x, its first PSN 0x%06x",
			tid, r.LocalCommID(), svc, r.LocalQPN(), r.StartingPSN())
		if h, err := mad.ParseCMAHdr(r.PrivateData()); err == nil {
			s += fmt.Sprintf("; rdma_cm header %v > %v", h.SrcAddr(), h.DstAddr())
		}
		return s
	case mad.AttrREP:
		r := m.REP()
		return fmt.Sprintf("CM REP, %s: accept, comm id 0x%08x for 0x%08x; responder QP 0x%06x, its first PSN 0x%06x",
			tid, r.LocalCommID(), r.RemoteCommID(), r.LocalQPN(), r.StartingPSN())
	case mad.AttrRTU:
		r := m.RTU()
		return fmt.Sprintf("CM RTU, %s: ready to use, comm ids 0x%08x/0x%08x: the connection is established",
			tid, r.LocalCommID(), r.RemoteCommID())
	case mad.AttrREJ:
		r := m.REJ()
		return fmt.Sprintf("CM REJ, %s: reject, comm id 0x%08x for 0x%08x, reason %v",
			tid, r.LocalCommID(), r.RemoteCommID(), r.Reason())
	case mad.AttrMRA:
		r := m.MRA()
		return fmt.Sprintf("CM MRA, %s: message received, answer later (service timeout %d), comm id 0x%08x for 0x%08x",
			tid, r.ServiceTimeout(), r.LocalCommID(), r.RemoteCommID())
	case mad.AttrDREQ:
		r := m.DREQ()
		return fmt.Sprintf("CM DREQ, %s: disconnect, comm id 0x%08x for 0x%08x", tid, r.LocalCommID(), r.RemoteCommID())
	case mad.AttrDREP:
		r := m.DREP()
		return fmt.Sprintf("CM DREP, %s: disconnected, comm id 0x%08x for 0x%08x", tid, r.LocalCommID(), r.RemoteCommID())
	default:
		return fmt.Sprintf("CM %v, %s", a, tid)
	}
}
