// Package wire holds the socket helpers both out-of-band protocols share:
// context-bound deadlines, whole-message writes and exact reads.
package wire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/goroce/goroce/tools/internal/serverwait"
)

// Do runs fn with conn's deadline tied to ctx: ctx's deadline becomes the
// connection's, and cancelling ctx unblocks any read or write in progress.
// When ctx ends first the result is ctx's error.
func Do(ctx context.Context, conn net.Conn, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok {
		// A connection the peer has already closed may refuse a deadline
		// (net.Pipe does); the read or write below then reports what really
		// happened, which is what the caller should see.
		_ = conn.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() {
		// A deadline in the past wakes every blocked Read and Write.
		_ = conn.SetDeadline(time.Unix(1, 0))
	})
	err := fn()
	// The connection's deadline and ctx's timer are separate timers: the
	// read may time out an instant before ctx reports it is done.
	if d, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(d) {
		stop()
		return fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
	}
	if !stop() || (err != nil && ctx.Err() != nil) {
		if err != nil {
			return fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
	} else {
		_ = conn.SetDeadline(time.Time{})
	}
	return err
}

// Write sends b with a single write call. The C tools read each message with
// one read() of exactly its size, so a message must leave in one piece.
func Write(conn net.Conn, b []byte) error {
	n, err := conn.Write(b)
	if err != nil {
		return err
	}
	if n != len(b) {
		return fmt.Errorf("short write: %d of %d bytes", n, len(b))
	}
	return nil
}

// ShortReadError reports a message cut short by the peer closing.
type ShortReadError struct {
	What      string // what was being read
	Got, Want int    // bytes read, bytes the message has
	Err       error  // what the read returned
}

// Error says what was cut short and how much arrived.
func (e *ShortReadError) Error() string {
	if e.Got == 0 && errors.Is(e.Err, io.EOF) {
		return fmt.Sprintf("%s: peer closed the connection before sending it (%d bytes expected)", e.What, e.Want)
	}
	return fmt.Sprintf("%s: got %d of %d bytes: %v", e.What, e.Got, e.Want, e.Err)
}

// Unwrap returns Err.
func (e *ShortReadError) Unwrap() error { return e.Err }

// Read reads exactly n bytes. Unlike the C tools it tolerates a message that
// arrives in several segments; what describes the message in errors.
func Read(conn net.Conn, n int, what string) ([]byte, error) {
	buf := make([]byte, n)
	got, err := io.ReadFull(conn, buf)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = io.EOF
		}
		return nil, &ShortReadError{What: what, Got: got, Want: n, Err: err}
	}
	return buf, nil
}

// Dial connects to host:port. The tools try each resolved address once,
// so their server must already listen; roced retries a refused connection
// for as long as serverwait.Bound allows (GOROCE_SERVER_WAIT), so that a
// client started in the same breath as its server still finds it. The
// server sees one connection either way: a refused try never reached it.
func Dial(ctx context.Context, host string, port int) (net.Conn, error) {
	var d net.Dialer
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	c, err := serverwait.Retry(ctx, func(ctx context.Context) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	}, serverwait.Refused)
	if err != nil {
		return nil, fmt.Errorf("couldn't connect to %s:%d: %w", host, port, err)
	}
	return c, nil
}

// Listen binds port on every address (the tools bind the wildcard address
// from getaddrinfo(NULL, AI_PASSIVE) with SO_REUSEADDR, which Go sets).
func Listen(ctx context.Context, port int) (net.Listener, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort("", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("couldn't listen to port %d: %w", port, err)
	}
	return ln, nil
}

// AcceptOne accepts a single connection and closes ln, as the tools do
// (listen(fd, 1); accept; close): a second client is refused.
func AcceptOne(ctx context.Context, ln net.Listener) (net.Conn, error) {
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	c, err := ln.Accept()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("accept() failed: %w", err)
	}
	return c, nil
}
