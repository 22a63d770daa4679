package transport_test

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

func TestEndpointText(t *testing.T) {
	e := transport.Endpoint{QPN: 0x11, PSN: 0x3a5c21, GID: bth.GIDFromAddr(netip.MustParseAddr("192.0.2.1")), MTU: transport.MTU1024}
	const want = "lid=0 qpn=0x000011 psn=0x3a5c21 gid=::ffff:192.0.2.1 mtu=1024"
	if s := e.String(); s != want {
		t.Fatalf("String = %q, want %q", s, want)
	}
	if x, err := transport.ParseEndpoint(want); err != nil || x != e {
		t.Fatalf("ParseEndpoint = %+v, %v", x, err)
	}
	// Decimal numbers and a bare IPv4 address read as the same endpoint.
	if x, err := transport.ParseEndpoint("lid=0 qpn=17 psn=3824673 gid=192.0.2.1 mtu=1024"); err != nil || x != e {
		t.Fatalf("decimal form = %+v, %v", x, err)
	}
	var u transport.Endpoint
	if err := u.UnmarshalText([]byte(want)); err != nil || u != e {
		t.Fatalf("UnmarshalText = %+v, %v", u, err)
	}
	for in, why := range map[string]string{
		"":                                      "0 fields",
		"lid=0 qpn=0x11 psn=0 gid=::1":          "4 fields",
		"qpn=0x11 lid=0 psn=0 gid=::1 mtu=1024": "field 1 is",
		"lid=0 qpn=0x1000000 psn=0 gid=::1 mtu=1024":  "bad qpn",
		"lid=0 qpn=1 psn=0x1000000 gid=::1 mtu=1024":  "bad psn",
		"lid=65536 qpn=1 psn=0 gid=::1 mtu=1024":      "bad lid",
		"lid=0 qpn=1 psn=0 gid=fe80::1%eth0 mtu=1024": "bad gid",
		"lid=0 qpn=1 psn=0 gid=nonsense mtu=1024":     "bad gid",
		"lid=0 qpn=1 psn=0 gid=::1 mtu=1500":          "bad mtu",
		"lid=0 qpn=1 psn=0 gid=::1 mtu=1024 extra=1":  "6 fields",
		"lid=0 qpn=1 psn=0 gid=::1 mtu":               "field 5",
	} {
		_, err := transport.ParseEndpoint(in)
		if err == nil || !strings.Contains(err.Error(), why) || strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseEndpoint(%q) = %v, want an error saying %q", in, err, why)
		}
	}
}

func TestEndpointBinary(t *testing.T) {
	e := transport.Endpoint{QPN: 0xabcdef, PSN: 0xffffff, LID: 7, GID: bth.GIDFromAddr(netip.MustParseAddr("2001:db8::5")), MTU: transport.MTU4096}
	b, err := e.MarshalBinary()
	if err != nil || len(b) != transport.EndpointLen {
		t.Fatalf("MarshalBinary = %x, %v", b, err)
	}
	var x transport.Endpoint
	if err := x.UnmarshalBinary(b); err != nil || x != e {
		t.Fatalf("UnmarshalBinary = %+v, %v", x, err)
	}
	for _, bad := range []func([]byte) []byte{
		func(b []byte) []byte { return b[:transport.EndpointLen-1] },
		func(b []byte) []byte { return append(b, 0) },
		func(b []byte) []byte { b[0] = 2; return b },
		func(b []byte) []byte { b[1] = 6; return b },
		func(b []byte) []byte { b[4] = 1; return b }, // QPN over 24 bits
		func(b []byte) []byte { b[8] = 1; return b }, // PSN over 24 bits
	} {
		in := bad(bytes.Clone(b))
		if err := x.UnmarshalBinary(in); err == nil {
			t.Errorf("UnmarshalBinary(%x) accepted", in)
		}
	}
}

// FuzzParseEndpoint: any text either fails with a one-line error or gives
// an endpoint whose text and binary forms both read back as itself.
func FuzzParseEndpoint(f *testing.F) {
	f.Add("lid=0 qpn=0x000011 psn=0x3a5c21 gid=::ffff:192.0.2.1 mtu=1024")
	f.Add("lid=0 qpn=17 psn=0 gid=fe80::1 mtu=4096")
	f.Add("lid=0x10 qpn=0o7 psn=0b1 gid=2001:db8::1 mtu=256")
	f.Add("lid=0 qpn=1 psn=0 gid=::1 mtu=1500")
	f.Fuzz(func(t *testing.T, s string) {
		e, err := transport.ParseEndpoint(s)
		if err != nil {
			// The input is quoted into the message, so even a newline
			// in it leaves the message one line.
			if msg := err.Error(); !strings.HasPrefix(msg, "device: endpoint ") || strings.Contains(msg, "\n") {
				t.Fatalf("error %q", msg)
			}
			return
		}
		if !e.MTU.Valid() || e.QPN > bth.PSNMask || e.PSN > bth.PSNMask {
			t.Fatalf("%q parsed to an invalid %+v", s, e)
		}
		x, err := transport.ParseEndpoint(e.String())
		if err != nil || x != e {
			t.Fatalf("%q: %+v -> %q -> %+v, %v", s, e, e.String(), x, err)
		}
		b, _ := e.MarshalBinary()
		if err := x.UnmarshalBinary(b); err != nil || x != e {
			t.Fatalf("%+v: binary %x -> %+v, %v", e, b, x, err)
		}
	})
}

// FuzzEndpointBinary: any bytes either fail or are exactly the binary form
// of the endpoint they parse to.
func FuzzEndpointBinary(f *testing.F) {
	b, _ := transport.Endpoint{QPN: 0x11, PSN: 1, MTU: transport.MTU1024}.MarshalBinary()
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var e transport.Endpoint
		if err := e.UnmarshalBinary(b); err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %q", err)
			}
			return
		}
		if out, _ := e.MarshalBinary(); !bytes.Equal(out, b) {
			t.Fatalf("%x -> %+v -> %x", b, e, out)
		}
		if x, err := transport.ParseEndpoint(e.String()); err != nil || x != e {
			t.Fatalf("%+v: text %q -> %+v, %v", e, e.String(), x, err)
		}
	})
}

func TestDefaultGIDIndex(t *testing.T) {
	g := func(s string) bth.GID { return bth.GIDFromAddr(netip.MustParseAddr(s)) }
	for _, c := range []struct {
		table []bth.GID
		want  uint8
	}{
		{[]bth.GID{{}, g("fe80::1"), g("2001:db8::1"), g("192.0.2.1")}, 3},
		{[]bth.GID{g("fe80::1"), g("2001:db8::1")}, 1},
		{[]bth.GID{{}, g("fe80::1")}, 1},
		{[]bth.GID{{}, g("127.0.0.1")}, 1}, // loopback over UDP
	} {
		l, err := mem.NewNet(1).Attach(netip.MustParseAddr("192.0.2.1"), mem.Options{})
		if err != nil {
			t.Fatal(err)
		}
		d, err := transport.Open(l, transport.Options{GIDs: c.table})
		if err != nil {
			t.Fatal(err)
		}
		if got := d.DefaultGIDIndex(); got != c.want {
			t.Errorf("%v: DefaultGIDIndex %d, want %d", c.table, got, c.want)
		}
		d.Close()
	}
}

// connectSides opens two devices on one in-memory net, with one QP each
// of type typ, and returns them with their local endpoints. ipMTU is the
// links' IP MTU (0: the in-memory default, which carries MTU 4096).
func connectSides(t *testing.T, typ transport.QPType, ipMTU ...int) (da, db *transport.Device, a, b *transport.QP, ea, eb transport.Endpoint) {
	t.Helper()
	n := mem.NewNet(1)
	var mo mem.Options
	if len(ipMTU) > 0 {
		mo.MTU = ipMTU[0]
	}
	open := func(addr string) (*transport.Device, *transport.QP, transport.Endpoint) {
		l, err := n.Attach(netip.MustParseAddr(addr), mo)
		if err != nil {
			t.Fatal(err)
		}
		d, err := transport.Open(l, transport.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		c := d.CreateCQ(4)
		q, err := d.CreateQP(d.AllocPD(), transport.QPInitAttr{Type: typ, SendCQ: c, RecvCQ: c,
			Cap: transport.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		e, err := d.LocalEndpoint(q)
		if err != nil {
			t.Fatal(err)
		}
		return d, q, e
	}
	da, a, ea = open("192.0.2.1")
	db, b, eb = open("192.0.2.2")
	return
}

// TestConnectRC: Connect sets what it says: the defaults, the smaller MTU,
// the peer's QPN, PSN and GID, the source GID at the default index.
func TestConnectRC(t *testing.T) {
	da, _, a, _, ea, eb := connectSides(t, transport.RC)
	if ea.QPN != a.QPN() || ea.LID != 0 || ea.MTU != da.ActiveMTU() || ea.PSN > bth.PSNMask ||
		ea.GID != bth.GIDFromAddr(netip.MustParseAddr("192.0.2.1")) {
		t.Fatalf("local endpoint %v", ea)
	}
	eb.MTU = transport.MTU512
	access := transport.LocalWrite | transport.RemoteRead
	if err := da.Connect(a, ea, eb, transport.ConnectOptions{Access: access}); err != nil {
		t.Fatal(err)
	}
	at, _ := a.Query()
	want := transport.QPAttr{State: transport.RTS, CurState: transport.RTS, PathMTU: transport.MTU512, RQPSN: eb.PSN, SQPSN: ea.PSN,
		DestQPN: eb.QPN, AccessFlags: access, Cap: at.Cap, QKey: transport.DefaultQKey,
		AH:          transport.AHAttr{DGID: eb.GID, SGIDIndex: da.DefaultGIDIndex(), PortNum: 1},
		MaxRdAtomic: transport.MaxRdAtomic, MaxDestRdAtomic: transport.MaxRdAtomic, MinRNRTimer: 12, PortNum: 1,
		Timeout: 14, RetryCnt: 7, RNRRetry: 7}
	at.QKey = transport.DefaultQKey // an RC QP has no Q_Key; the options' default stays unused
	if at != want {
		t.Fatalf("attributes\n%+v, want\n%+v", at, want)
	}
	// A second Connect finds the QP in RTS: Modify's own error, with the QP named.
	if err := da.Connect(a, ea, eb, transport.ConnectOptions{}); err == nil || !strings.HasPrefix(err.Error(), "device: connect RC QP 0x") {
		t.Fatalf("second Connect: %v", err)
	}
}

func TestConnectErrors(t *testing.T) {
	da, db, a, b, ea, eb := connectSides(t, transport.RC)
	for name, c := range map[string]struct {
		d          *transport.Device
		q          *transport.QP
		local, rem transport.Endpoint
		o          transport.ConnectOptions
		want       string
	}{
		"other device's QP":   {da, b, eb, ea, transport.ConnectOptions{}, "is not a QP of this device"},
		"local of another QP": {da, a, transport.Endpoint{QPN: ea.QPN + 1, GID: ea.GID, MTU: ea.MTU}, eb, transport.ConnectOptions{}, "the local endpoint is QP"},
		"no remote GID":       {da, a, ea, transport.Endpoint{QPN: 1, MTU: transport.MTU1024}, transport.ConnectOptions{}, "the remote endpoint has no GID"},
		"foreign local GID":   {da, a, transport.Endpoint{QPN: ea.QPN, GID: eb.GID, MTU: ea.MTU}, eb, transport.ConnectOptions{}, "is not in the device's GID table"},
		"no MTU":              {da, a, ea, transport.Endpoint{QPN: eb.QPN, GID: eb.GID}, transport.ConnectOptions{}, "no valid path MTU"},
		"QPN over 24 bits":    {da, a, ea, transport.Endpoint{QPN: 1 << 24, GID: eb.GID, MTU: transport.MTU1024}, transport.ConnectOptions{}, "exceeds 24 bits"},
	} {
		err := c.d.Connect(c.q, c.local, c.rem, c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
		if c.q.State() != transport.Reset {
			t.Errorf("%s: left the QP in %v", name, c.q.State())
		}
	}
	db.Close()
	if _, err := db.LocalEndpoint(b); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("LocalEndpoint after Close: %v", err)
	}
}

func TestConnectUD(t *testing.T) {
	da, _, a, _, ea, eb := connectSides(t, transport.UD)
	if err := da.Connect(a, ea, transport.Endpoint{}, transport.ConnectOptions{QKey: 0x1234}); err != nil {
		t.Fatal(err)
	}
	at, _ := a.Query()
	if at.State != transport.RTS || at.QKey != 0x1234 {
		t.Fatalf("UD QP %v, Q_Key 0x%x", at.State, at.QKey)
	}
	av, err := da.AHAttr(ea, eb)
	if err != nil || av.DGID != eb.GID || av.SGIDIndex != da.DefaultGIDIndex() {
		t.Fatalf("AHAttr %+v, %v", av, err)
	}
}

// TestConnectFailsBack: a step that fails after INIT (here RTR, with a
// path MTU above the port's) leaves the QP in RESET with the step named, and a second Connect with the cause fixed succeeds; a Connect on
// a QP already in RTS fails without touching it.
func TestConnectFailsBack(t *testing.T) {
	da, _, a, _, ea, eb := connectSides(t, transport.RC, 1500) // active MTU 1024
	ea.MTU, eb.MTU = transport.MTU4096, transport.MTU4096
	err := da.Connect(a, ea, eb, transport.ConnectOptions{})
	if err == nil || !strings.Contains(err.Error(), "to RTR: ") || a.State() != transport.Reset {
		t.Fatalf("Connect with MTU 4096 over %v: %v, QP in %v", da.ActiveMTU(), err, a.State())
	}
	ea.MTU = da.ActiveMTU()
	if err := da.Connect(a, ea, eb, transport.ConnectOptions{}); err != nil || a.State() != transport.RTS {
		t.Fatalf("second Connect: %v, QP in %v", err, a.State())
	}
	if err := da.Connect(a, ea, eb, transport.ConnectOptions{}); err == nil || a.State() != transport.RTS {
		t.Fatalf("Connect in RTS: %v, QP in %v", err, a.State())
	}
}
