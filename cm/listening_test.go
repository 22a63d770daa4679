package cm

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/goroce/goroce/mad"
	"github.com/goroce/goroce/nic/mem"
)

// TestListening: a manager lists its open listeners of both kinds by
// port space and port, each with the address it was bound to; a closed
// listener leaves the list, and a closed manager lists none.
func TestListening(t *testing.T) {
	n := memNode(t, mem.NewNet(1), "192.0.2.1", nil)
	m := newManager(t, n, nil)
	if got := m.Listening(); len(got) != 0 {
		t.Fatalf("a new manager lists %v", got)
	}
	rc, err := m.Listen(netip.MustParseAddrPort("192.0.2.1:7300"), ListenConfig{QP: n.qpConfig()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Listen(netip.MustParseAddrPort("0.0.0.0:7200"), ListenConfig{QP: n.qpConfig()}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ListenUD(netip.MustParseAddrPort("192.0.2.1:7100"), 0); err != nil {
		t.Fatal(err)
	}
	want := []Listening{
		{mad.PortSpaceTCP, netip.MustParseAddrPort("0.0.0.0:7200")},
		{mad.PortSpaceTCP, netip.MustParseAddrPort("192.0.2.1:7300")},
		{mad.PortSpaceUDP, netip.MustParseAddrPort("192.0.2.1:7100")},
	}
	if got := m.Listening(); !reflect.DeepEqual(got, want) {
		t.Fatalf("listening %v, want %v", got, want)
	}
	rc.Close()
	if got := m.Listening(); !reflect.DeepEqual(got, []Listening{want[0], want[2]}) {
		t.Fatalf("after a Close: %v, want %v", got, []Listening{want[0], want[2]})
	}
	m.Close()
	if got := m.Listening(); len(got) != 0 {
		t.Fatalf("a closed manager lists %v", got)
	}
}
