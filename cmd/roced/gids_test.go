package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/endpoint"
	"github.com/goroce/goroce/internal/netns"
)

func TestGIDsCommand(t *testing.T) {
	p := netns.New(t, netns.Config{})
	veth := fmt.Sprintf("GID[  0]: %s, RoCE v2  veth0\nGID[  1]: ::ffff:%s, RoCE v2  veth0\nGID[  2]: %s, RoCE v2  veth0\n", p.A.LL, p.A.IPv4, p.A.IPv6)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"gids", "-d", "veth0"}, veth},
		{[]string{"gids"}, veth}, // lo is no Ethernet interface
		// -d ADDR: the device over that one address, as the tools open it.
		{[]string{"gids", "-d", p.A.IPv4.String()}, fmt.Sprintf("GID[  0]: %s, RoCE v2  veth0\nGID[  1]: ::ffff:%s, RoCE v2  veth0\n", p.A.LL, p.A.IPv4)},
		// Loopback has no MAC: index 0 is empty (not listed, as
		// ibv_devinfo skips a null GID) and no GID comes from 00:00:00:00:00:00.
		{[]string{"gids", "-d", "lo"}, "GID[  1]: ::ffff:127.0.0.1, RoCE v2  lo\nGID[  2]: ::1, RoCE v2  lo\n"},
		{[]string{"gids", "-d", "127.0.0.2"}, "GID[  1]: ::ffff:127.0.0.2, RoCE v2  lo\n"},
	} {
		var out, errb bytes.Buffer
		var rc int
		if err := p.A.Do(func() error { rc = run(c.args, &out, &errb); return nil }); err != nil {
			t.Fatal(err)
		}
		if rc != 0 || out.String() != c.want {
			t.Fatalf("%v: rc %d\n%s\nwant\n%s\nstderr %s", c.args, rc, out.String(), c.want, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if rc := run([]string{"gids", "-d", "nosuchdev"}, &out, &errb); rc != 1 || errb.Len() == 0 {
		t.Fatalf("unknown device: rc %d, stderr %q", rc, errb.String())
	}
}

// TestGIDsAgreeWithTools: for every kind of -d, the table roced gids
// prints is the one the tools open their device with.
func TestGIDsAgreeWithTools(t *testing.T) {
	p := netns.New(t, netns.Config{})
	for _, dev := range []string{"veth0", "lo", "127.0.0.1", "127.0.0.2", p.A.IPv4.String(), p.A.IPv6.String()} {
		err := p.A.Do(func() error {
			var out, errb bytes.Buffer
			if rc := run([]string{"gids", "-d", dev}, &out, &errb); rc != 0 {
				return fmt.Errorf("gids -d %s: rc %d: %s", dev, rc, errb.String())
			}
			e, err := endpoint.Open(endpoint.Config{Dev: dev, GID: -1})
			if err != nil {
				return err
			}
			defer e.Close()
			var want strings.Builder
			for i, g := range e.GIDs {
				if !g.IsZero() {
					fmt.Fprintf(&want, "GID[%3d]: %v, RoCE v2  %s\n", i, g, e.Netdev)
				}
			}
			if out.String() != want.String() {
				return fmt.Errorf("-d %s: gids prints\n%s\nthe tools use\n%s", dev, out.String(), want.String())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
