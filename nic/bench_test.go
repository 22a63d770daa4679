package nic_test

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/internal/rawudp"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/afpacket"
	"github.com/goroce/goroce/nic/afxdp"
	"github.com/goroce/goroce/nic/internal/linktest"
	"github.com/goroce/goroce/nic/udp"
)

// BenchmarkVeth moves RoCEv2 frames across a veth pair (MTU 4200) through
// each link and, in the same run, raw UDP (one sendto per packet, and UDP
// GSO to a GRO socket) so the ratio shows. Metrics: packets/s and goodput
// (payload bits/s). The sender stays within a window of the receiver, as
// an RC send queue would: 512 frames, below a veth's backlog of 1000.
//
//	go test -run '^$' -bench Veth -benchtime 200000x ./nic
func BenchmarkVeth(b *testing.B) {
	p := netns.New(b, netns.Config{MTU: 4200})
	for _, size := range []int{64, 1024, 4096} {
		b.Run("raw-sendto/"+itoa(size), func(b *testing.B) { benchRaw(b, p, size, false) })
		b.Run("raw-gso/"+itoa(size), func(b *testing.B) { benchRaw(b, p, size, true) })
		b.Run("udp/"+itoa(size), func(b *testing.B) {
			a := openBench(b, p.A, func() (nic.Link, error) { return udp.Open(udp.Config{Addr: p.A.IPv4}) })
			c := openBench(b, p.B, func() (nic.Link, error) { return udp.Open(udp.Config{Addr: p.B.IPv4}) })
			benchLink(b, a, c, p.B.IPv4, size)
		})
		b.Run("udp-nogso/"+itoa(size), func(b *testing.B) {
			a := openBench(b, p.A, func() (nic.Link, error) { return udp.Open(udp.Config{Addr: p.A.IPv4, NoGSO: true, NoGRO: true}) })
			c := openBench(b, p.B, func() (nic.Link, error) { return udp.Open(udp.Config{Addr: p.B.IPv4, NoGSO: true, NoGRO: true}) })
			benchLink(b, a, c, p.B.IPv4, size)
		})
		b.Run("afpacket/"+itoa(size), func(b *testing.B) {
			a := openBench(b, p.A, func() (nic.Link, error) { return afpacket.Open(afpacket.Config{Interface: p.A.Link}) })
			c := openBench(b, p.B, func() (nic.Link, error) { return afpacket.Open(afpacket.Config{Interface: p.B.Link}) })
			benchLink(b, a, c, p.B.IPv4, size)
		})
		for _, native := range []bool{false, true} {
			name := "afxdp-generic/"
			if native {
				name = "afxdp-native/"
			}
			b.Run(name+itoa(size), func(b *testing.B) {
				a := openBench(b, p.A, func() (nic.Link, error) { return afxdp.Open(afxdp.Config{Interface: p.A.Link, Native: native}) })
				c := openBench(b, p.B, func() (nic.Link, error) { return afxdp.Open(afxdp.Config{Interface: p.B.Link, Native: native}) })
				benchLink(b, a, c, p.B.IPv4, size)
			})
		}
	}
}

func itoa(n int) string {
	s := ""
	for ; n > 0; n /= 10 {
		s = string(rune('0'+n%10)) + s
	}
	return s
}

func openBench(b *testing.B, e *netns.End, open func() (nic.Link, error)) nic.Link {
	var l nic.Link
	if err := e.Do(func() (err error) { l, err = open(); return }); err != nil {
		b.Fatal(err)
	}
	return l
}

// benchLink sends b.N frames of size payload bytes from a to c.
// Both links are closed at the end: an AF_XDP queue takes one socket at a
// time and the benchmark function runs more than once.
func benchLink(b *testing.B, a, c nic.Link, dst netip.Addr, size int) {
	defer a.Close()
	defer c.Close()
	o := linktest.Outer(a, dst, 1)
	// Resolve the next hop (Ethernet links) before timing.
	for i := 0; i < 300; i++ {
		a.Send(linktest.Warmup(o))
		if a.Stats().TxPackets > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	frames := linktest.Frames(o, 64, size)
	var got atomic.Int64
	done := make(chan struct{})
	go func() {
		buf := make([]nic.Frame, 64)
		for {
			n, err := c.Recv(buf)
			if err != nil {
				close(done)
				return
			}
			got.Add(int64(n))
		}
	}()
	// Let warm-up frames arrive, then count from here.
	time.Sleep(20 * time.Millisecond)
	base := got.Load()
	const window = 512
	b.ResetTimer()
	start := time.Now()
	for sent := 0; sent < b.N; {
		for int64(sent)-(got.Load()-base) > window {
			time.Sleep(20 * time.Microsecond)
		}
		n := min(64, b.N-sent)
		a.Send(frames[:n])
		sent += n
	}
	deadline := time.Now().Add(5 * time.Second)
	for got.Load()-base < int64(b.N) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Microsecond)
	}
	el := time.Since(start)
	b.StopTimer()
	recv := got.Load() - base
	report(b, recv, size, el)
	if recv < int64(b.N)*99/100 {
		b.Logf("only %d of %d frames arrived (tx %+v rx %+v)", recv, b.N, a.Stats(), c.Stats())
	}
}

func report(b *testing.B, pkts int64, size int, el time.Duration) {
	b.ReportMetric(float64(pkts)/el.Seconds(), "pkt/s")
	b.ReportMetric(float64(pkts)*float64(size)*8/el.Seconds()/1e9, "Gbit/s")
	b.ReportMetric(0, "ns/op")
}

// benchRaw measures plain kernel UDP between the namespaces with the same
// UDP payload sizes as a RoCEv2 SEND (BTH + payload + ICRC): one sendto
// per packet, or UDP GSO (64 segments per sendmsg) to a GRO socket.
func benchRaw(b *testing.B, p *netns.Pair, size int, gso bool) {
	r, err := rawudp.Measure(p.A, p.B, p.A.IPv4, p.B.IPv4, 12+size+4, b.N, rawudp.SendtoOrGSO(gso), b.ResetTimer)
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	report(b, r.Datagrams, size, r.Elapsed)
}
