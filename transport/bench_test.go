package transport_test

import (
	"net/netip"

	"github.com/goroce/goroce/internal/testharness"

	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/latency"
	"github.com/goroce/goroce/internal/rawudp"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/nic/udp"
	"github.com/goroce/goroce/transport"
)

// BenchmarkEngine measures the engine alone: two devices over the
// in-memory link (no system call, no kernel copy), RC at MTU 4096, a
// window of messages in flight. Gbit/s is payload goodput; pkt/s counts
// request packets.
func BenchmarkEngine(b *testing.B) {
	for _, op := range []transport.WROpcode{transport.WRRDMAWrite, transport.WRSend, transport.WRRDMARead} {
		for _, size := range []int{64, 4096, 65536} {
			b.Run(fmt.Sprintf("%v/%d", op, size), func(b *testing.B) {
				benchOp(b, op, size)
			})
		}
	}
}

func benchOp(b *testing.B, op transport.WROpcode, size int) {
	const depth = 64
	a, p, _ := testharness.MemPair(b, testharness.Options{MTU: transport.MTU4096, BufSize: depth * size, SQDepth: depth, RQDepth: depth,
		CQDepth: 4 * depth, Window: 512})
	// The requests are reused, as a program's would be (Post copies them),
	// so that allocs/op is the engine's own.
	var sendSGL, recvSGL [1]transport.SGE
	swr := transport.SendWR{Opcode: op, Flags: transport.Signaled, SGL: sendSGL[:], RKey: p.MR.RKey()}
	rwr := transport.RecvWR{SGL: recvSGL[:]}
	post := func(i int) {
		slot := (i % depth) * size
		if op == transport.WRSend {
			recvSGL[0] = p.MR.SGE(slot, size)
			testharness.Must(b, p.QP.PostRecv(&rwr))
		}
		sendSGL[0] = a.MR.SGE(slot, size)
		swr.RemoteAddr = p.MR.Addr() + uint64(slot)
		testharness.Must(b, a.QP.PostSend(&swr))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wc := make([]transport.WC, depth)
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	inflight, posted, done := 0, 0, 0
	for done < b.N {
		for inflight < depth && posted < b.N {
			post(posted)
			posted++
			inflight++
		}
		n, err := a.SCQ.PollWait(ctx, wc)
		if err != nil {
			b.Fatal(err)
		}
		for _, w := range wc[:n] {
			if w.Status != transport.Success {
				b.Fatal(w)
			}
		}
		if op == transport.WRSend {
			for got := 0; got < n; {
				m, err := p.RCQ.PollWait(ctx, wc[:n-got])
				if err != nil {
					b.Fatal(err)
				}
				got += m
			}
		}
		done += n
		inflight -= n
	}
	el := time.Since(start).Seconds()
	pkts := (size + 4095) / 4096
	b.ReportMetric(float64(b.N)*float64(size)*8/el/1e9, "Gbit/s")
	b.ReportMetric(float64(b.N*pkts)/el, "pkt/s")
}

// BenchmarkPingPong measures RC round-trip latency: a 64-byte SEND each
// way per iteration, receives posted ahead (as rc_pingpong posts rx_depth),
// completions awaited with PollWait. Over the in-memory link it is the
// engine's cost; over UDP on loopback (udp) and across a veth pair between
// two namespaces (veth) it adds the kernel and the wake-ups of the receive
// goroutines. raw-udp is the kernel's plain UDP round trip between the
// same two addresses in the same run, with a datagram the size of that
// SEND's RoCE payload (BTH, 64 bytes, ICRC), and the veth rows measure
// their own across the veth (logged). Each reports p50 and p99 of the
// round trips beside the mean, and the udp and veth rows their p50 over
// raw's (p50-over-raw-usec; issue 13's target is at most 5).
// raw-udp-acked moves the datagrams an RC ping-pong moves, each payload
// followed by an ACK-sized datagram both ways (the SEND with the ACK of
// the reply before it, the reply with the ACK of the SEND), through the
// same kernel path without the engine; the udp rows also report their p50
// over it (p50-over-raw-acked-usec): the engine's own share.
//
// The afxdp rows run across the same veth pair over AF_XDP links (XDP in
// generic mode), whose polls read the rx ring without a system call.
//
// The -busy rows busy-poll the links and poll the CQs in a loop; the
// -poll rows poll the CQs in a loop on devices in poll mode
// (Options.PollProgress), whose receive goroutines sleep while the
// polling goroutines handle what arrives.
//
//	go test -run '^$' -bench PingPong -benchtime 20000x ./transport
//
// busyPoll is the -busy rows' budget: longer than a round trip, so a
// receive spins from one packet to the next.
const busyPoll = 200 * time.Microsecond

func BenchmarkPingPong(b *testing.B) {
	const roceSend64 = bth.BTHLen + 64 + bth.ICRCLen
	xAddr, yAddr := "127.0.7.1", "127.0.7.2"
	// The raw round trips: plain (ack 0), and with an ACK-sized datagram
	// after each payload (raw-udp-acked).
	const roceAck = bth.BTHLen + bth.AETHLen + bth.ICRCLen
	var rawP50, ackedP50 time.Duration
	raw := func(b *testing.B, ack, count int, start func()) latency.Sample {
		s, err := rawudp.PingPongAcked(netip.MustParseAddr(xAddr), netip.MustParseAddr(yAddr), roceSend64, ack, count, start)
		if err != nil {
			b.Fatal(err)
		}
		if ack == 0 {
			rawP50 = s.Quantile(0.5)
		} else {
			ackedP50 = s.Quantile(0.5)
		}
		return s
	}
	for _, ack := range []int{0, roceAck} {
		name := "raw-udp"
		if ack > 0 {
			name = "raw-udp-acked"
		}
		b.Run(name, func(b *testing.B) {
			s := raw(b, ack, b.N, b.ResetTimer)
			b.StopTimer()
			s.Report(b)
		})
	}
	var veth *testharness.Net // made once, for the veth rows, and kept until the end
	var vethRawP50 time.Duration
	outer := b
	for _, link := range []string{"mem", "mem-busy", "mem-poll", "udp", "udp-busy", "udp-poll", "udp-multi-poll", "veth", "veth-poll", "afxdp", "afxdp-poll"} {
		b.Run(link, func(b *testing.B) {
			// -busy: the links busy-poll and the CQs are polled in a loop;
			// -poll: the CQs polled in a loop by devices in poll mode, so
			// that the polling goroutine handles what arrives
			// (PollProgress), and the links' receive goroutines sleep.
			poll := strings.HasSuffix(link, "-poll")
			busy := strings.HasSuffix(link, "-busy") || poll
			o := testharness.Options{PollProgress: poll}
			if busy && !poll {
				o.BusyPoll = busyPoll
			}
			o.MemDefaults()
			var x, y *testharness.Peer
			switch {
			case strings.HasPrefix(link, "mem"):
				net := mem.NewNet(1)
				x, y = testharness.NewMemPeer(b, net, "10.0.0.1", o), testharness.NewMemPeer(b, net, "10.0.0.2", o)
			case strings.HasPrefix(link, "udp-multi"):
				// Each device on two addresses (nic.Multi), as
				// libgoroce.so binds every GID; the traffic on the first.
				x, y = udpSide(b, xAddr, &o, "127.0.7.3"), udpSide(b, yAddr, &o, "127.0.7.4")
			case strings.HasPrefix(link, "udp"):
				x, y = udpSide(b, xAddr, &o), udpSide(b, yAddr, &o)
			default: // across a veth pair between two namespaces
				if veth == nil {
					veth = testharness.NewNet(outer, testharness.Config{MTU: testharness.VethMTU(transport.MTU1024), Offloads: true})
					s, err := rawudp.PingPongIn(veth.A, veth.B, veth.A.IPv4, veth.B.IPv4, roceSend64, 5000, nil)
					if err != nil {
						b.Fatal(err)
					}
					vethRawP50 = s.Quantile(0.5)
					b.Logf("raw UDP across the veth: p50 %v p99 %v", s.Quantile(0.5), s.Quantile(0.99))
				}
				k := testharness.UDP
				if strings.HasPrefix(link, "afxdp") {
					k = testharness.AFXDPGeneric
				}
				x, y = testharness.Pair(b, veth, k, testharness.IPv4, o)
			}
			if !strings.HasPrefix(link, "veth") && !strings.HasPrefix(link, "afxdp") {
				testharness.ConnectQP(b, x, y, o, 1, 2)
				testharness.ConnectQP(b, y, x, o, 2, 1)
			}
			ctx := context.Background()
			wait1 := func(c *transport.CQ) {
				var wc [1]transport.WC
				var err error
				if busy {
					n := 0
					for n == 0 && err == nil {
						if n, err = c.Poll(wc[:]); n == 0 {
							runtime.Gosched()
						}
					}
				} else {
					_, err = c.PollWait(ctx, wc[:])
				}
				if err != nil || wc[0].Status != transport.Success {
					b.Fatal(err, wc[0])
				}
			}
			// Each side's requests are built once and reused (Post copies
			// them), so that allocs/op is the engine's own.
			xr := &transport.RecvWR{SGL: []transport.SGE{x.MR.SGE(0, 64)}}
			yr := &transport.RecvWR{SGL: []transport.SGE{y.MR.SGE(0, 64)}}
			sends := map[*testharness.Peer]*transport.SendWR{
				x: {Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{x.MR.SGE(0, 64)}},
				y: {Opcode: transport.WRSend, Flags: transport.Signaled, SGL: []transport.SGE{y.MR.SGE(0, 64)}},
			}
			for range 8 {
				testharness.Must(b, x.QP.PostRecv(xr))
				testharness.Must(b, y.QP.PostRecv(yr))
			}
			send := func(s *testharness.Peer) { testharness.Must(b, s.QP.PostSend(sends[s])) }
			done := make(chan struct{})
			go func() {
				defer close(done)
				for range b.N {
					wait1(y.RCQ)
					testharness.Must(b, y.QP.PostRecv(yr))
					send(y)
					wait1(y.SCQ)
				}
			}()
			rtt := make(latency.Sample, 0, b.N)
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				send(x)
				wait1(x.SCQ)
				wait1(x.RCQ)
				rtt = append(rtt, time.Since(t0))
				testharness.Must(b, x.QP.PostRecv(xr))
			}
			<-done
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "usec/iter")
			rtt.Report(b)
			switch {
			case strings.HasPrefix(link, "udp"):
				if rawP50 == 0 { // raw-udp was not selected: measure it now
					raw(b, 0, 2000, nil)
				}
				if ackedP50 == 0 {
					raw(b, roceAck, 2000, nil)
				}
				b.ReportMetric(float64(rtt.Quantile(0.5)-rawP50)/float64(time.Microsecond), "p50-over-raw-usec")
				b.ReportMetric(float64(rtt.Quantile(0.5)-ackedP50)/float64(time.Microsecond), "p50-over-raw-acked-usec")
			case strings.HasPrefix(link, "veth"), strings.HasPrefix(link, "afxdp"):
				b.ReportMetric(float64(rtt.Quantile(0.5)-vethRawP50)/float64(time.Microsecond), "p50-over-raw-usec")
			}
		})
	}
}

// udpSide opens one end over the UDP link on a loopback address, and on
// more addresses joined by nic.Multi.
func udpSide(t testing.TB, addr string, o *testharness.Options, more ...string) *testharness.Peer {
	ad := netip.MustParseAddr(addr)
	var l nic.Link
	var err error
	l, err = udp.Open(udp.Config{Addr: ad, BusyPoll: o.BusyPoll})
	testharness.Must(t, err)
	if len(more) > 0 {
		links := []nic.Link{l}
		for _, a := range more {
			m, err := udp.Open(udp.Config{Addr: netip.MustParseAddr(a), BusyPoll: o.BusyPoll})
			testharness.Must(t, err)
			links = append(links, m)
		}
		l, err = nic.NewMulti(links...)
		testharness.Must(t, err)
	}
	d, err := transport.Open(l, transport.Options{PollProgress: o.PollProgress})
	testharness.Must(t, err)
	t.Cleanup(func() { d.Close() })
	s := &testharness.Peer{Dev: d, Addr: ad, PD: d.AllocPD(), SCQ: d.CreateCQ(64), RCQ: d.CreateCQ(64), Buf: make([]byte, 4096)}
	s.MR, err = s.PD.Register(s.Buf, o.Access)
	testharness.Must(t, err)
	s.QP, err = d.CreateQP(s.PD, transport.QPInitAttr{Type: transport.RC, SendCQ: s.SCQ, RecvCQ: s.RCQ,
		Cap: transport.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	testharness.Must(t, err)
	return s
}
