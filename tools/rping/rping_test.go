package rping

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testharness"
	"github.com/goroce/goroce/nic/mem"
)

func env(t *testing.T, net *mem.Net, addr string, out, errw *bytes.Buffer) Env {
	dev, m := testharness.CMNode(t, net, addr)
	return Env{Dev: dev, CM: m, Local: netip.MustParseAddr(addr), Stdout: out, Stderr: errw}
}

// lines returns the lines of a capture's tool output, sorted: the real
// tools' stdout and stderr were captured into one file, so their order
// across the two is not kept.
func lines(s string) []string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	sort.Strings(l)
	return l
}

// TestLateServer: rping -c started before rping -s waits for it
// (GOROCE_SERVER_WAIT) where rping fails at the REJ 8.
func TestLateServer(t *testing.T) {
	net := mem.NewNet(1)
	var sout, serr, cout, cerr bytes.Buffer
	senv := env(t, net, "198.51.100.2", &sout, &serr)
	cenv := env(t, net, "198.51.100.1", &cout, &cerr)
	scfg, err := ParseFlags([]string{"-s", "-a", "198.51.100.2", "-C", "3"})
	if err != nil {
		t.Fatal(err)
	}
	ccfg, err := ParseFlags([]string{"-c", "-a", "198.51.100.2", "-V", "-C", "3"})
	if err != nil {
		t.Fatal(err)
	}
	scode, ccode := testharness.LateServer(t, net, netip.MustParseAddr("198.51.100.2"), netip.MustParseAddr("198.51.100.1"),
		func(ctx context.Context) int { return Run(ctx, scfg, senv) },
		func(ctx context.Context) int { return Run(ctx, ccfg, cenv) })
	if scode != 0 || ccode != 0 {
		t.Fatalf("exit %d %d\nserver: %s%s\nclient: %s%s", scode, ccode, sout.String(), serr.String(), cout.String(), cerr.String())
	}
}

// TestRpingPair: roced rping -s and roced rping -c -v -V -C 5 over the
// in-memory link print what rxe's rping printed in the rping_c5 capture
// (captures/rping_c5.*.txt), line for line, and both exit 0.
func TestRpingPair(t *testing.T) {
	net := mem.NewNet(1)
	var sout, serr, cout, cerr bytes.Buffer
	senv := env(t, net, "198.51.100.2", &sout, &serr)
	cenv := env(t, net, "198.51.100.1", &cout, &cerr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	scfg, err := ParseFlags([]string{"-s", "-a", "198.51.100.2", "-v", "-C", "5"})
	if err != nil {
		t.Fatal(err)
	}
	ccfg, err := ParseFlags([]string{"-c", "-a", "198.51.100.2", "-v", "-V", "-C5"})
	if err != nil {
		t.Fatal(err)
	}
	// The client retries a REQ the server is not listening for yet only
	// after seconds: start it once the server listens. (Probing the port
	// with a Listen of our own raced rping's: it could take the port
	// first and make rping's bind fail.)
	listening := make(chan struct{})
	senv.Listening = func(netip.AddrPort) { close(listening) }
	var wg sync.WaitGroup
	var scode int
	wg.Add(1)
	go func() { defer wg.Done(); scode = Run(ctx, scfg, senv) }()
	served := make(chan struct{})
	go func() { wg.Wait(); close(served) }()
	select {
	case <-listening:
	case <-served:
		t.Fatalf("the server exited %d before it listened: %s%s", scode, sout.String(), serr.String())
	}
	ccode := Run(ctx, ccfg, cenv)
	wg.Wait()
	if scode != 0 || ccode != 0 {
		t.Fatalf("exit %d %d\nserver: %s%s\nclient: %s%s", scode, ccode, sout.String(), serr.String(), cout.String(), cerr.String())
	}
	for _, c := range []struct {
		file string
		got  string
	}{{"testdata/rping_c5.client.txt", cout.String() + cerr.String()}, {"testdata/rping_c5.server.txt", sout.String() + serr.String()}} {
		want, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		if g, w := lines(c.got), lines(string(want)); strings.Join(g, "\n") != strings.Join(w, "\n") {
			t.Errorf("%s:\n got %q\nwant %q", c.file, g, w)
		}
	}
}
