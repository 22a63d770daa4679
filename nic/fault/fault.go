// Package fault makes a device misbehave on purpose: a nic.Link wrapper
// that loses, duplicates, reorders, delays and corrupts the RoCEv2
// packets the device sends (tx) and receives (rx), at random from a seed
// (mem.Faults, the model mem.Net uses too) and by rules that pick packets
// by direction, opcode, QPN, PSN, size and occurrence, then drop,
// duplicate, delay, rewrite, spoil or cut them short.
//
// Unlike nic/impair, which forwards between two interfaces, it sits inside
// the process, so every roced tool can take it (--loss, --fault-rule) and
// a test can script a peer with it. Held packets wait on a clock.Clock, so a
// test decides when they leave.
//
// Wrapped around a pcap tap, the capture shows what crossed the wire: tx
// packets after the faults, each one a fault changed, duplicated or held
// back with a pcapng comment saying so; rx packets before the faults.
package fault

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/clock"
	"github.com/goroce/goroce/inet"
	"github.com/goroce/goroce/nic"
	"github.com/goroce/goroce/nic/mem"
)

// Config is what a Link does to packets.
type Config struct {
	Tx, Rx mem.Faults // random faults of each direction
	// FixICRC gives a randomly corrupted packet a correct ICRC, so the
	// receiver meets a wrong field rather than an ICRC error.
	FixICRC bool
	Seed    uint64 // same seed, same packets in the same order: same faults
	Rules   []Rule // applied in order, before the random faults
	// Clock times delayed and reordered packets; nil is the wall clock.
	Clock clock.Clock
	// Log, if set, is told of every rule that fires (one line, no newline).
	Log func(string)
}

// Active reports whether the configuration does anything.
func (c *Config) Active() bool {
	return c.Tx != (mem.Faults{}) || c.Rx != (mem.Faults{}) || len(c.Rules) > 0
}

// DirStats count the faults that fired in one direction.
type DirStats struct {
	Packets    uint64 // RoCEv2 packets seen
	Lost       uint64 // dropped (random or by a rule)
	Duplicated uint64 // sent twice
	Reordered  uint64 // held back behind later ones
	Delayed    uint64 // held for a delay (random or by a rule)
	Corrupted  uint64 // a random bit flipped
	Rewritten  uint64 // a field set by a rule
	BadICRC    uint64 // ICRC spoiled by a rule
	Truncated  uint64 // cut short by a rule
	MarkedCE   uint64 // marked Congestion Experienced by a rule
}

// Stats are a Link's fault counters.
type Stats struct {
	Tx, Rx DirStats // the faults of each direction
	Rules  []uint64 // how often each rule fired, in Config.Rules order
}

// String is the one-line summary tools print at the end: "faults: " and
// each count that is not zero.
func (s Stats) String() string {
	var b strings.Builder
	b.WriteString("faults:")
	n := 0
	for _, c := range s.List() {
		name := strings.TrimPrefix(c.Name, "fault_")
		if c.Value != 0 || strings.HasPrefix(name, "rule") {
			fmt.Fprintf(&b, " %s=%d", name, c.Value)
			n++
		}
	}
	if n == 0 {
		b.WriteString(" none fired")
	}
	return b.String()
}

// List names the counters, for a stats socket (roced stats): fault_tx_lost
// and the like, then fault_ruleN.
func (s Stats) List() []nic.Counter {
	var out []nic.Counter
	for _, d := range []struct {
		name string
		s    DirStats
	}{{"tx", s.Tx}, {"rx", s.Rx}} {
		for _, c := range []struct {
			name string
			v    uint64
		}{{"lost", d.s.Lost}, {"duplicated", d.s.Duplicated}, {"reordered", d.s.Reordered},
			{"delayed", d.s.Delayed}, {"corrupted", d.s.Corrupted}, {"rewritten", d.s.Rewritten},
			{"badicrc", d.s.BadICRC}, {"truncated", d.s.Truncated}, {"marked_ce", d.s.MarkedCE}} {
			out = append(out, nic.Counter{Name: "fault_" + d.name + "_" + c.name, Value: c.v})
		}
	}
	for i, v := range s.Rules {
		out = append(out, nic.Counter{Name: fmt.Sprintf("fault_rule%d", i+1), Value: v})
	}
	return out
}

type dirCounters struct {
	packets, lost, duplicated, reordered, delayed, corrupted, rewritten, badICRC, truncated atomic.Uint64
	markedCE                                                                                atomic.Uint64
}

func (c *dirCounters) snapshot() DirStats {
	return DirStats{c.packets.Load(), c.lost.Load(), c.duplicated.Load(), c.reordered.Load(), c.delayed.Load(),
		c.corrupted.Load(), c.rewritten.Load(), c.badICRC.Load(), c.truncated.Load(), c.markedCE.Load()}
}

// direction is one way's faults and decision state.
type direction struct {
	dir    Dir
	faults mem.Faults
	rng    *rand.Rand
	ctr    dirCounters
}

// ruleState is what a rule remembers between packets.
type ruleState struct {
	seen  int               // packets that matched so far (for nth)
	base  map[uint32]uint32 // first PSN per destination QP (for relative PSNs)
	fired atomic.Uint64
}

// Link is a nic.Link with faults.
type Link struct {
	nic.Link
	cfg   Config
	clock clock.Clock
	dirs  [2]*direction // tx, rx
	mu    sync.Mutex    // the draws and the rules' state: one packet's fate at a time
	rules []ruleState

	// Received packets wait in rxq for Recv: a pump reads the inner link,
	// so a delayed packet is delivered when its time comes even if
	// nothing else arrives.
	rxMu   sync.Mutex
	rxCond *sync.Cond
	rxq    [][]byte
	rxLent [][]byte
	rxErr  error
	pump   sync.Once
}

// Wrap returns l with the faults of cfg. The Link owns l: closing it
// closes l.
func Wrap(l nic.Link, cfg Config) *Link {
	f := &Link{Link: l, cfg: cfg, clock: cfg.Clock, rules: make([]ruleState, len(cfg.Rules))}
	if f.clock == nil {
		f.clock = clock.Real{}
	}
	// Each direction draws from its own stream, so the faults of one do
	// not move with the traffic of the other.
	f.dirs[0] = &direction{dir: Tx, faults: cfg.Tx, rng: rand.New(rand.NewPCG(cfg.Seed, 1))}
	f.dirs[1] = &direction{dir: Rx, faults: cfg.Rx, rng: rand.New(rand.NewPCG(cfg.Seed, 2))}
	for i := range f.rules {
		f.rules[i].base = map[uint32]uint32{}
	}
	f.rxCond = sync.NewCond(&f.rxMu)
	return f
}

// Faults returns the counters of the faults that fired.
func (f *Link) Faults() Stats {
	s := Stats{Tx: f.dirs[0].ctr.snapshot(), Rx: f.dirs[1].ctr.snapshot()}
	for i := range f.rules {
		s.Rules = append(s.Rules, f.rules[i].fired.Load())
	}
	return s
}

// logFirings is how many firings of each rule Config.Log hears of.
const logFirings = 10

// fate is what happens to one packet.
type fate struct {
	drop   bool
	copies int
	delay  time.Duration
	out    []byte   // the packet to send: the original, or a changed copy
	note   []string // what was done to it, for a capture's comment
}

// decide applies the rules and the random faults to datagram d.
func (f *Link) decide(dir *direction, d []byte) fate {
	ft := fate{copies: 1, out: d}
	p, ok := parse(d)
	if !ok {
		return ft // not RoCEv2: not ours to harm
	}
	dir.ctr.packets.Add(1)
	own := false // ft.out is a copy this packet owns
	mutable := func() {
		if !own {
			ft.out = append([]byte(nil), ft.out...)
			p, _ = parse(ft.out)
			own = true
		}
	}
	f.mu.Lock()
	for i := range f.cfg.Rules {
		r := &f.cfg.Rules[i]
		if !f.match(i, r, dir.dir, p) {
			continue
		}
		// The first firings of a rule are logged, the rest only counted: a
		// rule without nth may fire on every packet.
		if fired := f.rules[i].fired.Add(1); f.cfg.Log != nil && fired <= logFirings {
			f.cfg.Log(fmt.Sprintf("fault: rule %d (%s) fired on %s %s QP 0x%x PSN %d", i+1, r.Text,
				dir.dir, p.bth.OpCode(), p.bth.DestQP(), p.bth.PSN()))
		}
		ft.note = append(ft.note, fmt.Sprintf("rule %d (%s)", i+1, r.Text))
		switch r.Action {
		case Drop:
			ft.drop = true
		case Duplicate:
			ft.copies = 2
		case Delay:
			ft.delay += r.Delay
		case Rewrite:
			mutable()
			for _, s := range r.Set {
				p.put(s.Field, s.Value)
			}
			if !r.KeepICRC {
				p.f.PutICRC()
			}
			dir.ctr.rewritten.Add(1)
		case SpoilICRC:
			mutable()
			r := p.f.RoCE()
			for j := len(r) - bth.ICRCLen; j < len(r); j++ {
				r[j] ^= 0xff
			}
			dir.ctr.badICRC.Add(1)
		case Truncate:
			mutable()
			ft.out = truncate(ft.out, p, r.Trunc)
			p, _ = parse(ft.out)
			if !r.KeepICRC {
				p.f.PutICRC()
			}
			dir.ctr.truncated.Add(1)
		case MarkCE:
			mutable()
			if inet.SetECN(p.f.L3(), inet.CE) {
				dir.ctr.markedCE.Add(1)
			}
		}
	}
	// The random faults: every RoCEv2 packet draws, whatever the rules
	// did, so a rule does not shift the random fate of the packets after
	// it.
	dr := dir.faults.Draw(dir.rng, len(p.f.RoCE()))
	f.mu.Unlock()

	if ft.drop || dr.Lose {
		dir.ctr.lost.Add(1)
		ft.drop = true
		return ft
	}
	if dr.Corrupt {
		mutable()
		r := p.f.RoCE()
		bit := dr.Bit
		if f.cfg.FixICRC {
			bit %= (len(r) - bth.ICRCLen) * 8
		}
		r[bit/8] ^= 1 << (bit % 8)
		if f.cfg.FixICRC {
			p.f.PutICRC()
		}
		dir.ctr.corrupted.Add(1)
		ft.note = append(ft.note, fmt.Sprintf("bit %d flipped", bit))
	}
	if dr.Duplicate {
		ft.copies = 2
		ft.note = append(ft.note, "duplicated")
	}
	if ft.copies > 1 {
		dir.ctr.duplicated.Add(1)
	}
	if ft.delay > 0 || dir.faults.Delay > 0 {
		dir.ctr.delayed.Add(1)
		ft.note = append(ft.note, "delayed")
	}
	ft.delay += dir.faults.Delay
	if dr.Reorder {
		rd := dir.faults.ReorderDelay
		if rd == 0 {
			rd = 300 * time.Microsecond
		}
		ft.delay += rd
		dir.ctr.reordered.Add(1)
		ft.note = append(ft.note, "reordered")
	}
	if ft.delay > 0 && !own {
		ft.out = append([]byte(nil), ft.out...) // the caller reuses its buffer
	}
	return ft
}

// match reports whether rule i matches packet p going dir, counting it
// towards nth. Called with f.mu held.
func (f *Link) match(i int, r *Rule, dir Dir, p pkt) bool {
	if r.Dir&dir == 0 {
		return false
	}
	qpn := p.bth.DestQP()
	if r.QPN != nil && *r.QPN != qpn {
		return false
	}
	st := &f.rules[i]
	psn := uint32(p.bth.PSN())
	base, ok := st.base[qpn]
	if !ok {
		st.base[qpn], base = psn, psn
	}
	if r.PSN != nil {
		want := psn
		if r.PSN.Relative {
			want = (psn - base) & (1<<24 - 1)
		}
		if want < r.PSN.Lo || want > r.PSN.Hi {
			return false
		}
	}
	if r.Opcodes != nil {
		found := false
		for _, o := range r.Opcodes {
			found = found || o == p.bth.OpCode()
		}
		if !found {
			return false
		}
	}
	if r.Size != nil {
		if n := p.payload(); n < r.Size[0] || n > r.Size[1] {
			return false
		}
	}
	if r.Action == Rewrite {
		for _, s := range r.Set {
			if p.field(s.Field) == nil {
				return false // the packet has no such field: not this rule's packet
			}
		}
	}
	st.seen++
	return r.Nth == 0 || st.seen == r.Nth
}

// noter is a link that can record a comment with what it sends: the pcap
// tap, which then marks in the capture what the faults did.
type noter interface {
	SendNoted(frames []nic.Frame, note string) (int, error)
}

// Send implements nic.Link: each frame meets its fate, then what is left
// goes to the wrapped link in order.
func (f *Link) Send(frames []nic.Frame) (int, error) {
	out := make([]nic.Frame, 0, len(frames)+1)
	nt, _ := f.Link.(noter)
	flush := func() error {
		if len(out) == 0 {
			return nil
		}
		_, err := f.Link.Send(out)
		out = out[:0]
		return err
	}
	for _, fr := range frames {
		ft := f.decide(f.dirs[0], fr.Datagram())
		if ft.drop {
			continue
		}
		if ft.delay > 0 {
			f.clock.AfterFunc(ft.delay, func() {
				for range ft.copies {
					f.sendOne(nt, headroom(ft.out), ft.note)
				}
			})
			continue
		}
		if nt != nil && len(ft.note) > 0 {
			if err := flush(); err != nil {
				return 0, err
			}
			for range ft.copies {
				if err := f.sendOne(nt, headroom(ft.out), ft.note); err != nil {
					return 0, err
				}
			}
			continue
		}
		for range ft.copies {
			if same(ft.out, fr.Datagram()) {
				out = append(out, fr)
			} else {
				out = append(out, headroom(ft.out))
			}
		}
	}
	if err := flush(); err != nil {
		return 0, err
	}
	return len(frames), nil
}

// sendOne sends one frame, with a note in the capture if there is one.
func (f *Link) sendOne(nt noter, fr nic.Frame, note []string) error {
	var err error
	if nt != nil && len(note) > 0 {
		_, err = nt.SendNoted([]nic.Frame{fr}, "goroce fault: "+strings.Join(note, "; "))
	} else {
		_, err = f.Link.Send([]nic.Frame{fr})
	}
	return err
}

// same reports whether a and b are the same bytes in memory.
func same(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// headroom puts a datagram behind the headroom a link may write into.
func headroom(d []byte) nic.Frame {
	b := make([]byte, nic.Headroom+len(d))
	copy(b[nic.Headroom:], d)
	return nic.Frame{B: b, Off: nic.Headroom}
}

// Recv implements nic.Link.
func (f *Link) Recv(frames []nic.Frame) (int, error) {
	f.pump.Do(f.startPumps)
	f.rxMu.Lock()
	defer f.rxMu.Unlock()
	f.rxLent = f.rxLent[:0]
	for len(f.rxq) == 0 && f.rxErr == nil {
		f.rxCond.Wait()
	}
	if len(f.rxq) == 0 {
		return 0, f.rxErr
	}
	n := min(len(frames), len(f.rxq))
	for i := range n {
		frames[i] = nic.Frame{B: f.rxq[i]}
	}
	f.rxLent = append(f.rxLent, f.rxq[:n]...)
	rest := copy(f.rxq, f.rxq[n:])
	clear(f.rxq[rest:])
	f.rxq = f.rxq[:rest]
	return n, nil
}

// startPumps starts a pump for each receive queue of the wrapped link:
// the faulty link itself has one queue, fed by all of them, so that none
// of the wrapped link's queues is left unread.
func (f *Link) startPumps() {
	if mq, ok := f.Link.(nic.MultiQueue); ok && mq.RxQueues() > 1 {
		for i := range mq.RxQueues() {
			go f.runPump(func(fr []nic.Frame) (int, error) { return mq.RecvQueue(i, fr) })
		}
		return
	}
	go f.runPump(f.Link.Recv)
}

// runPump reads the wrapped link and queues what the rx faults leave.
func (f *Link) runPump(recv func([]nic.Frame) (int, error)) {
	frames := make([]nic.Frame, 64)
	for {
		n, err := recv(frames)
		if err != nil {
			f.rxMu.Lock()
			f.rxErr = err
			f.rxMu.Unlock()
			f.rxCond.Broadcast()
			return
		}
		for _, fr := range frames[:n] {
			ft := f.decide(f.dirs[1], fr.Datagram())
			if ft.drop {
				continue
			}
			d := ft.out
			if same(d, fr.Datagram()) {
				d = append([]byte(nil), d...) // the wrapped link reuses its buffers
			}
			if ft.delay > 0 {
				f.clock.AfterFunc(ft.delay, func() { f.deliver(d, ft.copies) })
				continue
			}
			f.deliver(d, ft.copies)
		}
	}
}

func (f *Link) deliver(d []byte, copies int) {
	f.rxMu.Lock()
	for range copies {
		f.rxq = append(f.rxq, d)
	}
	f.rxMu.Unlock()
	f.rxCond.Broadcast()
}

// Close closes the wrapped link; a blocked Recv returns its error.
func (f *Link) Close() error {
	err := f.Link.Close()
	f.pump.Do(func() { // never started: nobody to tell Recv
		f.rxMu.Lock()
		f.rxErr = nic.ErrClosed
		f.rxMu.Unlock()
	})
	f.rxCond.Broadcast()
	return err
}
