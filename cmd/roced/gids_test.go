package main

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/goroce/goroce/internal/netns"
)

func TestGIDsCommand(t *testing.T) {
	p := netns.New(t, netns.Config{})
	want := fmt.Sprintf("GID[  0]: %s, RoCE v2  veth0\nGID[  1]: ::ffff:%s, RoCE v2  veth0\nGID[  2]: %s, RoCE v2  veth0\n", p.A.LL, p.A.IPv4, p.A.IPv6)
	for _, args := range [][]string{{"gids", "-d", "veth0"}, {"gids", "-d", p.A.IPv4.String()}, {"gids"}} {
		var out, errb bytes.Buffer
		var rc int
		if err := p.A.Do(func() error { rc = run(args, &out, &errb); return nil }); err != nil {
			t.Fatal(err)
		}
		if rc != 0 || out.String() != want {
			t.Fatalf("%v: rc %d\n%s\nwant\n%s\nstderr %s", args, rc, out.String(), want, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if rc := run([]string{"gids", "-d", "nosuchdev"}, &out, &errb); rc != 1 || errb.Len() == 0 {
		t.Fatalf("unknown device: rc %d, stderr %q", rc, errb.String())
	}
}
