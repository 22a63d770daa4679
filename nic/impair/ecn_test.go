package impair

import (
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/goroce/goroce/inet"
	"golang.org/x/sys/unix"
)

func TestQueueMarks(t *testing.T) {
	b := Bottleneck{Rate: 8e6, Kmin: 2000, Kmax: 4000, Pmax: 0.5} // a byte a microsecond
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
	q := NewQueue(b)
	// 1000-byte packets arriving together: the queue grows by 1000 each.
	var marks []bool
	for i := range 6 {
		dep, mark, drop := q.Arrive(0, 1000, 0.49, true)
		if drop {
			t.Fatalf("packet %d dropped", i)
		}
		if want := time.Duration(i+1) * time.Millisecond; dep != want {
			t.Fatalf("packet %d departs at %v, want %v", i, dep, want)
		}
		marks = append(marks, mark)
	}
	// backlog before each: 0 1000 2000 (=Kmin: no mark) 3000 (p 0.25 < r 0.49: no) 4000 (>=Kmax) 5000.
	want := []bool{false, false, false, false, true, true}
	for i := range want {
		if marks[i] != want[i] {
			t.Fatalf("marks %v, want %v", marks, want)
		}
	}
	if got := q.Backlog(3 * time.Millisecond); got != 3000 {
		t.Fatalf("backlog after 3 ms %d, want 3000", got)
	}
	// Limit 4*Kmax = 16000: a packet that does not fit is dropped.
	if _, _, drop := q.Arrive(3*time.Millisecond, 14000, 0, true); !drop {
		t.Fatal("a packet beyond the limit was queued")
	}
	// A Not-ECT packet that would be marked is dropped (RED).
	if _, _, drop := q.Arrive(3*time.Millisecond, 1000, 0, false); !drop {
		t.Fatal("a Not-ECT packet on the ramp with r 0 (p 0.25: marked) was not dropped")
	}
}

func TestBottleneckCheck(t *testing.T) {
	for _, b := range []Bottleneck{{}, {Rate: 1, Kmin: 5, Kmax: 5}, {Rate: 1, Kmax: 5, Pmax: 2}} {
		if b.Check() == nil {
			t.Errorf("%+v passed Check", b)
		}
	}
}

// TestForwardBottleneck: real datagrams through the forwarder's marking
// queue. A sends 30 ECT(0) datagrams of 1000 bytes to B's port 4791 at
// once into a bottleneck of 100 bytes a millisecond (slow, so that a
// sender the machine pauses still fills it); the queue grows past
// Kmax, so the later ones arrive marked CE (B reads the TOS each came
// with, IP_RECVTOS) and the first ones, into an empty queue, unmarked.
func TestForwardBottleneck(t *testing.T) {
	p, f := path(t, 1500, Config{})
	a4, b4 := p.A.IPv4, p.B.IPv4
	resolve(t, p, f, a4, b4)
	b := Bottleneck{Rate: 0.8e6, Kmin: 3000, Kmax: 10000, Pmax: 1}
	f.SetFaults(Faults{Bottleneck: &b}, Faults{})
	a, rx := udpIn(t, p.A, a4, 0), udpIn(t, p.B, b4, 4791)
	setInt := func(c *net.UDPConn, opt, v int) {
		raw, err := c.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var serr error
		if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, opt, v) }); err != nil || serr != nil {
			t.Fatalf("setsockopt %d: %v %v", opt, err, serr)
		}
	}
	setInt(a, unix.IP_TOS, int(inet.ECT0))
	setInt(rx, unix.IP_RECVTOS, 1)
	const n = 30
	msg := make([]byte, 1000)
	for i := range n {
		binary.BigEndian.PutUint32(msg, uint32(i))
		if _, err := a.WriteTo(msg, rx.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	// An upper bound, never the signal: the test ends when all 30 have
	// been read (the queue lets them go within about 310 ms).
	rx.SetReadDeadline(time.Now().Add(20 * time.Second))
	buf, oob := make([]byte, 2048), make([]byte, 128)
	marks := make([]bool, n)
	for got := 0; got < n; got++ {
		k, ok, _, _, err := rx.ReadMsgUDP(buf, oob)
		if err != nil {
			t.Fatalf("after %d datagrams: %v (forwarder %+v)", got, err, aToB(f)())
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:ok])
		if err != nil || k != 1000 {
			t.Fatalf("datagram of %d bytes, control %v", k, err)
		}
		i := binary.BigEndian.Uint32(buf)
		for _, m := range msgs {
			if m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS && len(m.Data) > 0 && i < n {
				marks[i] = m.Data[0]&inet.ECNMask == inet.CE
			}
		}
	}
	marked := 0
	for _, m := range marks {
		if m {
			marked++
		}
	}
	s := aToB(f)()
	t.Logf("marks %v; forwarder %+v", marks, s)
	if marks[0] || !marks[n-1] || marked < n/2 || uint64(marked) != s.Marked {
		t.Fatalf("%d of %d marked CE (first %v, last %v), the forwarder counted %d", marked, n, marks[0], marks[n-1], s.Marked)
	}
}
