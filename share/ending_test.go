package share_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/share"
)

// TestEndWhenIdle: a server that ends when idle (roced serve --auto)
// takes no join once its last member has left, and its socket is gone
// then, so that the next program finds no server (and starts one) rather
// than joining one about to close; a join already on its way is refused;
// the server's Close later leaves a successor's socket at the same path
// alone. CI once saw a forked child's join cut off by such a server's
// Close (connection reset), the device then failing to open.
func TestEndWhenIdle(t *testing.T) {
	s, path := startServer(t)
	s.EndWhenIdle()
	m, err := share.Join(path, []netip.Addr{sharedAddr})
	if err != nil {
		t.Fatal(err)
	}
	// A program whose join is on its way when the last member leaves.
	late, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	select {
	case <-s.Idle():
	case <-ctx.Done():
		t.Fatal("the server did not see its last member leave")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an idle server's socket: %v, want it gone", err)
	}
	if _, err := share.Join(path, []netip.Addr{sharedAddr}); !errors.Is(err, share.ErrNoServer) {
		t.Fatalf("a join after the last member left: %v, want ErrNoServer", err)
	}
	if _, err := share.JoinConn(late, []netip.Addr{sharedAddr}); !errors.Is(err, share.ErrRefused) {
		t.Fatalf("a join on its way as the last member left: %v, want ErrRefused", err)
	}
	// A successor listens at the path; the ending server's Close must
	// not take its socket away.
	next := listenAt(t, path)
	defer next.Close()
	s.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the successor's socket after the old server closed: %v", err)
	}
}

// TestJoinServerGone: a server that closes the connection without an
// answer, or whose listener closes with the join still queued, is no
// server: Join says ErrNoServer, so its caller starts one.
func TestJoinServerGone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gone.sock")
	ln := listenAt(t, path)
	go func() {
		if c, err := ln.AcceptUnix(); err == nil {
			c.Close()
		}
	}()
	if _, err := share.Join(path, []netip.Addr{sharedAddr}); !errors.Is(err, share.ErrNoServer) {
		t.Fatalf("a server that closed without answering: %v, want ErrNoServer", err)
	}
	ln2 := listenAt(t, filepath.Join(t.TempDir(), "queued.sock"))
	c, err := net.DialUnix("unixpacket", nil, ln2.Addr().(*net.UnixAddr))
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	ln2.Close()
	if _, err := share.JoinConn(c, []netip.Addr{sharedAddr}); !errors.Is(err, share.ErrNoServer) {
		t.Fatalf("a join queued at a listener that closed: %v, want ErrNoServer", err)
	}
}

// TestCloseWithJoinPending: Close returns while a connection has been
// accepted but has sent no join yet: it closes that connection too, whose
// goroutine would otherwise wait for the join for ever (CI once hung so,
// in TestEndWhenIdle's cleanup after a failure).
func TestCloseWithJoinPending(t *testing.T) {
	s, path := startServer(t)
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A join that is answered shows the server has accepted what came
	// before it, the silent connection included.
	m, err := share.Join(path, []netip.Addr{sharedAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	closed := make(chan struct{})
	go func() {
		s.Close()
		close(closed)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("Close did not return with a connection that sent no join")
	}
	// The silent connection was closed by the server.
	if n, err := c.Read(make([]byte, 16)); err == nil && n > 0 {
		t.Fatalf("the silent connection read %d bytes, want its end", n)
	}
}

// TestJoinServerSilent: a server that accepts a join and neither answers
// nor closes (a stopped or wedged roced serve) does not hold the joining
// program for ever: Join fails after its bound, saying so.
func TestJoinServerSilent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "silent.sock")
	ln := listenAt(t, path)
	defer ln.Close()
	accepted := make(chan *net.UnixConn, 1)
	go func() {
		c, err := ln.AcceptUnix()
		if err == nil {
			accepted <- c // held open, unanswered, until the test ends
		}
	}()
	defer func() {
		select {
		case c := <-accepted:
			c.Close()
		default:
		}
	}()
	defer share.SetJoinWait(share.SetJoinWait(50 * time.Millisecond))
	_, err := share.Join(path, []netip.Addr{sharedAddr})
	if err == nil || errors.Is(err, share.ErrNoServer) || errors.Is(err, share.ErrRefused) || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("a server that never answers: %v, want the bound's error", err)
	}
}
