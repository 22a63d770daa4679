package cm

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/goroce/goroce/mad"
)

// Listening is one of a manager's listeners: what rdma(8)'s "resource
// show cm_id" lists of a kernel's cm_id in state LISTEN.
type Listening struct {
	// PortSpace is the rdma_cm port space it listens in (mad.PortSpaceTCP
	// for connections, mad.PortSpaceUDP for UD services).
	PortSpace mad.PortSpace
	// Addr is the address it was bound to (unspecified: any of the
	// device's) and its port.
	Addr netip.AddrPort
}

// Listening lists the manager's open listeners, of connections (Listen)
// and of UD services (ListenUD), by port space and port; none once the
// manager is closed.
func (m *Manager) Listening() []Listening {
	m.mu.Lock()
	var out []Listening
	if !m.closed {
		for k, l := range m.listeners {
			out = append(out, Listening{k.ps, l.addr})
		}
		for k, l := range m.udListeners {
			out = append(out, Listening{k.ps, l.addr})
		}
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b Listening) int {
		return cmp.Or(cmp.Compare(a.PortSpace, b.PortSpace), cmp.Compare(a.Addr.Port(), b.Addr.Port()))
	})
	return out
}
