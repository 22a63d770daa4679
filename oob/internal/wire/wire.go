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
	"time"
)

// Do runs fn with conn's deadline tied to ctx: ctx's deadline becomes the
// connection's, and cancelling ctx unblocks any read or write in progress.
// When ctx ends first the result is ctx's error.
func Do(ctx context.Context, conn net.Conn, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(d); err != nil {
			return err
		}
	}
	stop := context.AfterFunc(ctx, func() {
		// A deadline in the past wakes every blocked Read and Write.
		_ = conn.SetDeadline(time.Unix(1, 0))
	})
	err := fn()
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
	What      string
	Got, Want int
	Err       error
}

func (e *ShortReadError) Error() string {
	if e.Got == 0 && errors.Is(e.Err, io.EOF) {
		return fmt.Sprintf("%s: peer closed the connection before sending it (%d bytes expected)", e.What, e.Want)
	}
	return fmt.Sprintf("%s: got %d of %d bytes: %v", e.What, e.Got, e.Want, e.Err)
}

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
