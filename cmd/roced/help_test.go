package main

import (
	"bytes"
	"strings"
	"testing"
)

// helpStatus is each command's exit status for -h and --help: the real
// tool's where roced stands in for one (rping's EINVAL, 22; the rdma-core
// examples', librdmacm's and perftest's 1: none of them knows -h, and all
// answer it with their usage), 0 for roced's own commands.
var helpStatus = map[string]int{
	"rc_pingpong": 1, "uc_pingpong": 1, "ud_pingpong": 1, "srq_pingpong": 1,
	"send_bw": 1, "send_lat": 1, "write_bw": 1, "write_lat": 1,
	"read_bw": 1, "read_lat": 1, "atomic_bw": 1, "atomic_lat": 1,
	"rping": 22, "rdma_server": 1, "rdma_client": 1, "ucmatose": 1, "udaddy": 1, "cmtime": 1,
	"conform": 0, "decode": 0, "gids": 0, "stats": 0, "explain": 0, "serve": 0,
}

// twoSided are the commands with a server and a client: their usage must
// name roced's --link and --pcap and how long a client waits for its
// server.
var twoSided = []string{
	"rc_pingpong", "uc_pingpong", "ud_pingpong", "srq_pingpong",
	"send_bw", "send_lat", "write_bw", "write_lat", "read_bw", "read_lat", "atomic_bw", "atomic_lat",
	"rping", "rdma_server", "rdma_client", "ucmatose", "udaddy", "cmtime",
}

// TestHelp: every command roced --help lists prints its usage on stdout
// for -h and for --help, with the real tool's exit status for it: roced's
// name in the real tool's shape, not Go's bare "Usage of", and at most
// getopt's one-line complaint on stderr. The two-sided tools' usage names
// roced's own flags and the server wait.
func TestHelp(t *testing.T) {
	for name := range commands {
		want, ok := helpStatus[name]
		if !ok {
			t.Errorf("roced %s: no exit status for -h in helpStatus: add the real tool's", name)
			continue
		}
		for _, h := range []string{"-h", "--help"} {
			code, out, errw := bounded(t, name, h)
			lines := strings.Count(out, "\n")
			if code != want || lines < 3 || !strings.Contains(out, "roced "+name) || strings.Contains(out+errw, "Usage of") ||
				strings.Count(errw, "\n") > 1 {
				t.Errorf("roced %s %s: exit %d (want %d), %d lines of stdout:\n%s\nstderr:\n%s", name, h, code, want, lines, out, errw)
			}
		}
	}
	for _, name := range twoSided {
		if _, ok := commands[name]; !ok {
			t.Errorf("roced %s is not a command", name)
			continue
		}
		_, out, _ := bounded(t, name, "-h")
		want := []string{"--link", "--pcap", "GOROCE_SERVER_WAIT"}
		if name == "rdma_server" {
			want = want[:2] // the one command that is never a client
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("roced %s -h does not mention %s:\n%s", name, w, out)
			}
		}
	}
	var top bytes.Buffer
	if code := run([]string{"--help"}, &top, &top); code != 0 {
		t.Fatalf("roced --help: exit %d", code)
	}
	for name := range commands {
		if !strings.Contains(top.String(), "\n  "+name+" ") {
			t.Errorf("roced --help does not list %s:\n%s", name, top.String())
		}
	}
}
