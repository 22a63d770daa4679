package capture

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Step is one message of a protocol script: Size bytes travelling in Dir.
type Step struct {
	Dir  Dir // who sends it
	Size int // its length in bytes
}

// Steps repeats a step n times.
func Steps(d Dir, size, n int) []Step {
	out := make([]Step, n)
	for i := range out {
		out[i] = Step{d, size}
	}
	return out
}

// Replay plays one side of a recorded exchange over conn, message by
// message as script orders them: it writes the steps going in dir, taking
// the bytes from sent, and reads the other steps, so the side under test
// must send each message when the real peer expected it. After the script
// it reads on for trailing bytes until the connection closes or idle passes.
// It returns everything it read.
func Replay(conn net.Conn, script []Step, dir Dir, sent []byte, idle time.Duration) ([]byte, error) {
	var got bytes.Buffer
	for i, st := range script {
		if st.Dir == dir {
			if len(sent) < st.Size {
				return got.Bytes(), fmt.Errorf("replay step %d: recording has %d bytes left, step sends %d", i, len(sent), st.Size)
			}
			if _, err := conn.Write(sent[:st.Size]); err != nil {
				return got.Bytes(), fmt.Errorf("replay step %d: write: %w", i, err)
			}
			sent = sent[st.Size:]
			continue
		}
		buf := make([]byte, st.Size)
		n, err := io.ReadFull(conn, buf)
		got.Write(buf[:n])
		if err != nil {
			return got.Bytes(), fmt.Errorf("replay step %d: read %d of %d bytes: %w", i, n, st.Size, err)
		}
	}
	if len(sent) != 0 {
		return got.Bytes(), fmt.Errorf("replay: %d recorded bytes not covered by the script", len(sent))
	}
	_ = conn.SetReadDeadline(time.Now().Add(idle))
	tail, err := io.ReadAll(conn)
	got.Write(tail)
	var ne net.Error
	if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
		return got.Bytes(), fmt.Errorf("replay: after the script: %w", err)
	}
	return got.Bytes(), nil
}
