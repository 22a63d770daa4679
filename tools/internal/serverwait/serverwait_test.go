package serverwait

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// TestRetryReachesLateServer: a client that is refused because nothing
// listens yet reaches the server that starts after its first refusal; the
// server is started from inside the client's retry loop, once the refusal
// is seen, so the order is certain without any sleep.
func TestRetryReachesLateServer(t *testing.T) {
	t.Setenv(Env, "1m") // far beyond what the test needs, even under load
	// A port free a moment ago: nothing listens on it now.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var d net.Dialer
	tries := 0
	var late net.Listener
	c, err := Retry(context.Background(), func(ctx context.Context) (net.Conn, error) {
		tries++
		c, err := d.DialContext(ctx, "tcp", addr)
		if tries == 1 {
			if !Refused(err) {
				t.Fatalf("first try: %v, want connection refused", err)
			}
			// The server comes up only now.
			var lerr error
			if late, lerr = net.Listen("tcp", addr); lerr != nil {
				t.Fatal(lerr)
			}
		}
		return c, err
	}, Refused)
	if err != nil {
		t.Fatalf("after %d tries: %v", tries, err)
	}
	c.Close()
	late.Close()
	if tries != 2 {
		t.Fatalf("%d tries, want 2: refused, then the late server", tries)
	}
}

// TestRetryBounds: with the bound 0 a refusal is returned at once (the
// real tools' one try); an error that is not a refusal is never retried;
// a cancelled context ends the wait; a bad GOROCE_SERVER_WAIT is an error
// that names it.
func TestRetryBounds(t *testing.T) {
	refused := &net.OpError{Op: "dial", Err: errors.New("refused")}
	isRefused := func(err error) bool { return err == refused }
	count := func(env string, ctx context.Context, fail error) (int, error) {
		t.Setenv(Env, env)
		n := 0
		_, err := Retry(ctx, func(context.Context) (int, error) { n++; return 0, fail }, isRefused)
		return n, err
	}
	if n, err := count("0", context.Background(), refused); n != 1 || err != refused {
		t.Errorf("GOROCE_SERVER_WAIT=0: %d tries, %v; want 1, the refusal", n, err)
	}
	other := errors.New("no route")
	if n, err := count("1h", context.Background(), other); n != 1 || err != other {
		t.Errorf("another error: %d tries, %v; want 1, that error", n, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if n, err := count("1h", ctx, refused); n != 1 || err != refused {
		t.Errorf("cancelled: %d tries, %v; want 1, the refusal", n, err)
	}
	if n, err := count("abc", context.Background(), refused); n != 0 || err == nil || !strings.Contains(err.Error(), Env+`="abc"`) {
		t.Errorf("GOROCE_SERVER_WAIT=abc: %d tries, %v; want none and an error naming it", n, err)
	}
}

// TestBound: a Go duration, seconds, unset.
func TestBound(t *testing.T) {
	for _, c := range []struct {
		env  string
		want time.Duration
		ok   bool
	}{{"", Default, true}, {"30s", 30 * time.Second, true}, {"2.5", 2500 * time.Millisecond, true},
		{"0", 0, true}, {"-1", 0, false}, {"-1s", 0, false}, {"soon", 0, false}} {
		t.Setenv(Env, c.env)
		got, err := Bound()
		if (err == nil) != c.ok || c.ok && got != c.want {
			t.Errorf("%s=%q: %v, %v; want %v (ok %v)", Env, c.env, got, err, c.want, c.ok)
		}
	}
}
