package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestPollCheck runs testdata/poll_check.c preloaded in poll mode, where
// an empty ibv_poll_cq is answered in C (verbs.c's empty(): the CQ's
// mirror, the device's busy word and a poll(2) of its sockets) and only
// the rest calls into Go: one thread posting 4000 SENDs while two threads
// poll each side's CQ sees every send and every receive complete exactly
// once, data checked; a CQ overrun still fails the poll and raises
// IBV_EVENT_CQ_ERR; a CQ armed and polled empty still gets its event and
// then its completion.
func TestPollCheck(t *testing.T) {
	bin := buildC(t, "poll_check", "-pthread")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := preloaded(ctx, addrA+","+addrB, bin, "concurrent")
	cmd.Env = append(cmd.Env, "GOROCE_POLL_MODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("poll_check: ok")) {
		t.Fatalf("poll_check concurrent: %v\n%s", err, out)
	}
}

// TestPollModeEveryGID: poll mode serves every GID of a device with
// several. Two devices on the ends of a veth pair, each end with two IPv4
// addresses (GIDs 1 and 2 besides the link-local 0), so that each device
// is a udp link per address joined (nic.Multi) and the C side's empty poll
// watches every one's socket; an RC pair over GID 1 and then one over GID
// 2 exchange SENDs in poll mode, data checked. Needs root (the veth).
func TestPollModeEveryGID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a veth pair")
	}
	bin := buildC(t, "poll_check", "-pthread")
	// In this namespace, both ends: traffic between their addresses is
	// local. The names carry "poll", this test's.
	a, b := "pollgid0", "pollgid1"
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	exec.Command("ip", "link", "del", a).Run() // a run killed midway left it
	ip("link", "add", a, "type", "veth", "peer", "name", b)
	t.Cleanup(func() { exec.Command("ip", "link", "del", a).Run() })
	for _, e := range []struct{ dev, addr string }{
		{a, "198.18.44.1/32"}, {a, "198.18.45.1/32"}, {b, "198.18.44.2/32"}, {b, "198.18.45.2/32"},
	} {
		ip("addr", "add", e.addr, "dev", e.dev)
	}
	// No link-local address: one still tentative (DAD) would not bind.
	for _, dev := range []string{a, b} {
		ip("link", "set", dev, "addrgenmode", "none")
		ip("link", "set", dev, "up")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := preloaded(ctx, a+","+b, bin, "gids", "2")
	cmd.Env = append(cmd.Env, "GOROCE_POLL_MODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("poll_check: ok")) {
		t.Fatalf("poll_check gids 2: %v\n%s", err, out)
	}
	for _, want := range []string{"GID 1: 400 SENDs completed", "GID 2: 400 SENDs completed"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("no %q:\n%s", want, out)
		}
	}
}
