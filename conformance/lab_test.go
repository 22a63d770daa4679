package conformance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLabLock(t *testing.T) {
	t.Setenv("RXE_PEER_STATE", filepath.Join(t.TempDir(), "state"))
	a, b := NewLab("/lab"), NewLab("/lab")
	if err := a.Lock(0); err != nil {
		t.Fatal(err)
	}
	err := b.Lock(0)
	if err == nil || !strings.Contains(err.Error(), "another interop run holds") {
		t.Fatalf("second lock: %v", err)
	}
	a.lock.Close()
	if err := b.Lock(0); err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	b.lock.Close()
}

func TestNewLabEnv(t *testing.T) {
	for k, v := range map[string]string{"RXE_PEER_HOST_ADDR": "198.18.15.1/24", "RXE_PEER_GUEST_ADDR": "198.18.15.2/24",
		"RXE_PEER_SUITE": "trixie", "RXE_PEER_NETNS": "", "RXE_PEER_TAP": "rxetap5", "RXE_PEER_MTU": "9000"} {
		t.Setenv(k, v)
	}
	l := NewLab("/x")
	if l.HostAddr != "198.18.15.1" || l.GuestAddr != "198.18.15.2" || l.Suite != "trixie" || l.NetNS != "" ||
		l.Tap != "rxetap5" || l.MTU != 9000 || l.Script != "/x/rxe-peer.sh" {
		t.Errorf("got %+v", l)
	}
	// An empty RXE_PEER_NETNS means the caller's namespace, as in rxe-peer.sh.
	if got := l.Host().Where(); got != "host" {
		t.Errorf("Where() = %q", got)
	}
}

func TestFindLabDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rxe-peer.sh"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := FindLabDir(dir); err != nil || got != dir {
		t.Errorf("FindLabDir(%s) = %q, %v", dir, got, err)
	}
	t.Setenv("RXE_PEER_DIR", dir)
	if got, err := FindLabDir(""); err != nil || got != dir {
		t.Errorf("with RXE_PEER_DIR: %q, %v", got, err)
	}
	missing := filepath.Join(dir, "nowhere")
	t.Setenv("RXE_PEER_DIR", missing)
	if _, err := FindLabDir(""); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("a missing lab: %v, want an error naming %s", err, missing)
	}
}
