package rawudp

import (
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/goroce/goroce/internal/latency"
	"github.com/goroce/goroce/internal/netns"
)

// PingPong times count round trips of a size-byte datagram between a
// socket on a and an echoing socket on b (ports the kernel picks), one at
// a time: the kernel's plain UDP round trip, the yardstick for an RC
// ping-pong over the UDP link between the same addresses. Both ends block
// in the Go runtime's poller, as goroce's receive goroutines wait for
// their sockets. start, if set, is called just before the first send.
func PingPong(a, b netip.Addr, size, count int, start func()) (latency.Sample, error) {
	return PingPongIn(nil, nil, a, b, size, count, start)
}

// PingPongIn is PingPong with a's socket opened in namespace ea and b's
// in eb (nil: the caller's), as across a veth pair.
func PingPongIn(ea, eb *netns.End, a, b netip.Addr, size, count int, start func()) (latency.Sample, error) {
	return pingPong(ea, eb, a, b, size, 0, count, start)
}

// PingPongAcked is PingPong with a second, ack-byte datagram after each
// size-byte one (none if ack is 0), both ways, each side reading both
// before it answers:
// the datagrams an RC ping-pong moves (each SEND travels with the ACK of
// the one before it, the reply with the ACK of the SEND), through the
// same kernel path, without the engine.
func PingPongAcked(a, b netip.Addr, size, ack, count int, start func()) (latency.Sample, error) {
	return pingPong(nil, nil, a, b, size, ack, count, start)
}

func pingPong(ea, eb *netns.End, a, b netip.Addr, size, ack, count int, start func()) (latency.Sample, error) {
	ca, err := listenIn(ea, netip.AddrPortFrom(a, 0))
	if err != nil {
		return nil, err
	}
	defer ca.Close()
	cb, err := listenIn(eb, netip.AddrPortFrom(b, 0))
	if err != nil {
		return nil, err
	}
	defer cb.Close()
	echoed := make(chan error, 1)
	go func() {
		buf, abuf := make([]byte, size+1), make([]byte, ack+1)
		for range count {
			n, from, err := cb.ReadFromUDPAddrPort(buf)
			if err == nil && ack > 0 {
				_, _, err = cb.ReadFromUDPAddrPort(abuf)
			}
			if err == nil {
				_, err = cb.WriteToUDPAddrPort(buf[:n], from)
			}
			if err == nil && ack > 0 {
				_, err = cb.WriteToUDPAddrPort(abuf[:ack], from)
			}
			if err != nil {
				echoed <- err
				return
			}
		}
		echoed <- nil
	}()
	to := cb.LocalAddr().(*net.UDPAddr).AddrPort()
	msg, buf, amsg := make([]byte, size), make([]byte, size+1), make([]byte, ack+1)
	s := make(latency.Sample, 0, count)
	if start != nil {
		start()
	}
	for range count {
		t0 := time.Now()
		if _, err := ca.WriteToUDPAddrPort(msg, to); err != nil {
			return nil, err
		}
		if ack > 0 {
			if _, err := ca.WriteToUDPAddrPort(amsg[:ack], to); err != nil {
				return nil, err
			}
		}
		n, _, err := ca.ReadFromUDPAddrPort(buf)
		if err != nil {
			return nil, err
		}
		if n != size {
			return nil, errors.New("rawudp: the echo is not the datagram sent")
		}
		if ack > 0 {
			if n, _, err = ca.ReadFromUDPAddrPort(amsg); err != nil {
				return nil, err
			}
			if n != ack {
				return nil, errors.New("rawudp: the second echo is not the ack-sized datagram sent")
			}
		}
		s = append(s, time.Since(t0))
	}
	return s, <-echoed
}
