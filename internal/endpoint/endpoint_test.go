package endpoint

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/udp"
	"github.com/goroce/goroce/transport"
)

func TestLoopbackByAddress(t *testing.T) {
	for _, dev := range []string{"127.0.0.1", "127.0.0.2"} {
		e, err := Open(Config{Dev: dev, GID: -1})
		if err != nil {
			t.Fatal(err)
		}
		want := netip.MustParseAddr(dev)
		// As on rxe over one IPv4 address: index 0 the default GID's slot
		// (empty: lo has no MAC), index 1 the address.
		if e.Addr != want || e.GIDIndex != 1 || len(e.GIDs) != 2 || e.GIDs[0] != (bth.GID{}) || e.Netdev != "lo" {
			t.Errorf("%s: addr %v index %d table %v netdev %s", dev, e.Addr, e.GIDIndex, e.GIDs, e.Netdev)
		}
		e.Close()
	}
}

// TestEmptyGIDIndex: -g 0 on loopback names the empty slot, and the error
// says so (it used to bind fe80::200:ff:fe00:0, made from lo's zero MAC).
func TestEmptyGIDIndex(t *testing.T) {
	_, err := Open(Config{Dev: "127.0.0.1", GID: 0})
	if !errors.Is(err, ErrGIDIndex) || !strings.Contains(err.Error(), "GID index 0 of 127.0.0.1 is empty: lo has no MAC") {
		t.Fatalf("GID index 0 on lo: %v", err)
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
	for _, dev := range []string{"no-such-if0", "192.0.2.77"} {
		if _, err := Open(Config{Dev: dev, GID: -1}); !errors.Is(err, ErrNoDevice) {
			t.Fatalf("-d %s: %v, want ErrNoDevice", dev, err)
		}
	}
}

// TestServerDefault: a server with no -d takes the interface of the
// default route, else the only interface but lo with an address; with
// several and no default route, or none, it fails naming them, never
// falling back to loopback.
func TestServerDefault(t *testing.T) {
	p := netns.New(t, netns.Config{})
	open := func() (*Endpoint, error) {
		var e *Endpoint
		err := p.A.Do(func() (err error) { e, err = Open(Config{GID: -1}); return })
		return e, err
	}
	sh := func(args ...string) {
		t.Helper()
		if out, err := p.A.Run(args[0], args[1:]...); err != nil {
			t.Fatalf("%v: %v %s", args, err, out)
		}
	}
	e, err := open()
	if err != nil {
		t.Fatal(err)
	}
	if e.Netdev != p.A.Link || e.Addr != p.A.IPv4 || e.GIDIndex != 1 {
		t.Errorf("only veth: %s %v index %d, want %s %v 1", e.Netdev, e.Addr, e.GIDIndex, p.A.Link, p.A.IPv4)
	}
	p.A.Do(func() error { return e.Close() })

	// A second interface with an address (a veth: the test kernel may
	// lack the dummy driver); its peer has only a link-local address,
	// which does not count.
	sh("ip", "link", "add", "dummy1", "type", "veth", "peer", "name", "dummy2")
	sh("ip", "addr", "add", "198.18.250.1/24", "dev", "dummy1")
	sh("ip", "link", "set", "dummy1", "up")
	sh("ip", "link", "set", "dummy2", "up")
	_, err = open()
	if !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), p.A.Link+" (") || !strings.Contains(err.Error(), "dummy1 (198.18.250.1)") || !strings.Contains(err.Error(), "pass -d") {
		t.Errorf("two interfaces, no default route: %v", err)
	}

	sh("ip", "route", "add", "default", "dev", "dummy1")
	if e, err = open(); err != nil || e.Netdev != "dummy1" || e.Addr != netip.MustParseAddr("198.18.250.1") {
		t.Errorf("default route via dummy1: %v %+v", err, e)
	}
	if e != nil {
		p.A.Do(func() error { return e.Close() })
	}

	sh("ip", "link", "del", "dummy1")
	sh("ip", "link", "set", p.A.Link, "down")
	if _, err = open(); !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "-d 127.0.0.1 for loopback") {
		t.Errorf("only lo: %v", err)
	}
}

// TestUnbindableGID: a GID the interface does not hold (the link-local
// one, with IPv6 off) fails naming the index, the address, the interface
// and why.
func TestUnbindableGID(t *testing.T) {
	p := netns.New(t, netns.Config{})
	if out, err := p.A.Run("sysctl", "-qw", "net.ipv6.conf."+p.A.Link+".disable_ipv6=1"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	err := p.A.Do(func() error {
		e, err := Open(Config{Dev: p.A.Link, GID: 0})
		if err == nil {
			e.Close()
		}
		return err
	})
	want := fmt.Sprintf("GID index 0 (%v) on %s: ", p.A.LL, p.A.Link)
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "does not hold") {
		t.Fatalf("link-local GID with IPv6 off: %v, want %q...", err, want)
	}
}

// TestExplainEnv: GOROCE_EXPLAIN's values, and what each writes of a
// QP's death: a failure at 1 and all, the program's own doing only at all.
func TestExplainEnv(t *testing.T) {
	for v, want := range map[string]int{"": 0, "0": 0, "1": 1, "all": 2} {
		got, err := tuningFromEnv(func(k string) string { return map[string]string{EnvExplain: v}[k] })
		if err != nil || got.explain != want {
			t.Errorf("%s=%q: level %d, %v; want %d", EnvExplain, v, got.explain, err, want)
		}
	}
	for _, v := range []string{"yes", "2", "ALL"} {
		_, err := tuningFromEnv(func(k string) string { return map[string]string{EnvExplain: v}[k] })
		if err == nil || !errors.Is(err, ErrUsage) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s=%q: %v, want a one-line usage error", EnvExplain, v, err)
		}
	}
	if explainer(0, io.Discard) != nil {
		t.Error("level 0 explains")
	}
	failed := &transport.Death{QPN: 0x11, Type: transport.RC, Cause: transport.CauseRetryExceeded, Rule: transport.CauseRetryExceeded.Rule()}
	closed := &transport.Death{QPN: 0x12, Type: transport.RC, Cause: transport.CauseModified, Rule: transport.CauseModified.Rule()}
	for level, want := range map[int][]string{1: {"0x000011"}, 2: {"0x000011", "0x000012"}} {
		var b strings.Builder
		f := explainer(level, &b)
		f(failed)
		f(closed)
		out := b.String()
		if n := strings.Count(out, "goroce: RC QP "); n != len(want) {
			t.Errorf("level %d wrote %d deaths:\n%s", level, n, out)
		}
		for _, w := range want {
			if !strings.Contains(out, w) || !strings.Contains(out, "rule: IBA") {
				t.Errorf("level %d: %q lacks %s or its rule", level, out, w)
			}
		}
	}
}

// TestTuningFromEnv: the engine's environment knobs, and a one-line usage
// error for each bad value.
func TestTuningFromEnv(t *testing.T) {
	for _, c := range []struct {
		q, b, p string
		want    tuning
		bad     bool
	}{
		{"", "", "", tuning{}, false},
		{"4", "50", "", tuning{rxQueues: 4, busyPoll: 50 * time.Microsecond}, false},
		{"1", "0", "0", tuning{rxQueues: 1, busyPoll: udp.NoBusyPoll, pollSet: true}, false}, // 0: never, not the adaptive default
		{"", "50", "1", tuning{busyPoll: 50 * time.Microsecond, pollMode: true, pollSet: true}, false},
		{"", "-1", "", tuning{}, true},
		{"0", "", "", tuning{}, true},
		{"65", "", "", tuning{}, true},
		{"two", "", "", tuning{}, true},
		{"", "yes", "", tuning{}, true},
		{"", "", "yes", tuning{}, true},
		{"", "", "2", tuning{}, true},
	} {
		env := map[string]string{EnvRxQueues: c.q, EnvBusyPoll: c.b, EnvPollMode: c.p}
		got, err := tuningFromEnv(func(k string) string { return env[k] })
		if c.bad {
			if err == nil || !errors.Is(err, ErrUsage) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%q %q %q: error %v, want a one-line usage error", c.q, c.b, c.p, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q %q %q: %+v %v, want %+v", c.q, c.b, c.p, got, err, c.want)
		}
	}
	// Through Open: two queues on loopback.
	t.Setenv(EnvRxQueues, "2")
	e, err := Open(Config{Dev: "127.0.0.1", GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if mq, ok := e.Link.(nic.MultiQueue); !ok || mq.RxQueues() != 2 {
		t.Fatalf("link %T has not 2 queues", e.Link)
	}
	if e.Device.PollMode() {
		t.Fatal("poll mode without GOROCE_POLL_MODE")
	}
	e.Close()
	t.Setenv(EnvPollMode, "1")
	if e, err = Open(Config{Dev: "127.0.0.1", GID: -1}); err != nil {
		t.Fatal(err)
	}
	if !e.Device.PollMode() {
		t.Fatal("GOROCE_POLL_MODE=1: the device is not in poll mode")
	}
	e.Close()
	// Every GID of the table, as libgoroce.so opens its devices, on an
	// interface with IPv4, IPv6 and link-local addresses: a socket each
	// (nic.Multi), in poll mode too (a Multi can be polled).
	p := netns.New(t, netns.Config{})
	for _, poll := range []string{"0", "1"} {
		t.Setenv(EnvPollMode, poll)
		err := p.A.Do(func() error {
			e, err := Open(Config{Dev: p.A.Link, GID: -1, AllGIDs: true})
			if err != nil {
				return err
			}
			defer e.Close()
			if _, multi := e.Link.(*nic.Multi); !multi || e.Device.PollMode() != (poll == "1") {
				return fmt.Errorf("link %T, poll mode %v", e.Link, e.Device.PollMode())
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s=%s, every GID of %s: %v", EnvPollMode, poll, p.A.Link, err)
		}
	}
	// A link that cannot be polled: a one-line error naming the cause.
	_, err = Open(Config{Dev: "127.0.0.1", GID: -1, Pcap: t.TempDir() + "/x.pcap"})
	if err == nil || !strings.Contains(err.Error(), "poll mode") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("poll mode over a tap: %v", err)
	}
}

// TestPollByDefault: libgoroce.so's devices (PollByDefault) are in poll
// mode where the link can be polled, and open without it where it cannot
// (a pcap tap here; a share member's relayed link the same way), and
// GOROCE_POLL_MODE=0 turns it off.
func TestPollByDefault(t *testing.T) {
	open := func(cfg Config) bool {
		t.Helper()
		e, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		return e.Device.PollMode()
	}
	cfg := Config{Dev: "127.0.0.1", GID: -1, PollByDefault: true}
	if !open(cfg) {
		t.Error("PollByDefault on a udp link: not in poll mode")
	}
	tapped := cfg
	tapped.Pcap = filepath.Join(t.TempDir(), "x.pcap")
	if open(tapped) {
		t.Error("PollByDefault on a link that cannot be polled: in poll mode")
	}
	t.Setenv(EnvPollMode, "0")
	if open(cfg) {
		t.Error("GOROCE_POLL_MODE=0: in poll mode")
	}
}

// TestCCEnv: GOROCE_CC reaches the device's congestion options, and a
// bad value is a one-line usage error.
func TestCCEnv(t *testing.T) {
	got, err := tuningFromEnv(func(k string) string { return map[string]string{EnvCC: "off"}[k] })
	if err != nil || !got.cc.Off || !got.cc.NoECT {
		t.Fatalf("%s=off: %+v %v", EnvCC, got.cc, err)
	}
	got, err = tuningFromEnv(func(k string) string { return map[string]string{EnvCC: "np_min_time_between_cnps=50"}[k] })
	if err != nil || got.cc.Params == nil || got.cc.Params.MinTimeBetweenCNPs != 50 {
		t.Fatalf("%s=np_min_time_between_cnps=50: %+v %v", EnvCC, got.cc, err)
	}
	_, err = tuningFromEnv(func(k string) string { return map[string]string{EnvCC: "rp_ai_rate=x"}[k] })
	if err == nil || !errors.Is(err, ErrUsage) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("%s=rp_ai_rate=x: %v, want a one-line usage error", EnvCC, err)
	}
}
