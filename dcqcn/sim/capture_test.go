package sim

import (
	"net/netip"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/bth/pcapfile"
	"github.com/goroce/goroce/inet"
)

var capT0 = time.Unix(2000, 0)

// captured builds a captured Ethernet frame of a RoCEv2 packet cut after
// its BTH, as tcpdump -s 128 keeps it, of ipLen bytes on the wire.
func captured(at time.Duration, src, dst string, op bth.OpCode, qpn, psn uint32, ipLen int, ce bool) pcapfile.Packet {
	b := make([]byte, 14+inet.IPv4HeaderLen+inet.UDPHeaderLen+bth.BTHLen)
	b[12], b[13] = 0x08, 0x00
	ip := inet.IPv4(b[14:])
	ip.SetVersionIHL(inet.IPv4HeaderLen)
	ip.SetTotalLength(uint16(ipLen))
	ip.SetProtocol(17)
	ip.SetSrc(netip.MustParseAddr(src))
	ip.SetDst(netip.MustParseAddr(dst))
	ip.SetTOS(inet.ECT0)
	if ce {
		ip.SetTOS(inet.CE)
	}
	u := b[14+inet.IPv4HeaderLen:]
	u[2], u[3] = 0x12, 0xb7 // 4791
	h := bth.BTH(u[inet.UDPHeaderLen:])
	h.SetOpCode(op)
	h.SetDestQP(qpn)
	h.SetPSN(bth.PSN(psn))
	return pcapfile.Packet{Data: b, LinkType: layers.LinkTypeEthernet,
		Info: gopacket.CaptureInfo{Timestamp: capT0.Add(at), CaptureLength: len(b), Length: 14 + ipLen}}
}

// Two flows through a bottleneck of 8 Mb/s (1000 bytes a millisecond):
// flow A alone, then both; one of B's packets is lost, one of A's is
// resent and leaves twice, two leave marked, and a CNP goes back to
// each sender. FromCaptures must find each of those.
func TestFromCaptures(t *testing.T) {
	const a, b, ra, rb = "10.0.1.2", "10.0.1.3", "10.0.2.2", "10.0.2.3"
	var in, out []pcapfile.Packet
	ms := time.Millisecond
	// A: 10 packets of 1000 bytes, one a millisecond from 0; each waits
	// 1 ms in the bottleneck but the fifth, which waits 3 (2 ms queued:
	// 2000 bytes at 8 Mb/s).
	for i := range 10 {
		d := ms
		if i == 4 {
			d = 3 * ms
		}
		at := time.Duration(i) * ms
		in = append(in, captured(at, a, ra, bth.RCWriteMiddle, 0x11, uint32(i), 1000, false))
		out = append(out, captured(at+d, a, ra, bth.RCWriteMiddle, 0x11, uint32(i), 1000, i == 6))
	}
	// A resends PSN 9: it enters and leaves a second time, 1 ms later.
	in = append(in, captured(12*ms, a, ra, bth.RCWriteMiddle, 0x11, 9, 1000, false))
	out = append(out, captured(13*ms, a, ra, bth.RCWriteMiddle, 0x11, 9, 1000, false))
	// B: 5 packets of 500 bytes from 10 ms; PSN 2 never leaves.
	for i := range 5 {
		at := 10*ms + time.Duration(i)*ms
		in = append(in, captured(at, b, rb, bth.RCWriteMiddle, 0x22, uint32(i), 500, false))
		if i != 2 {
			out = append(out, captured(at+ms, b, rb, bth.RCWriteMiddle, 0x22, uint32(i), 500, i == 3))
		}
	}
	// The CNPs back, and an ACK, which is no flow's.
	in = append(in, captured(12*ms, ra, a, bth.CNP, 0x99, 0, 60, false), captured(14*ms, rb, b, bth.CNP, 0x98, 0, 60, false),
		captured(14*ms, rb, b, bth.RCAcknowledge, 0x98, 4, 60, false))
	sortByTime(in)
	sortByTime(out)

	c, err := FromCaptures(in, out, CaptureConfig{RateMbps: 8, Sample: 5 * ms})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Flows) != 2 || c.Flows[0] != (FlowKey{netip.MustParseAddr(a), netip.MustParseAddr(ra), 0x11}) || c.Flows[1].DestQP != 0x22 {
		t.Fatalf("flows %v", c.Flows)
	}
	if c.Starts[0] != ms || c.Starts[1] != 11*ms || c.Ends[0] != 13*ms || c.Ends[1] != 15*ms {
		t.Fatalf("starts %v ends %v, want [1ms 11ms] [13ms 15ms] (from the first packet of all)", c.Starts, c.Ends)
	}
	if c.Marked != 2 || c.Dropped != 1 || c.CNPs[0] != 1 || c.CNPs[1] != 1 {
		t.Fatalf("marked %d dropped %d CNPs %v, want 2, 1, [1 1]", c.Marked, c.Dropped, c.CNPs)
	}
	if c.MinDelay != ms {
		t.Fatalf("least time in the bottleneck %v, want 1ms", c.MinDelay)
	}
	// Period 0 (0-5 ms from the first packet, at 0) holds A's packets
	// that left at 1..4 ms: 4000 bytes in 5 ms, 6.4 Mb/s.
	if got := c.Rates[0][0]; got < 6.39 || got > 6.41 {
		t.Fatalf("flow A's rate in the first period %.2f Mb/s, want 6.4", got)
	}
	if len(c.Queued) != 10+1+4 {
		t.Fatalf("%d packets matched, want 15 (B's lost one unmatched)", len(c.Queued))
	}
	// The fifth of A waited 2 ms more than the least: 2000 bytes ahead.
	var found bool
	for _, q := range c.Queued {
		if q.At == 7*ms && q.Bytes == 2000 {
			found = true
		} else if q.Bytes != 0 {
			t.Fatalf("a packet leaving at %v met %d bytes, want 0", q.At, q.Bytes)
		}
	}
	if !found {
		t.Fatal("the packet held 3 ms is not estimated at 2000 bytes")
	}
	if p99, n := c.QueueQuantile(0.99, 0, time.Second); p99 != 2000 || n != 15 {
		t.Fatalf("p99 %d of %d, want 2000 of 15", p99, n)
	}
	if _, err := FromCaptures(in, nil, CaptureConfig{RateMbps: 8, Sample: ms}); err == nil {
		t.Fatal("an empty egress capture read")
	}
	if _, err := FromCaptures(in, out, CaptureConfig{RateMbps: 0, Sample: ms}); err == nil {
		t.Fatal("a bottleneck of 0 Mb/s accepted")
	}
}

func sortByTime(ps []pcapfile.Packet) {
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && ps[j].Info.Timestamp.Before(ps[j-1].Info.Timestamp); j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
}
