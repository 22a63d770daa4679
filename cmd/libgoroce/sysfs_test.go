package main

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/nic/netdev"
)

// TestSysfsNodes checks the tree's content for a device: an empty GID
// slot has its zero GID and neither type nor interface (the kernel's read
// of those fails), a full one is "RoCE v2" on its interface.
func TestSysfsNodes(t *testing.T) {
	gid := netip.MustParseAddr("::ffff:198.18.0.1")
	nodes := sysfsNodes([]sysfsDev{{
		index:  1,
		netdev: "veth0",
		guid:   [8]byte{0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55},
		gids:   []netdev.GID{{Index: 0, Netdev: "veth0"}, {Index: 1, GID: gid.As16(), Addr: gid, Netdev: "veth0"}},
	}})
	got := map[string]sysfsNode{}
	for _, n := range nodes {
		got[n.path] = n
	}
	ib := "sys/class/infiniband/goroce1/"
	for path, want := range map[string]string{
		ib + "node_guid":                           "0211:22ff:fe33:4455\n",
		ib + "parent":                              "veth0\n",
		ib + "ports/1/link_layer":                  "Ethernet\n",
		ib + "ports/1/gids/0":                      "0000:0000:0000:0000:0000:0000:0000:0000\n",
		ib + "ports/1/gids/1":                      "0000:0000:0000:0000:0000:ffff:c612:0001\n",
		ib + "ports/1/gid_attrs/types/1":           "RoCE v2\n",
		ib + "ports/1/gid_attrs/ndevs/1":           "veth0\n",
		"sys/class/infiniband_verbs/uverbs1/ibdev": "goroce1\n",
		"sys/class/infiniband_verbs/uverbs1/dev":   "231:193\n",
		"dev/infiniband/uverbs1":                   "",
	} {
		if n, ok := got[path]; !ok || n.data != want {
			t.Errorf("%s: %q (present %v), want %q", path, n.data, ok, want)
		}
	}
	for _, path := range []string{ib + "ports/1/gid_attrs/types/0", ib + "ports/1/gid_attrs/ndevs/0"} {
		if _, ok := got[path]; ok {
			t.Errorf("%s present for an empty slot", path)
		}
	}
	if n := got[ib+"device/net/veth0"]; n.link != "/sys/class/net/veth0" {
		t.Errorf("device/net/veth0 links to %q, want /sys/class/net/veth0", n.link)
	}
}

// TestSysfs reads goroce's devices as the kernel shows an rxe device,
// with coreutils' own binaries preloaded (ls, cat, stat, readlink, as a
// user would look): the directory listing, a GID and its type and
// interface as ibv_devinfo gives them, /dev/infiniband/uverbs0 as the
// character device 231:192, the device's interface under device/net/,
// and a path resolved. Each process's tree goes under $XDG_RUNTIME_DIR
// and is gone once the process has exited (or, if it could not remove it,
// once the next has made its own). No root needed: the devices
// are loopback addresses.
func TestSysfs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runtime := t.TempDir()
	sh := func(script string) string {
		t.Helper()
		cmd := preloaded(ctx, addrA+",lo", "sh", "-c", script)
		cmd.Env = append(cmd.Env, "XDG_RUNTIME_DIR="+runtime)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
		return string(out)
	}
	ib := "/sys/class/infiniband/goroce0"
	for _, tc := range []struct{ script, want string }{
		{"ls /sys/class/infiniband", "goroce0\ngoroce1\n"},
		{"ls /sys/class/infiniband_verbs", "abi_version\nuverbs0\nuverbs1\n"},
		{"cat /sys/class/infiniband_verbs/uverbs1/ibdev", "goroce1\n"},
		{"ls /dev/infiniband", "uverbs0\nuverbs1\n"},
		{"stat -c '%F %t:%T %a' /dev/infiniband/uverbs0", "character special file e7:c0 666\n"},
		{"stat -L -c '%F %t:%T' /dev/infiniband/uverbs1", "character special file e7:c1\n"},
		{"test -c /dev/infiniband/uverbs0 && echo chr", "chr\n"},
		{"cat " + ib + "/node_type " + ib + "/ports/1/state " + ib + "/ports/1/link_layer", "1: CA\n4: ACTIVE\nEthernet\n"},
		// GOROCE_NETDEV's address: index 1, as ibv_devinfo shows it (TestDevices).
		{"cat " + ib + "/ports/1/gids/1 " + ib + "/ports/1/gid_attrs/types/1 " + ib + "/ports/1/gid_attrs/ndevs/1",
			"0000:0000:0000:0000:0000:ffff:7f00:4d01\nRoCE v2\nlo\n"},
		// Loopback's MAC makes no default GID: slot 0 is empty and has no type.
		{"cat " + ib + "/ports/1/gids/0; cat " + ib + "/ports/1/gid_attrs/types/0 2>/dev/null || echo notype",
			"0000:0000:0000:0000:0000:0000:0000:0000\nnotype\n"},
		{"ls " + ib + "/device/net; cat " + ib + "/device/net/lo/address", "lo\n00:00:00:00:00:00\n"},
		{"cat " + ib + "/parent", "lo\n"},
		{"readlink -f " + ib + "/ports/1/../1/gids", ib + "/ports/1/gids\n"},
		{"ls -d /sys/class/infiniband/goroce2 2>/dev/null || echo none", "none\n"},
	} {
		if got := sh(tc.script); got != tc.want {
			t.Errorf("%s:\n%q\nwant\n%q", tc.script, got, tc.want)
		}
	}
	// docs/libgoroce.md's lines, as written, on one device.
	for _, c := range docSysfsLines(t) {
		cmd := preloaded(ctx, addrA, "sh", "-c", c.cmd)
		cmd.Env = append(cmd.Env, "XDG_RUNTIME_DIR="+runtime)
		if out, err := cmd.CombinedOutput(); err != nil || string(out) != c.want {
			t.Errorf("docs/libgoroce.md's %q: %v\n%q\nwant\n%q", c.cmd, err, out, c.want)
		}
	}
	// Other paths are the real ones.
	if got, want := sh("cat /proc/sys/kernel/ostype"), "Linux\n"; got != want {
		t.Errorf("/proc/sys/kernel/ostype through the library: %q, want %q", got, want)
	}
	// dash ends in _exit, which runs no destructor: its trees (test -c
	// above) stay until the next process to make one sweeps them; cat
	// exits through exit(), which removes its own.
	if got := sh("exec cat /sys/class/infiniband/goroce1/parent"); got != "lo\n" {
		t.Errorf("goroce1's parent: %q, want lo", got)
	}
	if left, err := os.ReadDir(runtime); err != nil || len(left) != 0 {
		t.Errorf("%s holds %v (%v): want every process's tree removed", runtime, left, err)
	}
}

// TestUCXInfo runs UCX's ucx_info -d with the library preloaded in a
// network namespace whose veth is GOROCE_NETDEV: UCX lists goroce0:1 for
// its verbs transports, rc_verbs and ud_verbs, as for an rxe device. Not
// on loopback: UCX takes a port only if its GID 0 is valid, and
// loopback's MAC makes none (as an rxe device's GID 0 would be there).
// Needs root for the namespace and ucx-utils (.ci/run installs it).
func TestUCXInfo(t *testing.T) {
	info := ucxTool(t, "ucx_info")
	p := netns.New(t, netns.Config{Subnet: 42})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out []byte
	err := p.A.Do(func() error {
		var err error
		out, err = preloaded(ctx, p.A.Link, info, "-d").CombinedOutput()
		return err
	})
	if err != nil {
		t.Fatalf("ucx_info -d: %v\n%s", err, out)
	}
	md := string(out)
	if i := strings.Index(md, "# Memory domain: goroce0"); i < 0 {
		t.Fatalf("ucx_info -d lists no goroce0 memory domain:\n%s", out)
	} else {
		md = md[i:]
		if j := strings.Index(md[1:], "# Memory domain:"); j >= 0 {
			md = md[:j+1]
		}
	}
	for _, tl := range []string{"rc_verbs", "ud_verbs"} {
		if !strings.Contains(md, "#      Transport: "+tl+"\n#         Device: goroce0:1\n") {
			t.Errorf("ucx_info -d: no %s on goroce0:1:\n%s", tl, md)
		}
	}
}

// ucxTool returns the path of a UCX binary (Debian's ucx-utils), skipping
// the test without it.
func ucxTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not installed (Debian's ucx-utils; make deps installs it): %v", name, err)
	}
	return filepath.Clean(p)
}

// docSysfsLines returns the commands docs/libgoroce.md shows under "## sysfs
// and /dev/infiniband" ("$ " lines) with the output it shows for each.
func docSysfsLines(t *testing.T) []struct{ cmd, want string } {
	t.Helper()
	text, err := os.ReadFile("../../docs/libgoroce.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(text), "## sysfs and /dev/infiniband\n")
	_, block, ok2 := strings.Cut(sec, "```\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/libgoroce.md has no block under its sysfs heading")
	}
	var lines []struct{ cmd, want string }
	for _, l := range strings.Split(strings.TrimSuffix(block, "\n"), "\n") {
		if c, ok := strings.CutPrefix(l, "$ "); ok {
			lines = append(lines, struct{ cmd, want string }{cmd: c})
		} else if len(lines) > 0 {
			lines[len(lines)-1].want += l + "\n"
		} else {
			t.Fatalf("docs/libgoroce.md's sysfs block starts with %q, not a command", l)
		}
	}
	if len(lines) == 0 {
		t.Fatal("docs/libgoroce.md's sysfs block shows no command")
	}
	return lines
}
