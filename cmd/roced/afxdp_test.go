package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
)

// TestSendLatAFXDPPollMode runs roced send_lat as two processes in two
// network namespaces across a veth, over the afxdp link in poll mode
// (GOROCE_POLL_MODE=1): what the README's latency figures over AF_XDP
// measure, and the lab's guest bench runs with -link afxdp.
func TestSendLatAFXDPPollMode(t *testing.T) {
	if testing.Short() {
		t.Skip("two roced processes across a veth: make system runs it")
	}
	p := netns.New(t, netns.Config{})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "ROCED_TEST_MAIN=1", "GOROCE_POLL_MODE=1")
	args := func(dev string, more ...string) []string {
		return append([]string{"send_lat", "-d", dev, "--link", "afxdp", "-s", "64", "-n", "2000", "-p", "19950"}, more...)
	}
	// The client connects once the server listens (perftest's client
	// does not retry): its banner says so.
	srvOut := &startWriter{line: "Waiting for client to connect", started: make(chan struct{})}
	srv := exec.Command(exe, args(p.B.IPv4.String())...)
	srv.Env, srv.Stdout, srv.Stderr = env, srvOut, srvOut
	if err := p.B.Do(srv.Start); err != nil { // the child inherits the namespace
		t.Fatal(err)
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Wait() }()
	t.Cleanup(func() { srv.Process.Kill() })
	select {
	case <-srvOut.started:
	case err := <-srvDone:
		t.Fatalf("the server ended before it listened: %v\n%s", err, srvOut.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("the server did not listen in 60 s:\n%s", srvOut.String())
	}
	var cliOut []byte
	err = p.A.Do(func() error {
		c := exec.Command(exe, args(p.A.IPv4.String(), p.B.IPv4.String())...)
		c.Env = env
		var err error
		cliOut, err = c.CombinedOutput()
		return err
	})
	if err != nil {
		t.Fatalf("client: %v\n%s", err, cliOut)
	}
	if err := <-srvDone; err != nil {
		t.Fatalf("server: %v\n%s", err, srvOut.String())
	}
	var row []string
	for _, l := range strings.Split(string(cliOut), "\n") {
		if f := strings.Fields(l); len(f) >= 8 && f[0] == "64" {
			row = f
		}
	}
	if row == nil {
		t.Fatalf("client: no result row for 64 bytes:\n%s", cliOut)
	}
	t.Logf("64 B over afxdp in poll mode: t_min %s t_typical %s usec, 99%% %s", row[2], row[4], row[7])
}
