package wire

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

func TestReadExact(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		// Two segments for one message: Read must join them.
		b.Write([]byte("do"))
		b.Write([]byte("ne\x00"))
		b.Close()
	}()
	got, err := Read(a, 5, "done")
	if err != nil || string(got) != "done\x00" {
		t.Fatalf("Read = %q, %v", got, err)
	}
	_, err = Read(a, 5, "more")
	var se *ShortReadError
	if !errors.As(err, &se) || se.Got != 0 || !strings.Contains(err.Error(), "peer closed") {
		t.Fatalf("Read after close: %v", err)
	}
}

func TestReadShort(t *testing.T) {
	a, b := net.Pipe()
	go func() { b.Write([]byte("abc")); b.Close() }()
	_, err := Read(a, 52, "record")
	var se *ShortReadError
	if !errors.As(err, &se) || se.Got != 3 || se.Want != 52 {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(err.Error(), "got 3 of 52 bytes") {
		t.Errorf("message %q", err)
	}
}

func TestDoCancel(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	err := Do(ctx, a, func() error {
		_, err := Read(a, 1, "x")
		return err
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestDoDeadline(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := Do(ctx, a, func() error {
		_, err := Read(a, 1, "x")
		return err
	})
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("err = %v, want a deadline error", err)
	}
}

func TestDoClearsDeadline(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if err := Do(ctx, a, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	// After Do, a read must not be bound by the old deadline or a stale
	// cancellation: it succeeds once data arrives.
	go func() { time.Sleep(10 * time.Millisecond); b.Write([]byte("x")) }()
	if _, err := Read(a, 1, "x"); err != nil {
		t.Fatal(err)
	}
}

func TestWriteWhole(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	go func() { Write(b, []byte("0123456789")); b.Close() }()
	got, err := Read(a, 10, "all")
	if err != nil || string(got) != "0123456789" {
		t.Fatalf("%q %v", got, err)
	}
}
