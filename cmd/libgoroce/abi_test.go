package main

import (
	"bytes"
	"context"
	"debug/elf"
	"os"
	"sort"
	"strings"
	"testing"
	"time"
)

// The real libraries whose public functions libgoroce must answer.
var realLibs = []string{
	"/usr/lib/x86_64-linux-gnu/libibverbs.so.1",
	"/usr/lib/x86_64-linux-gnu/librdmacm.so.1",
}

// passThrough are the public functions of the real libraries that
// libgoroce leaves to them, each with the reason it may: none takes,
// returns or reaches a verbs or CM object, so the real one never reads
// goroce's objects as its own.
var passThrough = map[string]string{
	"ibv_wc_status_str":           "a string for an enum value",
	"ibv_event_type_str":          "a string for an enum value",
	"ibv_node_type_str":           "a string for an enum value",
	"ibv_port_state_str":          "a string for an enum value",
	"ibv_rate_to_mbps":            "arithmetic on an enum",
	"ibv_rate_to_mult":            "arithmetic on an enum",
	"mbps_to_ibv_rate":            "arithmetic on an enum",
	"mult_to_ibv_rate":            "arithmetic on an enum",
	"ibv_copy_ah_attr_from_kern":  "copies between the kernel ABI's struct and verbs.h's, no object",
	"ibv_copy_qp_attr_from_kern":  "copies between the kernel ABI's struct and verbs.h's, no object",
	"ibv_copy_path_rec_from_kern": "copies between the kernel ABI's struct and verbs.h's, no object",
	"ibv_copy_path_rec_to_kern":   "copies between the kernel ABI's struct and verbs.h's, no object",
	"ibv_get_sysfs_path":          "the sysfs mount point, no object",
	"ibv_read_sysfs_file":         "reads a file under a sysfs directory the caller names, no object",
	"ibv_dontfork_range":          "madvise over the program's memory, no object (libgoroce's regions never call it)",
	"ibv_dofork_range":            "madvise over the program's memory, no object",
	// The fork-safety work (issue 42, item 2) may define these; libibverbs'
	// own only arms its madvise bookkeeping, which touches no object.
	"ibv_fork_init":           "libibverbs' madvise bookkeeping, no object (fork safety's to define)",
	"ibv_is_fork_initialized": "reads libibverbs' fork flag, no object (fork safety's to define)",
}

// publicFuncs returns the functions an ELF shared object defines under a
// default (not hidden) version, by name, with that version. Functions of
// a private version node (IBVERBS_PRIVATE_*: the providers' interface to
// libibverbs, not the applications') are left out; so are hidden
// versions (IBVERBS_1.0's compatibility entries, bound only by programs
// linked against libibverbs 1.0).
func publicFuncs(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string]string{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Section == elf.SHN_UNDEF ||
			elf.ST_BIND(s.Info) == elf.STB_LOCAL || !s.HasVersion || s.VersionIndex.IsHidden() {
			continue
		}
		if strings.HasPrefix(s.Version, "IBVERBS_PRIVATE_") {
			continue
		}
		out[s.Name] = s.Version
	}
	return out
}

// TestABICoverage reads the real libibverbs' and librdmacm's dynamic
// symbol tables and requires each public function to be defined by the
// built libgoroce.so under the same version (as libibverbs.map does it,
// so that a program's versioned reference binds to libgoroce), or to be
// on passThrough. A function a newer rdma-core adds fails it until it is
// answered or listed with its reason.
func TestABICoverage(t *testing.T) {
	have := publicFuncs(t, lib)
	for _, path := range realLibs {
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("%s: %v (libibverbs1 and librdmacm1 are what this library stands in for)", path, err)
		}
		want := publicFuncs(t, path)
		if len(want) < 20 {
			t.Fatalf("%s: only %d public functions read: the symbol table was not read", path, len(want))
		}
		var missing, wrong []string
		for name, ver := range want {
			got, ok := have[name]
			_, passes := passThrough[name]
			switch {
			case ok && got != ver:
				wrong = append(wrong, name+"@"+ver+" (libgoroce: "+got+")")
			case !ok && !passes:
				missing = append(missing, name+"@"+ver)
			}
		}
		sort.Strings(missing)
		sort.Strings(wrong)
		if len(missing) > 0 {
			t.Errorf("%s: public functions libgoroce.so neither defines nor passes through:\n  %s",
				path, strings.Join(missing, "\n  "))
		}
		if len(wrong) > 0 {
			t.Errorf("%s: defined under another version, so programs' references miss them:\n  %s",
				path, strings.Join(wrong, "\n  "))
		}
	}
	// The list names only what the real libraries export: a stale entry
	// would hide nothing, but says something false.
	all := map[string]bool{}
	for _, path := range realLibs {
		for name := range publicFuncs(t, path) {
			all[name] = true
		}
	}
	for name := range passThrough {
		if !all[name] {
			t.Errorf("passThrough lists %s, which neither library exports", name)
		}
	}
}

// TestABICheck builds testdata/abi_check.c and runs it preloaded: the
// entry points that used to fall through to the real libraries (GID
// entries, P_Key index, data-in-order, ECE, import, dma-buf), what
// rsockets refuse (datagram rsockets, riomap, keepalive: EOPNOTSUPP),
// the errno of refused verbs (returned and in errno alike), a flow label
// past 20 bits taken as its low 20, phys_port_cnt_ex and cmd_fd.
func TestABICheck(t *testing.T) {
	bin := buildC(t, "abi_check", "-lrdmacm")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := preloaded(ctx, addrA, bin).CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("abi_check: ok")) {
		t.Fatalf("abi_check: %v\n%s", err, out)
	}
}
