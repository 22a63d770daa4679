package endpoint

import (
	"errors"
	"net/netip"
	"testing"
)

func TestLoopbackByAddress(t *testing.T) {
	for _, dev := range []string{"127.0.0.1", "127.0.0.2"} {
		e, err := Open(Config{Dev: dev, GID: -1})
		if err != nil {
			t.Fatal(err)
		}
		want := netip.MustParseAddr(dev)
		// As on rxe over one IPv4 address: index 0 the link-local GID from
		// the MAC, index 1 the address.
		if e.Addr != want || e.GIDIndex != 1 || len(e.GIDs) != 2 || e.Netdev != "lo" {
			t.Errorf("%s: addr %v index %d table %v netdev %s", dev, e.Addr, e.GIDIndex, e.GIDs, e.Netdev)
		}
		e.Close()
	}
}

func TestServerDefault(t *testing.T) {
	e, err := Open(Config{GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Addr != netip.MustParseAddr("127.0.0.1") {
		t.Fatalf("server default address %v", e.Addr)
	}
}

func TestPeerRoute(t *testing.T) {
	e, err := Open(Config{Peer: "127.0.0.9", GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Netdev != "lo" || !e.Addr.Is4() {
		t.Fatalf("route to 127.0.0.9: %s %v", e.Netdev, e.Addr)
	}
}

func TestBadGIDIndex(t *testing.T) {
	if _, err := Open(Config{Dev: "127.0.0.1", GID: 7}); !errors.Is(err, ErrGIDIndex) {
		t.Fatalf("GID index 7: %v, want ErrGIDIndex", err)
	}
	if _, err := Open(Config{Dev: "no-such-if0", GID: -1}); err == nil {
		t.Fatal("unknown interface accepted")
	}
}
