package main

// The sysfs and /dev/infiniband a program finds for goroce's devices.
//
// Programs that find RDMA devices as the kernel shows them, rather than
// through ibv_get_device_list alone, read sysfs: UCX's uct_ib stats
// /dev/infiniband/<ibv_device.dev_name> and takes only a character
// device, then reads each GID's type (ports/1/gid_attrs/types/N: "RoCE v2")
// and interface (gid_attrs/ndevs/N) to choose its GID; rdma-core's tests
// find the device's interface under device/net/. An rxe device has all of
// it; goroce, a library, cannot add to the kernel's sysfs nor make a
// device node without root. So the library answers those paths from a
// tree of its own: this file writes it, per process, from the same device
// and GID table ibv_query_gid gives (one home for the table: LookupDev);
// sysfs.c, in libgoroce.so, sends the libc calls that name
// /sys/class/infiniband, /sys/class/infiniband_verbs or /dev/infiniband
// there, and presents /dev/infiniband/uverbsN (a plain empty file in the
// tree) as the character device 231:192+N, rxe's. The tree goes under
// $XDG_RUNTIME_DIR (else the temporary directory), one per process,
// removed when the process exits (sysfs.c) or, if it could not, by the
// next process that makes one (sweepSysfs).

/*
#include <stddef.h>
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"github.com/goroce/goroce/nic/netdev"
	"golang.org/x/sys/unix"
)

// sysfsDev is what the tree says of one device.
type sysfsDev struct {
	index  int          // goroceN, uverbsN
	netdev string       // the interface ("" when GOROCE_NETDEV's entry names none)
	guid   [8]byte      // node GUID, as ibv_query_device gives it
	gids   []netdev.GID // the GID table, as ibv_query_gid gives it
}

// sysfsNode is one file or symbolic link of the tree, its path relative
// to the tree's root (sys/class/..., dev/infiniband/...). Directories are
// made for the paths' parents.
type sysfsNode struct {
	path string
	data string // a file's content
	link string // a symbolic link's target (data unused)
}

// uverbsMajor and uverbsMinorBase are the character device numbers the
// kernel gives /dev/infiniband/uverbsN (IB_UVERBS_MAJOR 231, minor base
// 192): sysfs.c presents the device node with them, and
// infiniband_verbs/uverbsN/dev says them as the kernel's does.
const (
	uverbsMajor     = 231
	uverbsMinorBase = 192
)

// sysfsNodes lists the tree for devs, with the attributes an rxe device
// has that goroce's verbs answer the same way (ibv_query_device,
// ibv_query_port, ibv_query_gid: verbs.c), so that a program reading
// either finds the same device.
func sysfsNodes(devs []sysfsDev) []sysfsNode {
	var n []sysfsNode
	add := func(path, data string) { n = append(n, sysfsNode{path: path, data: data + "\n"}) }
	n = append(n, sysfsNode{path: "sys/class/infiniband_verbs/abi_version", data: "6\n"})
	for _, d := range devs {
		ib := fmt.Sprintf("sys/class/infiniband/goroce%d/", d.index)
		uv := fmt.Sprintf("uverbs%d", d.index)
		g := binary.BigEndian.Uint64(d.guid[:])
		guid := fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xffff, g>>16&0xffff, g&0xffff)
		add(ib+"node_type", "1: CA")
		add(ib+"node_guid", guid)
		add(ib+"sys_image_guid", guid)
		if d.netdev != "" {
			// rxe's "parent" attribute names its interface; device/net/
			// holds the interface as a PCI NIC's device directory does.
			add(ib+"parent", d.netdev)
			n = append(n, sysfsNode{path: ib + "device/net/" + d.netdev, link: "/sys/class/net/" + d.netdev})
		}
		p := ib + "ports/1/"
		add(p+"state", "4: ACTIVE")
		add(p+"phys_state", "5: LinkUp")
		add(p+"link_layer", "Ethernet")
		add(p+"lid", "0x0")
		add(p+"lid_mask_count", "0")
		add(p+"sm_lid", "0x0")
		add(p+"sm_sl", "0")
		add(p+"cap_mask", "0x00010000")     // IBV_PORT_CM_SUP, as ibv_query_port
		add(p+"rate", "25 Gb/sec (1X EDR)") // active_width 1X, active_speed EDR, as ibv_query_port
		add(p+"pkeys/0", "0xffff")
		for _, e := range d.gids {
			var raw [16]byte
			if !e.Empty() {
				raw = e.GID
			}
			add(fmt.Sprintf("%sgids/%d", p, e.Index), sysfsGID(raw))
			// An empty slot has no type or interface: the kernel's read
			// of them fails (EINVAL), a missing file's open fails here.
			if !e.Empty() {
				add(fmt.Sprintf("%sgid_attrs/types/%d", p, e.Index), "RoCE v2")
				add(fmt.Sprintf("%sgid_attrs/ndevs/%d", p, e.Index), e.Netdev)
			}
		}
		v := "sys/class/infiniband_verbs/" + uv + "/"
		add(v+"ibdev", fmt.Sprintf("goroce%d", d.index))
		add(v+"dev", fmt.Sprintf("%d:%d", uverbsMajor, uverbsMinorBase+d.index))
		n = append(n, sysfsNode{path: "dev/infiniband/" + uv})
	}
	sort.Slice(n, func(i, j int) bool { return n[i].path < n[j].path })
	return n
}

// sysfsGID formats a GID as the kernel's gids/N does: eight groups of
// four hex digits.
func sysfsGID(g [16]byte) string {
	var b strings.Builder
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02x%02x", g[i], g[i+1])
	}
	return b.String()
}

// sysfsPrefix starts the name of every process's tree in base: the pid
// namespace (its inode) and the pid of the process that made it.
func sysfsPrefix() string {
	ns := "0"
	var st unix.Stat_t
	if unix.Stat("/proc/self/ns/pid", &st) == nil {
		ns = strconv.FormatUint(st.Ino, 10)
	}
	return "goroce-sysfs-" + ns + "-"
}

// sweepSysfs removes the trees in base of processes that no longer exist.
// sysfs.c removes a process's tree when it exits, but a process that ends
// in _exit (dash does) or is killed leaves its tree; the next one made
// takes it away. Only trees of this pid namespace are looked at: another
// namespace's pids mean other processes.
func sweepSysfs(base, prefix string) {
	ents, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.IsDir() {
			continue
		}
		pid, _, ok := strings.Cut(rest, "-")
		n, err := strconv.Atoi(pid)
		if !ok || err != nil || n <= 0 {
			continue
		}
		if unix.Kill(n, 0) == unix.ESRCH {
			os.RemoveAll(filepath.Join(base, e.Name()))
		}
	}
}

// writeSysfs writes the tree under a new directory of base and returns it.
func writeSysfs(base string, devs []sysfsDev) (string, error) {
	prefix := sysfsPrefix()
	sweepSysfs(base, prefix)
	root, err := os.MkdirTemp(base, fmt.Sprintf("%s%d-", prefix, os.Getpid()))
	if err != nil {
		return "", err
	}
	// Every directory of the tree exists even without a device (an empty
	// /sys/class/infiniband, as on a host with no RDMA device).
	for _, d := range []string{"sys/class/infiniband", "sys/class/infiniband_verbs", "dev/infiniband"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			os.RemoveAll(root)
			return "", err
		}
	}
	for _, e := range sysfsNodes(devs) {
		p := filepath.Join(root, e.path)
		err := os.MkdirAll(filepath.Dir(p), 0o755)
		if err == nil && e.link != "" {
			err = os.Symlink(e.link, p)
		} else if err == nil {
			err = os.WriteFile(p, []byte(e.data), 0o444)
		}
		if err != nil {
			os.RemoveAll(root)
			return "", err
		}
	}
	return root, nil
}

// sysfsBase is where the tree goes: $XDG_RUNTIME_DIR (the user's own,
// cleared at logout), else the temporary directory.
func sysfsBase() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && unix.Access(d, unix.W_OK|unix.X_OK) == nil {
		return d
	}
	return os.TempDir()
}

var sysfsTree struct {
	once sync.Once
	root string
	err  error
}

// goroce_sysfs_root writes the process's tree (once) and puts its
// directory in buf, NUL-terminated: 0, or an errno. sysfs.c asks once and
// keeps the answer, so a child forked later uses its parent's tree (the
// same devices) without loading an engine of its own for it.
//
//export goroce_sysfs_root
func goroce_sysfs_root(buf *C.char, n C.size_t) C.int {
	sysfsTree.once.Do(func() {
		var devs []sysfsDev
		for i, d := range devices() {
			sd := sysfsDev{index: i, guid: d.guid}
			if d.err == nil {
				sd.netdev, sd.gids = d.dev.Netdev, d.dev.GIDs
			}
			devs = append(devs, sd)
		}
		sysfsTree.root, sysfsTree.err = writeSysfs(sysfsBase(), devs)
		if sysfsTree.err != nil {
			fmt.Fprintf(os.Stderr, "libgoroce: writing the sysfs tree: %v\n", sysfsTree.err)
		}
	})
	if sysfsTree.err != nil {
		return C.int(syscall.EIO)
	}
	if len(sysfsTree.root)+1 > int(n) {
		return C.int(syscall.ENAMETOOLONG)
	}
	out := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	copy(out, sysfsTree.root)
	out[len(sysfsTree.root)] = 0
	return 0
}
