package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/endpoint"
)

// TestStatsCommand: with a device open in this process (serving its
// counters as any roced instance does), roced stats prints it in rdma's
// format and as JSON, and names a PID that runs no instance as an error.
func TestStatsCommand(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	var out, errb bytes.Buffer
	if rc := run([]string{"stats"}, &out, &errb); rc != 0 || out.Len() != 0 {
		t.Fatalf("no instance: rc %d, %q %q", rc, out.String(), errb.String())
	}
	// An address of its own: tools/pingpong's tests bind 127.0.0.1 and .2
	// as this runs.
	e, err := endpoint.Open(endpoint.Config{Dev: "127.0.18.3", GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	pid := os.Getpid()
	for _, args := range [][]string{{"stats"}, {"stats", fmt.Sprint(pid)}} {
		out.Reset()
		if rc := run(args, &out, &errb); rc != 0 {
			t.Fatalf("%v: rc %d: %s", args, rc, errb.String())
		}
		line := out.String()
		prefix := fmt.Sprintf("link goroce0/1 pid %d netdev lo sent_pkts 0 rcvd_pkts 0 duplicate_request 0 ", pid)
		if !strings.HasPrefix(line, prefix) || !strings.Contains(line, " link_tx_packets 0 ") ||
			strings.Count(line, "\n") != 1 || !strings.HasSuffix(line, "\n") {
			t.Fatalf("%v:\n%s\nwant one line starting %q", args, line, prefix)
		}
		// name value pairs after the device, pid and netdev
		if f := strings.Fields(line); len(f)%2 != 0 || len(f) < 2*40 {
			t.Fatalf("%d fields: not name value pairs", len(f))
		}
	}
	out.Reset()
	if rc := run([]string{"stats", "-j"}, &out, &errb); rc != 0 {
		t.Fatalf("-j: rc %d: %s", rc, errb.String())
	}
	var devs []map[string]any
	if err := json.Unmarshal(out.Bytes(), &devs); err != nil || len(devs) != 1 {
		t.Fatalf("-j: %v\n%s", err, out.String())
	}
	if d := devs[0]; d["ifname"] != "goroce0" || d["port"] != 1.0 || d["pid"] != float64(pid) || d["sent_pkts"] != 0.0 || d["link_rx_packets"] != 0.0 {
		t.Fatalf("-j: %v", d)
	}
	if i, j := strings.Index(out.String(), `"sent_pkts"`), strings.Index(out.String(), `"link_tx_packets"`); i < 0 || j < i {
		t.Fatal("-j: counters not in rxe's order")
	}
	errb.Reset()
	if rc := run([]string{"stats", fmt.Sprint(pid + 1e6)}, &out, &errb); rc != 1 || !strings.Contains(errb.String(), "no running goroce instance") {
		t.Fatalf("unknown PID: rc %d, %q", rc, errb.String())
	}
	if rc := run([]string{"stats", "x"}, &out, &errb); rc != 2 {
		t.Fatalf("bad PID: rc %d", rc)
	}
}

// TestStatsChild is the other process of TestStatsOtherProcess: it opens a
// device as a roced command would and keeps it open until stdin closes.
func TestStatsChild(t *testing.T) {
	if os.Getenv("GOROCE_STATS_CHILD") == "" {
		t.Skip("runs as TestStatsOtherProcess's child")
	}
	e, err := endpoint.Open(endpoint.Config{Dev: "127.0.0.3", GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	e.Close()
}

// TestStatsOtherProcess: roced stats reads another process's counters; the
// socket goes when that process closes its device, and the socket of one
// killed outright is cleaned up by the next reader.
func TestStatsOtherProcess(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	for _, kill := range []bool{false, true} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestStatsChild$")
		cmd.Env = append(os.Environ(), "GOROCE_STATS_CHILD=1")
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
			t.Fatalf("child: %q %v", line, err)
		}
		var out, errb bytes.Buffer
		pid := cmd.Process.Pid
		if rc := run([]string{"stats", fmt.Sprint(pid)}, &out, &errb); rc != 0 ||
			!strings.HasPrefix(out.String(), fmt.Sprintf("link goroce0/1 pid %d netdev lo sent_pkts 0 ", pid)) {
			t.Fatalf("stats of child %d: rc %d %q %q", pid, rc, out.String(), errb.String())
		}
		sock := filepath.Join(endpoint.StatsDir(), fmt.Sprintf("roced-%d.sock", pid))
		if kill {
			cmd.Process.Kill()
		} else {
			stdin.Close()
		}
		cmd.Wait()
		if kill {
			if _, err := os.Stat(sock); err != nil {
				t.Fatalf("a killed process cannot remove its socket, yet: %v", err)
			}
			out.Reset()
			if rc := run([]string{"stats"}, &out, &errb); rc != 0 || out.Len() != 0 {
				t.Fatalf("stats after the kill: rc %d %q", rc, out.String())
			}
		}
		if _, err := os.Stat(sock); !os.IsNotExist(err) {
			t.Fatalf("kill %v: socket %s left: %v", kill, sock, err)
		}
	}
}
