package transport_test

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testharness"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/transport"
)

// burstLink hands the device everything that arrived while it was held in
// one Recv, so a test can make the engine see packets as one burst: the
// responder and completer then run for all of them before the requester
// sends anything, which is how a real link's receive batches behave.
type burstLink struct {
	*mem.Link
	mu     sync.Mutex
	cond   *sync.Cond
	held   bool
	q      [][]byte
	closed bool
}

func newBurstLink(l *mem.Link) *burstLink {
	b := &burstLink{Link: l}
	b.cond = sync.NewCond(&b.mu)
	go b.pump()
	return b
}

// pump copies what the in-memory link receives into b's queue.
func (b *burstLink) pump() {
	frames := make([]nic.Frame, 64)
	for {
		n, err := b.Link.Recv(frames)
		b.mu.Lock()
		if err != nil {
			b.closed = true
			b.mu.Unlock()
			b.cond.Broadcast()
			return
		}
		for _, f := range frames[:n] {
			b.q = append(b.q, append([]byte(nil), f.Datagram()...))
		}
		b.mu.Unlock()
		b.cond.Broadcast()
	}
}

func (b *burstLink) Recv(frames []nic.Frame) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for (len(b.q) == 0 || b.held) && !b.closed {
		b.cond.Wait()
	}
	if b.closed {
		return 0, nic.ErrClosed
	}
	n := min(len(frames), len(b.q))
	for i := range n {
		frames[i] = nic.Frame{B: b.q[i]}
	}
	b.q = b.q[n:]
	return n, nil
}

func (b *burstLink) hold() {
	b.mu.Lock()
	b.held = true
	b.mu.Unlock()
}

// release lets the device take the n packets queued while held, at once.
func (b *burstLink) release(t *testing.T, n int) {
	t.Helper()
	b.mu.Lock()
	for len(b.q) < n && !b.closed {
		b.cond.Wait()
	}
	b.held = false
	b.mu.Unlock()
	b.cond.Broadcast()
}

// TestCompleterReadResponseOvertakesRewind: a lost READ response makes the
// requester go back into the READ, but in the same burst the missing
// response and the READ's last one arrive (reordered, not lost), so the
// READ completes before the retried request goes out. The requester must
// continue after the READ's PSNs. It used to keep the rewind's PSN, so the
// next request reused PSNs the READ had consumed; under a lossy soak the
// responder then took every retry for a duplicate and the QP ran out of
// retries (or, worse, answered it with the wrong READ's data).
func TestCompleterReadResponseOvertakesRewind(t *testing.T) {
	var bl *burstLink
	s, r, _ := newRaw(t, testharness.Options{Timeout: 16, Wrap: func(l *mem.Link) nic.Link {
		bl = newBurstLink(l)
		return bl
	}})
	data := make([]byte, 4096)
	fill(data, 3)
	testharness.Must(t, s.QP.PostSend(&transport.SendWR{WRID: 1, Opcode: transport.WRRDMARead, Flags: transport.Signaled,
		SGL: []transport.SGE{s.MR.SGE(0, 3072)}, RemoteAddr: 0x10000, RKey: 0x77}))
	testharness.Must(t, s.QP.PostSend(&transport.SendWR{WRID: 2, Opcode: transport.WRRDMARead, Flags: transport.Signaled,
		SGL: []transport.SGE{s.MR.SGE(8192, 1024)}, RemoteAddr: 0x20000, RKey: 0x77}))
	r.expectReq(bth.RCReadRequest, sPSN)   // the first READ: sPSN..sPSN+2
	r.expectReq(bth.RCReadRequest, sPSN+3) // the second: sPSN+3
	bl.hold()
	r.send(bth.RCReadResponseFirst, sPSN, false, data[:1024], aeth(ack, 1))
	r.send(bth.RCReadResponseLast, sPSN+2, false, data[2048:3072], aeth(ack, 1)) // sPSN+1 missing: go back
	r.send(bth.RCReadResponseMiddle, sPSN+1, false, data[1024:2048])             // ...it was only late
	r.send(bth.RCReadResponseLast, sPSN+2, false, data[2048:3072], aeth(ack, 1))
	bl.release(t, 4)
	if wc := testharness.Wait(t, s.SCQ, time.Second); wc.WRID != 1 || wc.Status != transport.Success {
		t.Fatalf("first READ: %+v", wc)
	}
	if !bytes.Equal(s.Buf[:3072], data[:3072]) {
		t.Fatal("first READ's data differs")
	}
	// Go-back-N resends the second READ, with its own PSN.
	p := r.expectReq(bth.RCReadRequest, sPSN+3)
	if rh := p.RETH(); rh.VA() != 0x20000 || rh.DMALen() != 1024 {
		t.Fatalf("second READ resent for va %#x len %d", rh.VA(), rh.DMALen())
	}
	r.send(bth.RCReadResponseOnly, sPSN+3, false, data[3072:], aeth(ack, 2))
	if wc := testharness.Wait(t, s.SCQ, time.Second); wc.WRID != 2 || wc.Status != transport.Success {
		t.Fatalf("second READ: %+v", wc)
	}
	if !bytes.Equal(s.Buf[8192:9216], data[3072:]) {
		t.Fatal("second READ's data differs")
	}
	// A later message starts after every PSN used so far.
	sendN(t, s, 1, 8)
	r.expectReq(bth.RCSendOnly, sPSN+4)
}
