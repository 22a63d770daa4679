package fault

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/bth/pcapfile"
	"github.com/goroce/goroce/inet"
	"github.com/goroce/goroce/internal/manualclock"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/mem"
	"github.com/goroce/goroce/nic/tap"
)

// pipe is an in-memory nic.Link: Send records the datagrams, Recv hands
// out what the test queued with feed.
type pipe struct {
	mu     sync.Mutex
	cond   *sync.Cond
	sent   [][]byte
	in     [][]byte
	closed bool
}

func newPipe() *pipe { p := &pipe{}; p.cond = sync.NewCond(&p.mu); return p }

func (p *pipe) Send(fs []nic.Frame) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range fs {
		p.sent = append(p.sent, append([]byte(nil), f.Datagram()...))
	}
	return len(fs), nil
}

func (p *pipe) Recv(fs []nic.Frame) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.in) == 0 && !p.closed {
		p.cond.Wait()
	}
	if p.closed {
		return 0, nic.ErrClosed
	}
	fs[0] = nic.Frame{B: p.in[0]}
	p.in = p.in[1:]
	return 1, nil
}

func (p *pipe) feed(d []byte) {
	p.mu.Lock()
	p.in = append(p.in, d)
	p.mu.Unlock()
	p.cond.Broadcast()
}

func (p *pipe) taken() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sent
	p.sent = nil
	return s
}

func (p *pipe) Info() nic.Info            { return nic.Info{Name: "pipe", MTU: 4500} }
func (p *pipe) SrcPort(qpn uint32) uint16 { return nic.RoCEv2SrcPort(qpn) }
func (p *pipe) Stats() nic.Stats          { return nic.Stats{} }
func (p *pipe) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cond.Broadcast()
	return nil
}

// mk builds an IPv4 RoCEv2 datagram with a correct ICRC: op to qpn at psn
// with payload bytes of payload; extended headers zero but for rkey 0x1234
// in a RETH and syndrome/MSN 0/7 in an AETH.
func mk(op bth.OpCode, qpn, psn uint32, payload int) []byte {
	o := bth.Outer{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), SrcPort: 0xc000}
	d := bth.NewDraft(make([]byte, bth.DraftLen(&o, op, payload)), &o,
		bth.BTHFields{OpCode: op, PKey: bth.DefaultPKey, DestQP: qpn, PSN: bth.PSN(psn)}, payload)
	for i := range d.Payload() {
		d.Payload()[i] = byte(i)
	}
	if d.Info().Headers.Has(bth.ExtRETH) {
		binary.BigEndian.PutUint32(d.Ext(bth.ExtRETH)[8:], 0x1234)
	}
	if d.Info().Headers.Has(bth.ExtAETH) {
		d.Ext(bth.ExtAETH)[3] = 7
	}
	return d.Seal()
}

func frame(d []byte) nic.Frame {
	return nic.Frame{B: append(make([]byte, nic.Headroom), d...), Off: nic.Headroom}
}

func icrcOK(t *testing.T, d []byte) bool {
	t.Helper()
	f, err := bth.DecodeIP(d)
	if err != nil {
		t.Fatalf("datagram does not decode: %v", err)
	}
	return f.VerifyICRC()
}

func mustRule(t *testing.T, s string) Rule {
	t.Helper()
	r, err := ParseRule(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

const (
	writeFirst  = bth.OpCode(6)
	writeMiddle = bth.OpCode(7)
	writeLast   = bth.OpCode(8)
	ack         = bth.OpCode(17)
)

// send pushes datagrams through a fault link's tx side one Send each.
func send(t *testing.T, f *Link, ds ...[]byte) {
	t.Helper()
	for _, d := range ds {
		if n, err := f.Send([]nic.Frame{frame(d)}); n != 1 || err != nil {
			t.Fatalf("Send = %d, %v", n, err)
		}
	}
}

func TestRuleActions(t *testing.T) {
	msg := [][]byte{mk(writeFirst, 0x11, 100, 1024), mk(writeMiddle, 0x11, 101, 1024),
		mk(writeMiddle, 0x11, 102, 1024), mk(writeMiddle, 0x11, 103, 1024), mk(writeLast, 0x11, 104, 100)}
	for _, tc := range []struct {
		rule  string
		check func(t *testing.T, out [][]byte, s Stats)
	}{
		{"tx opcode=RDMA_WRITE_MIDDLE nth=2 drop", func(t *testing.T, out [][]byte, s Stats) {
			if len(out) != 4 || !bytes.Equal(out[2], msg[3]) || s.Tx.Lost != 1 {
				t.Fatalf("sent %d, lost %d; want PSN 102 gone", len(out), s.Tx.Lost)
			}
		}},
		{"psn=+1-2 dup", func(t *testing.T, out [][]byte, s Stats) {
			if len(out) != 7 || !bytes.Equal(out[1], out[2]) || !bytes.Equal(out[3], out[4]) || s.Tx.Duplicated != 2 || s.Rules[0] != 2 {
				t.Fatalf("sent %d, dup %d: want PSNs 101 and 102 twice", len(out), s.Tx.Duplicated)
			}
		}},
		{"tx psn=104 set psn=0x123 rkey=5", func(t *testing.T, out [][]byte, s Stats) {
			// The LAST has no RETH: the rule needs rkey, so it matches nothing.
			if len(out) != 5 || s.Rules[0] != 0 {
				t.Fatalf("rule fired %d times on a packet without a RETH", s.Rules[0])
			}
		}},
		{"opcode=RC_RDMA_WRITE_FIRST set psn=0x123 rkey=5 len=9", func(t *testing.T, out [][]byte, s Stats) {
			p, _ := parse(out[0])
			r := bth.RETH(p.ext(bth.ExtRETH))
			if p.bth.PSN() != 0x123 || r.RKey() != 5 || r.DMALen() != 9 || !icrcOK(t, out[0]) || s.Tx.Rewritten != 1 {
				t.Fatalf("PSN %d rkey %d len %d ICRC ok %v", p.bth.PSN(), r.RKey(), r.DMALen(), icrcOK(t, out[0]))
			}
			if !bytes.Equal(msg[0][:30], msg[0][:30]) || bth.BTH(msg[0][28:]).PSN() != 100 {
				t.Fatal("the caller's buffer was changed")
			}
		}},
		{"opcode=6 set padcnt=3 noicrc", func(t *testing.T, out [][]byte, s Stats) {
			p, _ := parse(out[0])
			if p.bth.PadCount() != 3 || icrcOK(t, out[0]) {
				t.Fatal("want PadCnt 3 and the old ICRC, now wrong")
			}
		}},
		{"nth=5 badicrc", func(t *testing.T, out [][]byte, s Stats) {
			if icrcOK(t, out[4]) || !icrcOK(t, out[3]) || s.Tx.BadICRC != 1 ||
				!bytes.Equal(out[4][:len(out[4])-4], msg[4][:len(msg[4])-4]) {
				t.Fatal("want the fifth packet's ICRC, and only it, wrong")
			}
		}},
		{"opcode=RDMA_WRITE_FIRST trunc=28", func(t *testing.T, out [][]byte, s Stats) {
			p, _ := parse(out[0])
			if len(p.f.RoCE()) != 28+4 || len(out[0]) != 20+8+32 || !icrcOK(t, out[0]) || s.Tx.Truncated != 1 ||
				binary.BigEndian.Uint16(out[0][2:]) != 60 || !inet.IPv4(out[0]).IsChecksumValid() {
				t.Fatalf("truncated datagram: %d bytes, ICRC ok %v", len(out[0]), icrcOK(t, out[0]))
			}
		}},
		{"size=100 trunc=12 noicrc", func(t *testing.T, out [][]byte, s Stats) {
			p, _ := parse(out[4])
			if len(p.f.RoCE()) != 16 || icrcOK(t, out[4]) || s.Rules[0] != 1 {
				t.Fatal("want the 100-byte LAST cut to its BTH, ICRC stale")
			}
		}},
		{"rx drop", func(t *testing.T, out [][]byte, s Stats) {
			if len(out) != 5 || s.Rules[0] != 0 {
				t.Fatal("an rx rule acted on tx")
			}
		}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			p := newPipe()
			f := Wrap(p, Config{Rules: []Rule{mustRule(t, tc.rule)}})
			send(t, f, msg...)
			tc.check(t, p.taken(), f.Faults())
		})
	}
}

// TestDelayOnClock holds a packet until the test's clock says so.
func TestDelayOnClock(t *testing.T) {
	clk := manualclock.New()
	p := newPipe()
	f := Wrap(p, Config{Clock: clk, Rules: []Rule{mustRule(t, "tx psn=+0 delay=5ms")}})
	a, b := mk(writeFirst, 1, 10, 8), mk(writeLast, 1, 11, 8)
	send(t, f, a, b)
	if out := p.taken(); len(out) != 1 || !bytes.Equal(out[0], b) {
		t.Fatalf("before the delay: sent %d packets, want only the second", len(out))
	}
	clk.Advance(5*time.Millisecond - 1)
	if out := p.taken(); len(out) != 0 {
		t.Fatal("released early")
	}
	clk.Advance(1)
	if out := p.taken(); len(out) != 1 || !bytes.Equal(out[0], a) {
		t.Fatal("not released on time")
	}
	if s := f.Faults(); s.Tx.Delayed != 1 || s.Rules[0] != 1 {
		t.Fatalf("counters %+v", s)
	}
}

// TestRxFaults runs rules on received packets, a delayed one delivered by
// the clock with nothing else arriving.
func TestRxFaults(t *testing.T) {
	clk := manualclock.New()
	p := newPipe()
	f := Wrap(p, Config{Clock: clk, Rules: []Rule{
		mustRule(t, "rx opcode=ACKNOWLEDGE nth=1 drop"),
		mustRule(t, "rx opcode=ACKNOWLEDGE nth=2 set syndrome=0x60 msn=3"),
		mustRule(t, "rx opcode=ACKNOWLEDGE nth=3 delay=1ms"),
	}})
	defer f.Close()
	recv := func() []byte {
		fs := make([]nic.Frame, 4)
		n, err := f.Recv(fs)
		if n != 1 || err != nil {
			return nil
		}
		return fs[0].Datagram()
	}
	for psn := range uint32(3) {
		p.feed(mk(ack, 5, psn, 0))
	}
	done := make(chan []byte)
	go func() { done <- recv() }()
	var got []byte
	select { // the first was dropped
	case got = <-done:
	case <-time.After(10 * time.Second): // an upper bound: the packet is there to take
		t.Fatal("the second ACK never came")
	}
	pk, _ := parse(got)
	a := bth.AETH(pk.ext(bth.ExtAETH))
	if pk.bth.PSN() != 1 || a.Syndrome() != 0x60 || a.MSN() != 3 || !icrcOK(t, got) {
		t.Fatalf("second ACK: PSN %d syndrome %#x MSN %d", pk.bth.PSN(), a.Syndrome(), a.MSN())
	}
	// The third waits for the clock. The pump may not have armed its
	// timer yet, so the clock moves until Recv gets it: the delivery is
	// the event waited for, not a span of time.
	go func() { done <- recv() }()
	deadline := time.Now().Add(10 * time.Second) // an upper bound, not the event
	for {
		if time.Now().After(deadline) {
			t.Fatal("the delayed ACK never came")
		}
		clk.Advance(time.Millisecond)
		select {
		case d := <-done:
			if pk, _ := parse(d); pk.bth.PSN() != 2 {
				t.Fatalf("third ACK has PSN %d", pk.bth.PSN())
			}
			if s := f.Faults(); s.Rx.Lost != 1 || s.Rx.Rewritten != 1 || s.Rx.Delayed != 1 || s.Rx.Packets != 3 {
				t.Fatalf("rx counters %+v", s.Rx)
			}
			return
		default:
			runtime.Gosched()
		}
	}
}

// TestSeedDeterminism: the same seed gives the same faults, another seed
// other ones, and each direction's rate is about what was asked.
func TestSeedDeterminism(t *testing.T) {
	run := func(seed uint64) ([][]byte, Stats) {
		p := newPipe()
		f := Wrap(p, Config{Seed: seed, Tx: mem.Faults{Loss: 0.1, Duplicate: 0.1, Corrupt: 0.1}})
		for i := range uint32(2000) {
			send(t, f, mk(writeMiddle, 1, i, 64))
		}
		return p.taken(), f.Faults()
	}
	a, sa := run(7)
	b, sb := run(7)
	_, sc := run(8)
	if len(a) != len(b) || sa.String() != sb.String() {
		t.Fatalf("same seed, different faults: %v / %v", sa, sb)
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			t.Fatalf("same seed, packet %d differs", i)
		}
	}
	if sa.String() == sc.String() {
		t.Fatalf("seeds 7 and 8 gave the same faults: %v", sa)
	}
	for _, v := range []uint64{sa.Tx.Lost, sa.Tx.Duplicated, sa.Tx.Corrupted} {
		if v < 140 || v > 260 { // 200 expected; 4 sigma is about 54
			t.Fatalf("a 10%% fault fired %d times in 2000: %v", v, sa)
		}
	}
	bad := 0
	for _, d := range a {
		if !icrcOK(t, d) {
			bad++
		}
	}
	// A duplicated corrupt packet is sent twice.
	if bad < int(sa.Tx.Corrupted) {
		t.Fatalf("%d packets with a bad ICRC, %d corrupted", bad, sa.Tx.Corrupted)
	}
	if !strings.HasPrefix(sa.String(), "faults: tx_lost=") {
		t.Fatalf("summary %q", sa)
	}
}

func TestCorruptFixICRC(t *testing.T) {
	p := newPipe()
	f := Wrap(p, Config{FixICRC: true, Tx: mem.Faults{Corrupt: 1}})
	d := mk(writeMiddle, 1, 1, 256)
	send(t, f, d)
	out := p.taken()
	if len(out) != 1 || bytes.Equal(out[0], d) || !icrcOK(t, out[0]) {
		t.Fatal("want one changed packet with a right ICRC")
	}
}

// TestCaptureNotes: around a pcapng tap, each packet a fault changed or
// duplicated carries a comment saying what; the others carry none.
func TestCaptureNotes(t *testing.T) {
	var buf bytes.Buffer
	p := newPipe()
	tapped, err := tap.New(p, &buf, true)
	if err != nil {
		t.Fatal(err)
	}
	f := Wrap(tapped, Config{Rules: []Rule{mustRule(t, "tx psn=+1 dup"), mustRule(t, "tx psn=+2 set psn=9")}})
	send(t, f, mk(writeFirst, 1, 10, 8), mk(writeMiddle, 1, 11, 8), mk(writeLast, 1, 12, 8))
	if err := tapped.Flush(); err != nil {
		t.Fatal(err)
	}
	r, err := pcapfile.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		pk, err := r.Next()
		if err != nil {
			break
		}
		got = append(got, strings.Join(pk.Comments, "|"))
	}
	want := []string{"", "goroce fault: rule 1 (tx psn=+1 dup)", "goroce fault: rule 1 (tx psn=+1 dup)",
		"goroce fault: rule 2 (tx psn=+2 set psn=9)"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("comments %q, want %q", got, want)
	}
}
