package pingpong

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func dests(n int, qpnBase uint32, ip string) []Dest {
	out := make([]Dest, n)
	for i := range out {
		out[i] = Dest{QPN: qpnBase + uint32(i), PSN: 0x100 + uint32(i), GID: gid(ip)}
	}
	return out
}

// TestClientServer runs our client against our server over a loopback TCP
// pair, for every tool.
func TestClientServer(t *testing.T) {
	for _, tool := range []Tool{RC, UC, UD, SRQ} {
		t.Run(tool.String(), func(t *testing.T) {
			ctx := testCtx(t)
			n := 1
			if tool == SRQ {
				n = 3
			}
			cl, sv := dests(n, 0x11, "::ffff:192.0.2.1"), dests(n, 0x22, "::ffff:192.0.2.2")
			ln, err := Listen(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			port := ln.Addr().(*net.TCPAddr).Port
			type res struct {
				remote []Dest
				err    error
			}
			srv := make(chan res, 1)
			var readyGot []Dest
			go func() {
				c, err := AcceptOne(ctx, ln)
				if err != nil {
					srv <- res{err: err}
					return
				}
				defer c.Close()
				r, err := Server(ctx, c, tool, sv, func(remote []Dest) error {
					readyGot = remote
					return nil
				})
				srv <- res{r, err}
			}()
			c, err := Dial(ctx, "127.0.0.1", port)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			got, err := Client(ctx, c, tool, cl)
			if err != nil {
				t.Fatal(err)
			}
			s := <-srv
			if s.err != nil {
				t.Fatal(s.err)
			}
			if !equal(got, sv) || !equal(s.remote, cl) || !equal(readyGot, cl) {
				t.Fatalf("client got %v, server got %v (ready %v)", got, s.remote, readyGot)
			}
			// The listener is gone after the one connection.
			if c2, err := Dial(ctx, "127.0.0.1", port); err == nil {
				c2.Close()
				t.Error("second connection accepted")
			}
		})
	}
}

func equal(a, b []Dest) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestDialNoServer(t *testing.T) {
	t.Setenv("GOROCE_SERVER_WAIT", "0") // the refusal is the point: one try, as the tools
	ctx := testCtx(t)
	ln, err := Listen(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	_, err = Dial(ctx, "127.0.0.1", port)
	if err == nil || !strings.Contains(err.Error(), "couldn't connect to 127.0.0.1:") {
		t.Fatalf("err = %v", err)
	}
}

func TestLocalChecks(t *testing.T) {
	ctx := testCtx(t)
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	cases := []struct {
		tool  Tool
		local []Dest
	}{
		{RC, nil},
		{RC, dests(2, 1, "::1")},
		{SRQ, dests(MaxQP+1, 1, "::1")},
		{UD, []Dest{{}}},
	}
	for _, c := range cases {
		if _, err := Client(ctx, a, c.tool, c.local); err == nil {
			t.Errorf("%v with %d records accepted", c.tool, len(c.local))
		}
	}
}

// peer runs fn on the far end of a pipe.
func peer(t *testing.T, fn func(c net.Conn)) net.Conn {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	go func() { fn(b); b.Close() }()
	return a
}

func TestServerErrors(t *testing.T) {
	good := dests(1, 0x11, "::ffff:192.0.2.1")[0].Marshal()
	tests := []struct {
		name string
		peer func(c net.Conn)
		want string
	}{
		{"short record", func(c net.Conn) { c.Write(good[:20]) }, "got 20 of 52 bytes"},
		{"closed", func(c net.Conn) {}, "peer closed the connection"},
		{"garbled", func(c net.Conn) {
			b := append([]byte(nil), good...)
			b[4] = '-'
			c.Write(b)
		}, "garbled address record 0"},
		{"no done", func(c net.Conn) {
			c.Write(good)
			io.ReadFull(c, make([]byte, RecordSize))
			c.Write([]byte("DONE\x00"))
		}, `did not send "done"`},
	}
	for _, tt := range tests {
		conn := peer(t, tt.peer)
		_, err := Server(testCtx(t), conn, RC, dests(1, 0x22, "::1"), nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestServerReadyFails(t *testing.T) {
	good := dests(1, 0x11, "::1")[0].Marshal()
	sent := make(chan int, 1)
	conn := peer(t, func(c net.Conn) {
		c.Write(good)
		n, _ := io.ReadFull(c, make([]byte, RecordSize))
		sent <- n
	})
	boom := errors.New("modify QP failed")
	_, err := Server(testCtx(t), conn, RC, dests(1, 0x22, "::1"), func([]Dest) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	conn.Close()
	if n := <-sent; n != 0 {
		t.Errorf("server answered %d bytes after its QP failed", n)
	}
}

func TestSRQCountMismatch(t *testing.T) {
	// The peer runs with -q 1 while we have 2 QPs.
	conn := peer(t, func(c net.Conn) {
		recs := make([]Dest, MaxQP)
		recs[0] = dests(1, 0x11, "::1")[0]
		writeRecords(c, recs)
	})
	_, err := Server(testCtx(t), conn, SRQ, dests(2, 0x22, "::1"), nil)
	if err == nil || !strings.Contains(err.Error(), "peer sent 1 QP address(es), we have 2") {
		t.Fatalf("err = %v", err)
	}
	conn = peer(t, func(c net.Conn) {
		writeRecords(c, append(dests(3, 0x11, "::1"), make([]Dest, MaxQP-3)...))
	})
	_, err = Server(testCtx(t), conn, SRQ, dests(2, 0x22, "::1"), nil)
	if err == nil || !strings.Contains(err.Error(), "more QP addresses than our 2") {
		t.Fatalf("err = %v", err)
	}
}

func TestClientCancel(t *testing.T) {
	// A server that accepts the record and then never answers: it reads
	// until the test's cleanup closes the pipe, so only the client's
	// context can end the exchange.
	conn := peer(t, func(c net.Conn) {
		io.Copy(io.Discard, c)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := Client(ctx, conn, RC, dests(1, 1, "::1"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
}

func TestAcceptOneCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := Listen(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(20*time.Millisecond, cancel)
	if _, err := AcceptOne(ctx, ln); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}
