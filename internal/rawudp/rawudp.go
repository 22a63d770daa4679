// Package rawudp measures what the kernel's plain UDP path carries between
// two network namespaces, the yardstick for goroce's links: one sendto per
// datagram, sendmmsg into recvmmsg (64 datagrams per call), or UDP GSO (up
// to 64 segments per sendmsg) to a GRO socket; and GSO again with the work
// no RoCE transport over a UDP socket can leave out (GSOICRC).
// The sender stays within a window of the receiver, as an RC send queue
// would: nothing on a veth has flow control and its backlog holds 1000
// packets. PingPong times its round trip, the yardstick for latency.
package rawudp

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goroce/goroce/internal/netns"
	"golang.org/x/sys/unix"
)

// Window is how many datagrams the sender keeps in flight at most.
const Window = 512

// Mode is how the datagrams are sent and received.
type Mode int

const (
	Sendto Mode = iota // one sendto per datagram, one recvmsg each
	MMsg               // sendmmsg and recvmmsg, up to 64 datagrams per call
	GSO                // UDP GSO sends of up to 64 segments into a GRO socket
	// GSOICRC is GSO with what every RoCEv2 packet costs beyond a datagram,
	// wherever the transport runs over a UDP socket: the sender seals each
	// segment with its ICRC (bth.Seal), the receiver checks each one's and
	// copies its payload out of the socket's buffer into memory of its own,
	// as a responder into the registered buffer a WRITE names. Nothing
	// else: no queues, no completions, no acknowledgements, and no gather
	// copy on the sender (the kernel could gather from the registered
	// memory itself). What it carries bounds what goroce can over GSO.
	GSOICRC
)

// String names the mode as the benchmarks print it.
func (m Mode) String() string {
	switch m {
	case Sendto:
		return "sendto"
	case MMsg:
		return "mmsg"
	case GSO:
		return "gso"
	case GSOICRC:
		return "gso+icrc"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// SendtoOrGSO is GSO if gso, else Sendto: the two per-packet and batched
// yardsticks the bandwidth benchmarks compare with.
func SendtoOrGSO(gso bool) Mode {
	if gso {
		return GSO
	}
	return Sendto
}

// batch is how many datagrams one sendmmsg or recvmmsg moves at most.
const batch = 64

// Result is one measurement.
type Result struct {
	Datagrams int64         // received
	Sent      int64         // sent: more than Datagrams when some were lost
	Elapsed   time.Duration // first send to the last datagram's arrival
}

// PPS returns datagrams per second.
func (r Result) PPS() float64 { return float64(r.Datagrams) / r.Elapsed.Seconds() }

// Gbps returns goodput in Gbit/s counting payload bytes per datagram.
func (r Result) Gbps(payload int) float64 { return r.PPS() * float64(payload) * 8 / 1e9 }

// listenIn opens a UDP socket on ap inside namespace e (nil: the
// caller's); the socket stays in that namespace afterwards.
func listenIn(e *netns.End, ap netip.AddrPort) (c *net.UDPConn, err error) {
	open := func() error {
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
		return err
	}
	if e == nil {
		return c, open()
	}
	return c, e.Do(open)
}

// Measure sends count datagrams of size bytes from a (address src) to b
// (address dst, port 4791) the way mode says, and returns how many arrived
// in how long. start, if set, is called just before the first send (a
// benchmark resets its timer there).
func Measure(a, b *netns.End, src, dst netip.Addr, size, count int, mode Mode, start func()) (Result, error) {
	gso := mode == GSO || mode == GSOICRC
	icrc := mode == GSOICRC
	if icrc && size < minICRCSize {
		return Result{}, fmt.Errorf("rawudp: %s needs datagrams of at least %d bytes, not %d", mode, minICRCSize, size)
	}
	tx, err := listenIn(a, netip.AddrPortFrom(src, 0))
	if err != nil {
		return Result{}, err
	}
	defer tx.Close()
	rx, err := listenIn(b, netip.AddrPortFrom(dst, 4791))
	if err != nil {
		return Result{}, fmt.Errorf("rawudp: port 4791 on %v: %w", dst, err)
	}
	defer rx.Close()
	rc, err := rx.SyscallConn()
	if err != nil {
		return Result{}, err
	}
	rc.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
		if gso {
			unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1)
		}
	})
	var got, last atomic.Int64 // received, and when the last arrived (UnixNano)
	var bad atomic.Int64       // GSOICRC: segments whose ICRC did not match
	done := make(chan struct{})
	go func() {
		defer close(done)
		if mode == MMsg {
			recvBatches(rx, size, &got, &last)
			return
		}
		buf := make([]byte, 65536)
		oob := make([]byte, unix.CmsgSpace(4))
		var pl *placer
		if icrc {
			pl = newPlacer()
		}
		for {
			n, oobn, _, _, err := rx.ReadMsgUDP(buf, oob)
			if err != nil {
				return
			}
			g := max(n, 1) // the segment size: the whole read unless GRO joined several
			if gso {
				if s := groSize(oob[:oobn]); s > 0 {
					g = s
				}
			}
			segs := max((n+g-1)/g, 1)
			if icrc {
				bad.Add(int64(pl.place(buf[:n], g)))
			}
			got.Add(int64(segs))
			last.Store(time.Now().UnixNano())
		}
	}()
	to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 4791))
	per := 1
	var oob []byte
	if gso {
		per = min(64, 65000/size)
		oob = make([]byte, unix.CmsgSpace(2))
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
		h.SetLen(unix.CmsgLen(2))
		binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], uint16(size))
	}
	msg := make([]byte, size*per)
	var wb batchWriter
	if mode == MMsg {
		per = batch
		wb = newBatchWriter(tx, to, size)
	}
	if start != nil {
		start()
	}
	t0 := time.Now()
	sent := 0
	for sent < count {
		// Wait for the window to open; datagrams still missing after a
		// second are lost (the receiver's socket overflowed), and the
		// window moves on without them.
		for wait := time.Now(); int64(sent)-got.Load() > Window && time.Since(wait) < time.Second; {
			time.Sleep(20 * time.Microsecond)
		}
		k := min(per, count-sent)
		var err error
		switch mode {
		case MMsg:
			err = wb.write(k)
		case GSO, GSOICRC:
			if icrc {
				seal(msg[:k*size], size)
			}
			_, _, err = tx.WriteMsgUDP(msg[:k*size], oob, to)
		default:
			_, err = tx.WriteToUDP(msg[:size], to)
		}
		if err != nil {
			return Result{}, err
		}
		sent += k
	}
	for deadline := time.Now().Add(5 * time.Second); got.Load() < int64(count) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Microsecond)
	}
	rx.Close()
	<-done
	// Up to the last arrival, not the give-up: a lost datagram is one
	// fewer received, not five seconds more.
	if n := bad.Load(); n > 0 {
		return Result{}, fmt.Errorf("rawudp: %d of %d segments arrived with a wrong ICRC", n, got.Load())
	}
	r := Result{Datagrams: got.Load(), Sent: int64(sent), Elapsed: time.Since(t0)}
	if l := last.Load(); l != 0 {
		r.Elapsed = time.Unix(0, l).Sub(t0)
	}
	return r, nil
}

// groSize reads the segment size of a GRO-coalesced read.
func groSize(oob []byte) int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_UDP && m.Header.Type == unix.UDP_GRO && len(m.Data) >= 2 {
			if len(m.Data) >= 4 {
				return int(binary.NativeEndian.Uint32(m.Data))
			}
			return int(binary.NativeEndian.Uint16(m.Data))
		}
	}
	return 0
}
