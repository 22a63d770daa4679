package pingpong

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/goroce/goroce/tools/internal/wire"
)

// DefaultPort is the tools' TCP port (-p).
const DefaultPort = 18515

var done = []byte("done\x00")

// ErrDone reports that the peer sent something else than "done\0" after the
// records.
var ErrDone = errors.New(`pingpong: peer did not send "done"`)

// Dial connects to a pingpong server. Like the real client it tries each
// resolved address once and does not retry: the server must be listening.
func Dial(ctx context.Context, host string, port int) (net.Conn, error) {
	c, err := wire.Dial(ctx, host, port)
	if err != nil {
		return nil, fmt.Errorf("pingpong: %w", err)
	}
	return c, nil
}

// Listen binds the server's port on every address.
func Listen(ctx context.Context, port int) (net.Listener, error) { return wire.Listen(ctx, port) }

// AcceptOne accepts a single connection and closes ln, as the tools do, so
// a second client is refused.
func AcceptOne(ctx context.Context, ln net.Listener) (net.Conn, error) {
	return wire.AcceptOne(ctx, ln)
}

// checkLocal validates the caller's records for tool and pads srq's to
// MaxQP with zero records, as srq_pingpong's memset array is.
func checkLocal(tool Tool, local []Dest) ([]Dest, error) {
	switch {
	case tool == SRQ && (len(local) < 1 || len(local) > MaxQP):
		return nil, fmt.Errorf("pingpong: srq_pingpong needs 1 to %d QP addresses, got %d", MaxQP, len(local))
	case tool != SRQ && len(local) != 1:
		return nil, fmt.Errorf("pingpong: %s exchanges one QP address, got %d", tool, len(local))
	}
	for i, d := range local {
		if d.IsZero() {
			return nil, fmt.Errorf("pingpong: local QP address %d is all zero", i)
		}
	}
	out := make([]Dest, tool.records())
	copy(out, local)
	return out, nil
}

func writeRecords(conn net.Conn, ds []Dest) error {
	for i, d := range ds {
		if err := wire.Write(conn, d.Marshal()); err != nil {
			return fmt.Errorf("pingpong: couldn't send local address %d: %w", i, err)
		}
	}
	return nil
}

func readRecords(conn net.Conn, n int) ([]Dest, error) {
	out := make([]Dest, n)
	for i := range out {
		b, err := wire.Read(conn, RecordSize, fmt.Sprintf("pingpong: remote address record %d", i))
		if err != nil {
			return nil, err
		}
		if out[i], err = parseDest(b, i); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// used returns the peer's first want records and checks that the peer
// described exactly as many QPs as we did: srq_pingpong peers with another
// -q would otherwise fail later in a confusing way.
func used(tool Tool, remote []Dest, want int) ([]Dest, error) {
	for i, d := range remote {
		switch {
		case i < want && d.IsZero():
			return nil, fmt.Errorf("pingpong: peer sent %d QP address(es), we have %d (is -q the same on both sides?)", i, want)
		case i >= want && !d.IsZero():
			return nil, fmt.Errorf("pingpong: peer sent more QP addresses than our %d (is -q the same on both sides?)", want)
		}
	}
	return remote[:want], nil
}

// Client runs the client's side of the exchange on conn: it sends local,
// reads the server's records and sends "done". It returns the server's
// addresses, one per local entry.
func Client(ctx context.Context, conn net.Conn, tool Tool, local []Dest) ([]Dest, error) {
	all, err := checkLocal(tool, local)
	if err != nil {
		return nil, err
	}
	var remote []Dest
	err = wire.Do(ctx, conn, func() error {
		if err := writeRecords(conn, all); err != nil {
			return err
		}
		var err error
		if remote, err = readRecords(conn, len(all)); err != nil {
			return err
		}
		if err := wire.Write(conn, done); err != nil {
			return fmt.Errorf("pingpong: couldn't write done: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return used(tool, remote, len(local))
}

// Server runs the server's side of the exchange on conn: it reads the
// client's records, calls ready with them (the caller moves its QPs to RTR
// and RTS there; an error aborts the exchange without answering, like
// "Couldn't connect to remote QP"), sends local and waits for "done".
func Server(ctx context.Context, conn net.Conn, tool Tool, local []Dest, ready func(remote []Dest) error) ([]Dest, error) {
	all, err := checkLocal(tool, local)
	if err != nil {
		return nil, err
	}
	var remote []Dest
	err = wire.Do(ctx, conn, func() error {
		raw, err := readRecords(conn, len(all))
		if err != nil {
			return err
		}
		if remote, err = used(tool, raw, len(local)); err != nil {
			return err
		}
		if ready != nil {
			if err := ready(remote); err != nil {
				return fmt.Errorf("pingpong: couldn't connect to remote QP: %w", err)
			}
		}
		if err := writeRecords(conn, all); err != nil {
			return err
		}
		b, err := wire.Read(conn, len(done), `pingpong: "done"`)
		if err != nil {
			return err
		}
		if !bytes.Equal(b, done) {
			return fmt.Errorf("%w: got %q", ErrDone, b)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return remote, nil
}
