package interop

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The guest agent itself (guestagent.py under python3, as in the guest),
// on loopback with counter files of the test's: a snapshot, the kernel
// log's sequence, and the listener wait both ways.
func TestGuestAgent(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 (the guest has its own)")
	}
	hw := t.TempDir()
	for k, v := range map[string]string{"rcvd_pkts": "12\n", "sent_pkts": "7\n"} {
		os.WriteFile(filepath.Join(hw, k), []byte(v), 0o644)
	}
	script := filepath.Join(t.TempDir(), "agent.py")
	os.WriteFile(script, []byte(guestAgentPy), 0o644)
	pid := filepath.Join(t.TempDir(), "agent.pid")
	cmd := exec.Command(py, script, "127.0.0.1", strconv.Itoa(guestAgentPort), pid)
	cmd.Env = append(os.Environ(), "GOROCE_AGENT_HW="+hw)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line := make([]byte, 10)
	if n, _ := out.Read(line); !strings.HasPrefix(string(line[:n]), "listening") {
		t.Fatalf("agent said %q", line[:n])
	}
	l := &Lab{GuestAddr: "127.0.0.1", session: &guestSession{}}
	ctx := context.Background()
	a, err := l.agent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	s, log, err := a.snap(ctx, 1<<53)
	if err != nil || s.counters["rcvd_pkts"] != 12 || s.counters["sent_pkts"] != 7 || len(s.counters) != 2 || len(log) != 0 {
		t.Fatalf("snap: %+v %q %v", s, log, err)
	}
	if d := s.clock.Sub(t0); d < -time.Second || d > 10*time.Second {
		t.Errorf("agent clock %v off by %v", s.clock, d)
	}
	// From an earlier sequence number on, the log's records come back in
	// dmesg's form.
	if s.dmesg > 0 {
		_, log, err = a.snap(ctx, s.dmesg-1)
		if err != nil || len(log) != 1 || !strings.HasPrefix(log[0], "[") {
			t.Errorf("last record: %q %v", log, err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := a.waitListen(ctx, "listen", port, 5*time.Second); err != nil {
		t.Errorf("a listening port: %v", err)
	}
	ln.Close()
	if err := a.waitListen(ctx, "listen", port, 200*time.Millisecond); err == nil || !strings.Contains(err.Error(), "nothing listens") {
		t.Errorf("a closed port: %v", err)
	}
	// No rdma_cm ID listens here (no rdma(8), or no RDMA device, on a
	// test host): the wait ends at its timeout, with the port space named.
	if err := a.waitListen(ctx, "cmlisten", port, 200*time.Millisecond); err == nil || !strings.Contains(err.Error(), "nothing listens on RDMA CM port") {
		t.Errorf("no CM listener: %v", err)
	}
	// A cancelled wait leaves the connection broken; the next call dials
	// again and the agent answers it.
	cctx, cancel := context.WithCancel(ctx)
	go cancel()
	if err := a.waitListen(cctx, "listen", port, time.Minute); err == nil {
		t.Fatal("a cancelled wait succeeded")
	}
	if a, err = l.agent(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.snap(ctx, 1<<53); err != nil {
		t.Errorf("after a cancelled wait: %v", err)
	}
	// Commands run through it while the session's connection is open:
	// output and exit status, timeout(1)'s 124, and Stop.
	g := guestRunner{lab: l, ShellRunner: &ShellRunner{Name: "guest test", Backstop: 10 * time.Second}}
	o := g.Start(ctx, []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, 10*time.Second).Wait()
	if o.Exit != 3 || o.Stdout != "out\n" || o.Stderr != "err\n" || o.StartErr != "" || o.TimedOut || o.Where != "guest test" {
		t.Errorf("run: %+v", o)
	}
	// One past its time says where it was: its one thread asleep in a
	// system call, at an address in the C library.
	if o := g.Start(ctx, []string{"sleep", "30"}, time.Second).Wait(); o.Exit != 124 || !o.TimedOut ||
		len(o.Hung) != 1 || !strings.HasPrefix(o.Hung[0], "sleep[") || !strings.Contains(o.Hung[0], "in system call") || !strings.Contains(o.Hung[0], "libc.so") {
		t.Errorf("run past its timeout: %+v", o)
	}
	sp := g.Start(ctx, []string{"sh", "-c", "trap 'echo term; exit 5' TERM; while :; do sleep 0.05; done"}, time.Minute)
	if _, _, err := a.snap(ctx, 1<<53); err != nil { // the session's connection still answers
		t.Errorf("snap beside a run: %v", err)
	}
	sp.Stop()
	if o := sp.Wait(); !o.Stopped || o.TimedOut || o.Exit == 0 || o.Seconds > 30 {
		t.Errorf("stopped run: %+v", o)
	}
	if o := g.Start(ctx, []string{"/nonexistent/tool"}, 5*time.Second).Wait(); o.Exit != 127 {
		t.Errorf("a missing tool: %+v (timeout(1) says 127)", o)
	}
	// roced conform's --peer-exec in the lab (interop -peer lab-exec): the
	// agent answers, so it is used as it is.
	var gout, gerr strings.Builder
	if x := GuestExec(ctx, l, []string{"sh", "-c", "echo exchanged; echo failed >&2; exit 1"}, 10*time.Second, &gout, &gerr); x != 1 || gout.String() != "exchanged\n" || gerr.String() != "failed\n" {
		t.Errorf("GuestExec: exit %d, stdout %q, stderr %q", x, gout.String(), gerr.String())
	}
	a.close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("agent after quit: %v", err)
	}
	if _, err := os.Stat(pid); !os.IsNotExist(err) {
		t.Errorf("the agent's pid file after quit: %v", err)
	}
}
