package sim

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/bth/pcapfile"
	"github.com/goroce/goroce/inet"
)

// A real bottleneck, measured rather than simulated: the same Result read
// from two captures of RoCEv2 traffic taken on one host's clock, one
// where the packets enter the bottleneck (In) and one where they leave it
// (Out), as lab/cc-bottleneck.sh takes them around a kernel qdisc.
//
//   - A flow is the requests of one sender to one destination QP: IPv4
//     source and destination, BTH DestQP. Each flow's rate in a period is
//     the IP bytes of it that left the bottleneck then.
//   - The queue is estimated from the time each packet spent in the
//     bottleneck (matched by flow, PSN and how many times that PSN was
//     seen before): what exceeds the least time any packet spent is
//     waiting, and the bottleneck's rate turns it into bytes queued
//     ahead. The least time stands for forwarding with an empty queue.
//   - Marked counts the packets that left Congestion Experienced;
//     Dropped those that entered and never left; CNPs the CNPs seen going
//     back to each flow's sender, in either capture.

// CaptureConfig says how to read the captures.
type CaptureConfig struct {
	RateMbps float64       // the bottleneck's rate, for the queue estimate
	Sample   time.Duration // the period rates and queue are sampled over
}

// FlowKey names a flow.
type FlowKey struct {
	Src    netip.Addr // the sender's IPv4 address
	Dst    netip.Addr // the receiver's
	DestQP uint32     // the receiving QP (BTH DestQP)
}

// Captured is what FromCaptures read: the Result, and what a plot or a
// report of it needs besides.
type Captured struct {
	Result
	Flows    []FlowKey       // in the order of their first packet
	Starts   []time.Duration // each flow's first packet, from the first packet of all
	Ends     []time.Duration // and its last
	Duration time.Duration   // from the first packet of all to the last
	MinDelay time.Duration   // the least time a packet spent in the bottleneck
	Queued   []Queued        // each packet's queue estimate, in the egress capture's order
}

// Queued is the queue a packet found: the bytes ahead of it, estimated
// from its time in the bottleneck, as it left at At.
type Queued struct {
	At    time.Duration // when it left, from the first packet of all
	Bytes int           // bytes ahead of it
}

// QueueQuantile returns the q-quantile (0..1) of the queue estimates of
// the packets that left in (from, to], and how many did.
func (c *Captured) QueueQuantile(q float64, from, to time.Duration) (int, int) {
	var b []int
	for _, x := range c.Queued {
		if x.At > from && x.At <= to {
			b = append(b, x.Bytes)
		}
	}
	if len(b) == 0 {
		return 0, 0
	}
	sort.Ints(b)
	return b[min(int(q*float64(len(b))), len(b)-1)], len(b)
}

// roce is the part of a captured RoCEv2 packet the analysis reads.
type roce struct {
	at       time.Time
	src, dst netip.Addr
	op       bth.OpCode
	destQP   uint32
	psn      uint32
	ipLen    int
	ce       bool
}

var errNoRoCE = errors.New("no RoCEv2 packet in the capture")

// FromCaptures reads the bottleneck's two captures.
func FromCaptures(in, out []pcapfile.Packet, cfg CaptureConfig) (*Captured, error) {
	if cfg.RateMbps <= 0 || cfg.Sample <= 0 {
		return nil, fmt.Errorf("sim: capture: rate %.1f Mb/s and sample %v must be positive", cfg.RateMbps, cfg.Sample)
	}
	ins, outs := parseAll(in), parseAll(out)
	if len(outs) == 0 {
		return nil, fmt.Errorf("sim: the bottleneck's egress capture: %w", errNoRoCE)
	}
	type occ struct {
		k   FlowKey
		psn uint32
		n   int
	}
	entered := map[occ]time.Time{}
	inCount, outCount := occurrences{}, occurrences{}
	c := &Captured{}
	flowIdx := map[FlowKey]int{}
	t0 := outs[0].at
	if len(ins) > 0 && ins[0].at.Before(t0) {
		t0 = ins[0].at
	}
	var cnps []roce
	for _, p := range ins {
		if k, ok := request(p, &cnps); ok {
			entered[occ{k, p.psn, inCount.next(k, p.psn)}] = p.at
		}
	}
	type delay struct {
		at time.Duration
		d  time.Duration
	}
	var delays []delay
	bins := map[int]map[int]int{} // period -> flow -> bytes
	last := 0
	for _, p := range outs {
		k, ok := request(p, &cnps)
		if !ok {
			continue
		}
		f, ok := flowIdx[k]
		if !ok {
			f = len(c.Flows)
			flowIdx[k] = f
			c.Flows = append(c.Flows, k)
			c.Starts = append(c.Starts, p.at.Sub(t0))
			c.Ends = append(c.Ends, 0)
		}
		rel := p.at.Sub(t0)
		c.Ends[f] = rel
		i := int(rel / cfg.Sample)
		last = max(last, i)
		if bins[i] == nil {
			bins[i] = map[int]int{}
		}
		bins[i][f] += p.ipLen
		if p.ce {
			c.Marked++
		}
		if at, ok := entered[occ{k, p.psn, outCount.next(k, p.psn)}]; ok && !p.at.Before(at) {
			delays = append(delays, delay{rel, p.at.Sub(at)})
		}
		c.Duration = max(c.Duration, rel)
	}
	for k, m := range inCount {
		for psn, n := range m {
			c.Dropped += max(n-outCount[k][psn], 0)
		}
	}
	c.CNPs = make([]int, len(c.Flows))
	for _, p := range cnps {
		// A CNP goes back to the sender: the flow it answers is the one
		// from its destination to its source.
		for f, k := range c.Flows {
			if k.Src == p.dst && k.Dst == p.src {
				c.CNPs[f]++
				break
			}
		}
	}
	// The periods: rates in Mb/s, and the mean queue estimate of the
	// packets that left in each.
	c.Rates = make([][]float64, len(c.Flows))
	for f := range c.Rates {
		c.Rates[f] = make([]float64, last+1)
	}
	c.Times = make([]time.Duration, last+1)
	c.Queue = make([]int, last+1)
	for i := range c.Times {
		c.Times[i] = time.Duration(i+1) * cfg.Sample
		for f, b := range bins[i] {
			c.Rates[f][i] = float64(b) * 8 / cfg.Sample.Seconds() / 1e6
		}
	}
	if len(delays) > 0 {
		c.MinDelay = delays[0].d
		for _, d := range delays {
			c.MinDelay = min(c.MinDelay, d.d)
		}
		bytesPerSec := cfg.RateMbps * 1e6 / 8
		sum := make([]int, last+1)
		n := make([]int, last+1)
		for _, d := range delays {
			q := int((d.d - c.MinDelay).Seconds() * bytesPerSec)
			c.Queued = append(c.Queued, Queued{d.at, q})
			i := min(int(d.at/cfg.Sample), last)
			sum[i] += q
			n[i]++
		}
		for i := range c.Queue {
			if n[i] > 0 {
				c.Queue[i] = sum[i] / n[i]
			}
		}
	}
	return c, nil
}

// occurrences counts each flow's PSNs as they pass: a packet resent is
// its PSN's second occurrence, matched with the second to enter.
type occurrences map[FlowKey]map[uint32]int

// next returns how many times k's psn passed before, and counts this one.
func (o occurrences) next(k FlowKey, psn uint32) int {
	m := o[k]
	if m == nil {
		m = map[uint32]int{}
		o[k] = m
	}
	n := m[psn]
	m[psn]++
	return n
}

// request returns the flow p belongs to if it is a request packet; a CNP
// it keeps in cnps, and the rest (acknowledgements, responses) it skips.
func request(p roce, cnps *[]roce) (FlowKey, bool) {
	if p.op == bth.CNP {
		*cnps = append(*cnps, p)
		return FlowKey{}, false
	}
	if !p.op.Info().IsRequest() {
		return FlowKey{}, false
	}
	return FlowKey{p.src, p.dst, p.destQP}, true
}

// parseAll keeps the RoCEv2 packets of a capture (IPv4, UDP port 4791,
// a BTH), in capture order; the rest is not the bottleneck's business.
func parseAll(ps []pcapfile.Packet) []roce {
	var rs []roce
	for _, p := range ps {
		if r, ok := parse(p); ok {
			rs = append(rs, r)
		}
	}
	return rs
}

// parse reads one captured packet's IPv4, UDP and BTH headers; the
// capture may be cut short after them (tcpdump -s 128).
func parse(p pcapfile.Packet) (roce, bool) {
	b := p.Data
	off, et, err := bth.LinkHeader(bth.LinkType(p.LinkType), b)
	if err != nil || et != bth.EtherTypeIPv4 && et != 0 || len(b) < off+inet.IPv4HeaderLen {
		return roce{}, false
	}
	ip := inet.IPv4(b[off:])
	hl := ip.HeaderLen()
	if ip.Version() != 4 || hl < inet.IPv4HeaderLen || ip.Protocol() != 17 || ip.IsFragment() || len(ip) < hl+inet.UDPHeaderLen+bth.BTHLen {
		return roce{}, false
	}
	udp := inet.UDP(ip[hl:])
	if udp.DstPort() != 4791 {
		return roce{}, false
	}
	h := bth.BTH(ip[hl+inet.UDPHeaderLen:])
	return roce{
		at: p.Info.Timestamp, src: ip.Src(), dst: ip.Dst(),
		op: h.OpCode(), destQP: h.DestQP(), psn: uint32(h.PSN()),
		ipLen: int(ip.TotalLength()), ce: ip.TOS()&inet.ECNMask == inet.CE,
	}, true
}
