package perftest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport"
)

// ptStall is how long a traffic loop waits without any progress before it
// gives up: perftest's check_alive gives a UC/UD receiver 60 s, and roced
// applies the same patience everywhere so that a vanished peer never
// hangs a run (the tools spin forever on a write_lat buffer).
var ptStall = 60 * time.Second

// errStalled reports a traffic loop that saw no progress for ptStall.
var errStalled = errors.New("no progress")

// compError is a completion with an error status (NOTIFY_COMP_ERROR_SEND
// and _RECV).
type compError struct {
	wc     transport.WC
	recv   bool
	counts string
}

func (e *compError) Error() string { return fmt.Sprintf("completion with error: %v", e.wc.Status) }

// lines is what the tools print for it.
func (e *compError) lines() []string {
	who := "client"
	if e.recv {
		who = "server"
	}
	return []string{" Completion with error at " + who,
		fmt.Sprintf(" Failed status %d: wr_id %d syndrom 0x%x", e.wc.Status, int(e.wc.WRID&ptIndexMask), e.wc.VendorErr),
		e.counts}
}

// The send WR ids carry the QP index and the message number, so that a
// completion says exactly which messages it covers.
const (
	ptIndexShift = 40
	ptIndexMask  = 1<<ptIndexShift - 1
)

// ptTraffic runs one traffic step.
type ptTraffic struct {
	c     *ptCtx
	cfg   *Config
	ctx   context.Context
	steps atomic.Uint64 // progress made, which the watchdog looks at
	wc    []transport.WC
	recvd uint64 // latency tests: messages received so far
}

// newTraffic starts the watchdog that ends ctx after ptStall without
// progress; stop ends it.
func newTraffic(parent context.Context, c *ptCtx) (t *ptTraffic, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	t = &ptTraffic{c: c, cfg: c.cfg, ctx: ctx, wc: make([]transport.WC, 16)}
	done := make(chan struct{})
	limit := ptStall
	go func() {
		tick := time.NewTicker(min(limit/4, time.Second))
		defer tick.Stop()
		seen, since := t.steps.Load(), time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				if n := t.steps.Load(); n != seen {
					seen, since = n, now
				} else if now.Sub(since) > limit {
					cancel(errStalled)
					return
				}
			}
		}
	}()
	return t, func() { close(done); cancel(nil) }
}

// progress tells the watchdog that the loop moved on. It counts rather
// than reads the clock: a latency loop makes it once an iteration, on the
// round trip it measures, and where the clock is a system call (the lab's
// TCG guests: about 1 µs) that read was part of the latency reported.
func (t *ptTraffic) progress() { t.steps.Add(1) }

// err returns why the traffic context ended.
func (t *ptTraffic) err() error {
	if cause := context.Cause(t.ctx); cause != nil {
		return cause
	}
	return t.ctx.Err()
}

// ptSpins is how many empty polls a busy-polling loop makes before it
// sleeps on the queue: the tools spin, which costs a core roced may share
// with the engine (and, in the lab, with the guest's only vCPU).
const ptSpins = 64

// waitCQ returns at least one completion of q in wc, spinning first
// unless -e asked for completion events.
func (t *ptTraffic) waitCQ(q *transport.CQ, wc []transport.WC) (int, error) {
	// In poll mode the polls are what moves the device, and the tool
	// spins as perftest does on an HCA, never sleeping without -e: after
	// ptSpins polls it would sleep through every round trip longer than
	// they take (in the lab's emulated guest, all of them).
	spinOn := t.c.dev.PollMode() && !t.cfg.Events
	for spin := 0; ; spin++ {
		n, err := q.Poll(wc)
		if n > 0 || err != nil {
			return n, err
		}
		if spinOn {
			if spin%ptSpins == ptSpins-1 && t.ctx.Err() != nil {
				return 0, t.err()
			}
		} else if t.cfg.Events || spin >= ptSpins {
			if err := q.Wait(t.ctx); err != nil {
				return 0, t.err()
			}
			spin = 0
			continue
		}
		q.Yield(spin)
	}
}

// waitWrite spins until the peer's RDMA WRITE number n has landed and the
// last byte of our buffer, b[0], holds want: write_lat's poll of that
// byte. The engine copies a WRITE into the buffer with the QP's lock held
// and advances the responder's expected PSN under the same lock, so the
// byte is read only once Query (which takes the lock) shows the PSN past
// the message: the copy is then ordered before the read, and the peer
// writes nothing more until we answer. (A bare read of the byte while the
// engine may be copying would be a data race.)
func (t *ptTraffic) waitWrite(x *transport.QP, firstPSN uint32, n, pkts uint64, b []byte, want byte, stop func() bool) error {
	next := (firstPSN + uint32(n*pkts)) & bth.PSNMask
	for spin := 0; ; spin++ {
		a, _ := x.Query()
		// PSNs are 24-bit serial numbers: the expected PSN is at or past
		// next when next lies within the 2^23 PSNs behind it.
		if (a.RQPSN-next)&bth.PSNMask < 1<<23 && b[0] == want || stop() {
			return nil
		}
		if spin%ptSpins == ptSpins-1 {
			if t.ctx.Err() != nil {
				return t.err()
			}
			time.Sleep(time.Microsecond) // let the engine and the peer have the CPU
		} else {
			runtime.Gosched()
		}
	}
}

// gap is --latency_gap: a pause before each latency post.
func (t *ptTraffic) gap() {
	if t.cfg.LatencyGap > 0 {
		end := cycles() + int64(t.cfg.LatencyGap)*1000
		for cycles() < end {
		}
	}
}

// Duration mode: the run's phases (catch_alarm's states). Messages count
// only between sample and stop; -f sets the margins, a quarter of -D by
// default.
type ptPhases struct{ sample, stop, end int64 }

const (
	phaseWarm = iota
	phaseSample
	phaseCool
	phaseEnd
)

func newPhases(cfg *Config, start int64) ptPhases {
	margin := cfg.Margin
	if margin < 0 {
		margin = cfg.Duration / 4
	}
	s := int64(time.Second)
	return ptPhases{sample: start + int64(margin)*s, stop: start + int64(cfg.Duration-margin)*s, end: start + int64(cfg.Duration)*s}
}

func (p ptPhases) at(now int64) int {
	switch {
	case now >= p.end:
		return phaseEnd
	case now >= p.stop:
		return phaseCool
	case now >= p.sample:
		return phaseSample
	}
	return phaseWarm
}

// sendWR builds message k of QP i (ctx_set_send_reg_wqes plus the address
// steps of run_iter_bw).
func (t *ptTraffic) sendWR(wr *transport.SendWR, sge *transport.SGE, i int, k, size uint64, signaled bool) {
	c := t.c
	off := ptCycleOffset(size, k)
	*sge = transport.SGE{Addr: c.sendArea(i) + off, Length: uint32(size), LKey: c.mr.LKey()}
	*wr = transport.SendWR{WRID: uint64(i)<<ptIndexShift | k, SGL: wr.SGL[:1]}
	wr.SGL[0] = *sge
	if signaled {
		wr.Flags = transport.Signaled
	}
	rem := c.rem[i]
	switch t.cfg.Verb() {
	case VerbSend:
		wr.Opcode = transport.WRSend
		if len(c.ahs) > i {
			wr.AH = c.ahs[i]
			wr.RemoteQPN, wr.RemoteQKey = c.udDest(i)
		}
	case VerbWrite:
		wr.Opcode, wr.RemoteAddr, wr.RKey = transport.WRRDMAWrite, rem.VAddr+off, rem.RKey
	case VerbWriteImm:
		wr.Opcode, wr.RemoteAddr, wr.RKey = transport.WRRDMAWriteWithImm, rem.VAddr+off, rem.RKey
	case VerbRead:
		wr.Opcode, wr.RemoteAddr, wr.RKey = transport.WRRDMARead, rem.VAddr+off, rem.RKey
	case VerbAtomic:
		wr.SGL[0].Length = 8
		wr.RemoteAddr, wr.RKey = rem.VAddr+off, rem.RKey
		if t.cfg.AtomicType == CmpAndSwap {
			wr.Opcode, wr.Swap = transport.WRAtomicCmpAndSwp, ptAtomicSwap
		} else {
			wr.Opcode, wr.CompareAdd = transport.WRAtomicFetchAndAdd, ptAtomicAdd
		}
	}
}

// bwSender is run_iter_bw's state for one message size.
type bwSender struct {
	t          *ptTraffic
	size       uint64
	iters      uint64 // per QP; 0 with -D
	scnt, ccnt []uint64
	totS, totC uint64
	wrs        [][]transport.SendWR
	sges       [][]transport.SGE
	s          bwSamples
	ph         ptPhases
	duration   bool
}

func (t *ptTraffic) newSender(size uint64) *bwSender {
	q := len(t.c.qps)
	b := &bwSender{t: t, size: size, iters: t.cfg.Iters, scnt: make([]uint64, q), ccnt: make([]uint64, q),
		duration: t.cfg.TestType == Duration}
	for range q {
		n := max(ptBatch/t.cfg.PostList, 1) * t.cfg.PostList
		b.wrs = append(b.wrs, make([]transport.SendWR, n))
		b.sges = append(b.sges, make([]transport.SGE, n))
	}
	tot := b.iters * uint64(q)
	b.s = bwSamples{size: size, iters: tot, noPeak: t.cfg.NoPeak, postList: t.cfg.PostList, cqMod: t.cfg.CQMod}
	if b.s.noPeak {
		b.s.posted, b.s.completed = make([]int64, 1), make([]int64, 1)
	} else {
		b.s.posted, b.s.completed = make([]int64, tot), make([]int64, tot)
	}
	return b
}

func (b *bwSender) tot() uint64 { return b.iters * uint64(len(b.scnt)) }

// ptBatch bounds the work requests one post call hands the engine.
const ptBatch = 64

// post fills every QP's send queue up to the tx depth and reports whether
// it posted anything. Each of the tool's posts (one work request, or a
// list of -l) is stamped as the tool stamps it, but consecutive posts go
// to the engine in one call: on an HCA ibv_post_send is a doorbell, in
// goroce each call ends in a system call that sends what is due, and a
// call per message would halve the small-message rate. The packets on
// the wire are the same, back to back.
func (b *bwSender) post(now int64) (bool, error) {
	t, cfg := b.t, b.t.cfg
	pl := uint64(cfg.PostList)
	tx := uint64(cfg.TxDepth)
	cqMod := uint64(cfg.CQMod)
	posted := false
	for i, x := range t.c.qps {
		if b.duration && b.ph.at(now) == phaseEnd {
			return posted, nil
		}
		n := 0
		for (b.duration || b.scnt[i] < b.iters) && b.scnt[i]+pl <= tx+b.ccnt[i] && n+int(pl) <= len(b.wrs[i]) {
			for j := range pl {
				k := b.scnt[i] + j
				var signaled bool
				if pl == 1 {
					signaled = k%cqMod == cqMod-1 || !b.duration && k == b.iters-1
				} else {
					signaled = (j+1)%cqMod == 0
				}
				// A post list keeps its addresses from post to post.
				off := k
				if pl > 1 {
					off = j
				}
				wr := &b.wrs[i][n]
				wr.SGL = b.sges[i][n : n+1]
				t.sendWR(wr, &b.sges[i][n], i, off, b.size, signaled)
				wr.WRID = uint64(i)<<ptIndexShift | k
				n++
			}
			if !b.s.noPeak {
				b.s.posted[b.totS] = cycles()
			}
			b.scnt[i] += pl
			b.totS += pl
		}
		if n == 0 {
			continue
		}
		var err error
		if n == 1 {
			err = x.PostSend(&b.wrs[i][0])
		} else {
			err = x.PostSendList(b.wrs[i][:n])
		}
		if err != nil {
			return posted, fmt.Errorf("Couldn't post send: qp %d scnt=%d: %w", i, b.scnt[i], err)
		}
		posted = true
	}
	return posted, nil
}

// complete accounts for one send completion.
func (b *bwSender) complete(wc *transport.WC, now int64) error {
	if wc.Status != transport.Success {
		return &compError{wc: *wc, counts: fmt.Sprintf("scnt=%d, ccnt=%d", b.totS, b.totC)}
	}
	i, k := int(wc.WRID>>ptIndexShift), wc.WRID&ptIndexMask
	if i >= len(b.ccnt) || k < b.ccnt[i] {
		return fmt.Errorf("completion for an unknown work request %#x", wc.WRID)
	}
	covered := k + 1 - b.ccnt[i]
	b.ccnt[i] = k + 1
	b.totC += covered
	b.t.progress()
	if !b.s.noPeak {
		b.s.completed[min(b.totC, b.tot())-1] = now
	}
	if b.duration && b.ph.at(now) == phaseSample {
		b.s.iters += covered
	}
	return nil
}

func (b *bwSender) done(now int64) bool {
	if b.duration {
		return b.ph.at(now) == phaseEnd
	}
	return b.totS >= b.tot() && b.totC >= b.tot()
}

// start marks the beginning of the run.
func (b *bwSender) start() {
	now := cycles()
	if b.duration {
		b.ph = newPhases(b.t.cfg, now)
		b.s.iters = 0
	} else if b.s.noPeak {
		b.s.posted[0] = now
	}
}

// finish marks its end.
func (b *bwSender) finish() bwSamples {
	if b.duration {
		b.s.posted[0], b.s.completed[0] = b.ph.sample, b.ph.stop
	} else if b.s.noPeak {
		b.s.completed[0] = cycles()
	}
	return b.s
}

// waitBounded blocks for a completion of q, and no later than deadline
// (in cycles; 0: no deadline) when -D needs to see its phases change.
func (t *ptTraffic) waitBounded(q *transport.CQ, deadline int64) (int, error) {
	if deadline == 0 {
		return t.waitCQ(q, t.wc)
	}
	n, err := q.Poll(t.wc)
	if n > 0 || err != nil {
		return n, err
	}
	ctx, cancel := context.WithTimeout(t.ctx, time.Duration(deadline-cycles()))
	defer cancel()
	if err := q.Wait(ctx); err != nil {
		if t.ctx.Err() != nil {
			return 0, t.err()
		}
		return 0, nil // the phase ended
	}
	return q.Poll(t.wc)
}

// nextPhase is when the duration state next changes (0 without -D).
func (p ptPhases) next(now int64) int64 {
	for _, at := range []int64{p.sample, p.stop, p.end} {
		if now < at {
			return at
		}
	}
	return p.end
}

// bwSend is run_iter_bw: keep tx depth messages in flight on every QP,
// signal one in cq_mod, and time each post and each completion.
func (t *ptTraffic) bwSend(size uint64) (bwSamples, error) {
	b := t.newSender(size)
	b.start()
	for now := cycles(); !b.done(now); now = cycles() {
		posted, err := b.post(now)
		if err != nil {
			return b.s, err
		}
		if !b.duration && b.totC >= b.tot() {
			continue
		}
		var n int
		if posted {
			n, err = t.c.sendCQ.Poll(t.wc)
		} else {
			var deadline int64
			if b.duration {
				deadline = b.ph.next(now)
			}
			n, err = t.waitBounded(t.c.sendCQ, deadline)
		}
		if err != nil {
			return b.s, err
		}
		now = cycles()
		for i := range n {
			if err := b.complete(&t.wc[i], now); err != nil {
				return b.s, err
			}
		}
	}
	return b.finish(), nil
}

// warmUp is --perform_warm_up: one tx depth of messages per QP, waited
// for, before the measured run.
func (t *ptTraffic) warmUp(size uint64) error {
	var wr transport.SendWR
	var sge [1]transport.SGE
	wr.SGL = sge[:]
	for i, x := range t.c.qps {
		n := max(t.cfg.TxDepth, t.cfg.PostList)
		for k := range n {
			t.sendWR(&wr, &sge[0], i, uint64(k), size, true)
			if err := x.PostSend(&wr); err != nil {
				return fmt.Errorf("Couldn't post send during warm up: qp %d scnt=%d: %w", i, k, err)
			}
		}
		for n > 0 {
			got, err := t.waitCQ(t.c.sendCQ, t.wc)
			if err != nil {
				return err
			}
			for j := range got {
				if t.wc[j].Status != transport.Success {
					return &compError{wc: t.wc[j], counts: "Problems with warm up"}
				}
			}
			n -= got
		}
	}
	return nil
}

// recvPoster posts a receiving side's receive WQEs (ctx_set_recv_wqes and
// the reposts of the receive loops).
type recvPoster struct {
	c      *ptCtx
	size   uint64
	posted []uint64 // per QP
	cycle  bool     // bandwidth receives rotate through the cycle buffer
	wr     transport.RecvWR
	sge    [1]transport.SGE
}

func newRecvPoster(c *ptCtx, size uint64) *recvPoster {
	// Sized by -q: with -R the QPs arrive one by one (cmPrepare).
	r := &recvPoster{c: c, size: size, posted: make([]uint64, c.cfg.NumQPs), cycle: c.cfg.Test.BW()}
	r.wr.SGL = r.sge[:]
	return r
}

// perQP is how many receives each QP starts with.
func (r *recvPoster) perQP() int {
	n := r.c.cfg.RxDepth
	if r.c.srq != nil {
		n /= r.c.cfg.NumQPs
	}
	return max(n, 1)
}

func (r *recvPoster) post(i int) error {
	c := r.c
	length := r.size
	base := c.remoteArea(i)
	if c.cfg.Conn == ConnUD {
		length += ptUDAddition
		base += ptCacheLine - ptUDAddition
	}
	var off uint64
	if r.cycle && length <= ptCycleBuffer/2 {
		inc := ptInc(r.size)
		off = r.posted[i] % (ptCycleBuffer / inc) * inc
	}
	r.sge[0] = transport.SGE{Addr: base + off, Length: uint32(length), LKey: c.mr.LKey()}
	r.wr.WRID = uint64(i)
	var err error
	if c.srq != nil {
		err = c.srq.PostRecv(&r.wr)
	} else {
		err = c.qps[i].PostRecv(&r.wr)
	}
	if err != nil {
		return fmt.Errorf("Couldn't post recv Qp = %d: counter=%d: %w", i, r.posted[i], err)
	}
	r.posted[i]++
	return nil
}

// fill is ctx_set_recv_wqes: the initial receives of every QP.
func (r *recvPoster) fill() error {
	for i := range r.c.qps {
		for range r.perQP() {
			if err := r.post(i); err != nil {
				return err
			}
		}
	}
	return nil
}

// bwRecv is run_iter_bw_server: count the client's messages, repost
// receives while more are due, time from the first to the last.
func (t *ptTraffic) bwRecv(size uint64, r *recvPoster) (bwSamples, error) {
	q := uint64(len(t.c.qps))
	duration := t.cfg.TestType == Duration
	tot := t.cfg.Iters * q
	s := bwSamples{size: size, iters: tot, noPeak: true, posted: make([]int64, 1), completed: make([]int64, 1)}
	rcnt := make([]uint64, q)
	var total uint64
	var ph ptPhases
	first := true
	for {
		now := cycles()
		if duration && !first && ph.at(now) == phaseEnd || !duration && total >= tot {
			break
		}
		var deadline int64
		if duration && !first {
			deadline = ph.next(now)
		}
		n, err := t.waitBounded(t.c.recvCQ, deadline)
		if errors.Is(err, errStalled) {
			return s, &stallError{received: total, want: tot}
		}
		if err != nil {
			return s, err
		}
		now = cycles()
		if n > 0 && first {
			first = false
			if duration {
				ph = newPhases(t.cfg, now)
			} else {
				s.posted[0] = now
			}
		}
		for j := range n {
			wc := &t.wc[j]
			if wc.Status != transport.Success {
				return s, &compError{wc: *wc, recv: true, counts: fmt.Sprintf(" rcnt=%d", total)}
			}
			i := int(wc.WRID)
			if i >= len(rcnt) {
				return s, fmt.Errorf("receive completion for an unknown QP %d", i)
			}
			rcnt[i]++
			total++
			t.progress()
			if duration && ph.at(now) == phaseSample {
				s.iters++
			}
			if duration || r.posted[i]+1 <= t.cfg.Iters {
				if err := r.post(i); err != nil {
					return s, err
				}
			}
		}
	}
	if duration {
		s.posted[0], s.completed[0] = ph.sample, ph.stop
		if first {
			s.iters = 0
		}
	} else {
		s.completed[0] = cycles()
	}
	return s, nil
}

// stallError is check_alive's verdict on a receiver that stopped
// receiving.
type stallError struct{ received, want uint64 }

func (e *stallError) Error() string { return "receiver stalled" }

func (e *stallError) lines() []string {
	return []string{fmt.Sprintf(" Did not get Message for %d Seconds, exiting..", int(ptStall.Seconds())),
		fmt.Sprintf(" Total Received=%d, Total Iters Required=%d", e.received, e.want)}
}

// bwBidir is run_iter_bi: both sides send and receive at once, sharing
// one completion queue; the server starts sending at the first message
// it receives.
func (t *ptTraffic) bwBidir(size uint64, r *recvPoster) (bwSamples, error) {
	b := t.newSender(size)
	b.start()
	if b.duration && t.cfg.IsServer() {
		b.ph = ptPhases{sample: 1<<62 - 1, stop: 1<<62 - 1, end: 1<<62 - 1} // set at the first receive
	}
	q := uint64(len(t.c.qps))
	tot := t.cfg.Iters * q
	var rtot uint64
	sending := !t.cfg.IsServer()
	for now := cycles(); ; now = cycles() {
		if b.duration && b.ph.at(now) == phaseEnd || !b.duration && b.totC >= tot && rtot >= tot {
			break
		}
		posted := false
		if sending {
			var err error
			if posted, err = b.post(now); err != nil {
				return b.s, err
			}
		}
		var n int
		var err error
		if posted {
			n, err = t.c.sendCQ.Poll(t.wc)
		} else {
			var deadline int64
			if b.duration && sending {
				deadline = b.ph.next(now)
			}
			n, err = t.waitBounded(t.c.sendCQ, deadline)
		}
		if errors.Is(err, errStalled) {
			return b.s, &stallError{received: rtot, want: tot}
		}
		if err != nil {
			return b.s, err
		}
		now = cycles()
		for j := range n {
			wc := &t.wc[j]
			if wc.Opcode != transport.OpRecv && wc.Opcode != transport.OpRecvRDMAWithImm {
				if err := b.complete(wc, now); err != nil {
					return b.s, err
				}
				continue
			}
			if wc.Status != transport.Success {
				return b.s, &compError{wc: *wc, recv: true, counts: fmt.Sprintf(" rcnt=%d", rtot)}
			}
			i := int(wc.WRID)
			if i >= len(t.c.qps) {
				return b.s, fmt.Errorf("receive completion for an unknown QP %d", i)
			}
			if !sending {
				sending = true
				if b.duration {
					b.ph = newPhases(t.cfg, now)
				}
			}
			rtot++
			t.progress()
			if b.duration || r.posted[i]+1 <= t.cfg.Iters {
				if err := r.post(i); err != nil {
					return b.s, err
				}
			}
		}
	}
	return b.finish(), nil
}

// latWR is a latency test's work request on QP 0: always from and to the
// start of the areas (the latency tests do not rotate addresses).
func (t *ptTraffic) latWR(size uint64, signaled bool) transport.SendWR {
	var wr transport.SendWR
	wr.SGL = make([]transport.SGE, 1)
	t.sendWR(&wr, &wr.SGL[0], 0, 0, size, signaled)
	return wr
}

// lat runs one latency test size and returns the samples, or with -D the
// sample window's figures.
type latRun struct {
	s      latSamples
	window int64 // -D: the sample window in cycles
}

// latWrite is run_iter_lat_write (and _write_imm): a ping-pong of RDMA
// WRITEs in which each side waits for the peer's message, detected by the
// last byte of the buffer changing to the message number (or by a
// receive completion with --write_with_imm), before sending its next. The
// server sends first.
func (t *ptTraffic) latWrite(size uint64, r *recvPoster) (latRun, error) {
	c := t.c
	x := c.qps[0]
	imm := t.cfg.WriteImm
	wr := t.latWR(size, true)
	postBuf := c.bytesAt(c.sendArea(0)+size-1, 1)
	pollBuf := c.bytesAt(c.remoteArea(0)+size-1, 1)
	// The PSN the peer's messages of this run start at (the peer may
	// have sent its first before we look), and how many packets each
	// takes.
	first, pkts := c.peerPSN, (size+uint64(t.cfg.MTU)-1)/uint64(t.cfg.MTU)
	var got uint64
	run, err := t.pingPong(size, !t.cfg.IsServer(), &wr, func(k uint64) { postBuf[0] = byte(k) },
		func(rcnt uint64, stop func() bool) error {
			if imm {
				return t.waitRecv(r, stop)
			}
			err := t.waitWrite(x, first, rcnt, pkts, pollBuf, byte(rcnt), stop)
			if err == nil && !stop() {
				got = rcnt
			}
			return err
		})
	c.peerPSN = (first + uint32(got*pkts)) & bth.PSNMask
	return run, err
}

// latSendRecv is run_iter_lat_send: a ping-pong of SENDs; the client sends
// first.
func (t *ptTraffic) latSendRecv(size uint64, r *recvPoster) (latRun, error) {
	wr := t.latWR(size, true)
	return t.pingPong(size, t.cfg.IsServer(), &wr, func(uint64) {}, func(_ uint64, stop func() bool) error {
		return t.waitRecv(r, stop)
	})
}

// waitRecv waits for one receive completion and reposts while more
// messages are due (rcnt + rx_depth <= iters).
func (t *ptTraffic) waitRecv(r *recvPoster, stop func() bool) error {
	for {
		var n int
		var err error
		if t.cfg.TestType == Duration {
			// Look at the clock now and then: the run may end while
			// the peer is silent.
			if n, err = t.c.recvCQ.Poll(t.wc[:1]); n == 0 && err == nil {
				if stop() {
					return nil
				}
				ctx, cancel := context.WithTimeout(t.ctx, 10*time.Millisecond)
				err = t.c.recvCQ.Wait(ctx)
				cancel()
				if t.ctx.Err() != nil {
					return t.err()
				}
				continue
			}
		} else {
			n, err = t.waitCQ(t.c.recvCQ, t.wc[:1])
		}
		if err != nil {
			return err
		}
		wc := t.wc[0]
		if wc.Status != transport.Success {
			return &compError{wc: wc, recv: true}
		}
		t.recvd++
		if t.cfg.TestType == Duration || t.recvd+uint64(r.perQP()) <= t.cfg.Iters {
			if err := r.post(0); err != nil {
				return err
			}
		}
		return nil
	}
}

// pingPong is the loop the write and send latency tests share: wait for
// the peer's message (unless this side opens), stamp and post our own,
// collect its completion.
func (t *ptTraffic) pingPong(size uint64, waitFirst bool, wr *transport.SendWR, mark func(uint64),
	wait func(rcnt uint64, stop func() bool) error) (latRun, error) {
	x := t.c.qps[0]
	iters := t.cfg.Iters
	duration := t.cfg.TestType == Duration
	run := latRun{s: latSamples{size: size, iters: iters, roundTrip: true, reportCycles: t.cfg.Cycles}}
	if !duration {
		run.s.posted = make([]int64, iters)
	}
	t.recvd = 0
	var ph ptPhases
	if duration {
		ph = newPhases(t.cfg, cycles())
	}
	ended := func() bool { return duration && ph.at(cycles()) == phaseEnd }
	var scnt, rcnt, ccnt, counted uint64
	for duration && !ended() || !duration && (scnt < iters || rcnt < iters || ccnt < iters) {
		if (duration || rcnt < iters) && !(scnt == 0 && !waitFirst) {
			rcnt++
			if err := wait(rcnt, ended); err != nil {
				return run, err
			}
			t.progress()
		}
		if duration || scnt < iters {
			t.gap()
			if ended() {
				break
			}
			if !duration {
				run.s.posted[scnt] = cycles()
			}
			scnt++
			mark(scnt)
			if err := x.PostSend(wr); err != nil {
				return run, fmt.Errorf("Couldn't post send: scnt=%d: %w", scnt, err)
			}
		}
		if duration || ccnt < iters {
			if _, err := t.waitSend(scnt, ccnt); err != nil {
				return run, err
			}
			ccnt++
			if duration && ph.at(cycles()) == phaseSample {
				counted++
			}
		}
	}
	if duration {
		run.s.iters, run.window = counted, ph.stop-ph.sample
	}
	return run, nil
}

// waitSend waits for one send completion.
func (t *ptTraffic) waitSend(scnt, ccnt uint64) (transport.WC, error) {
	if _, err := t.waitCQ(t.c.sendCQ, t.wc[:1]); err != nil {
		return transport.WC{}, err
	}
	wc := t.wc[0]
	if wc.Status != transport.Success {
		return wc, &compError{wc: wc, counts: fmt.Sprintf("scnt=%d, ccnt=%d", scnt, ccnt)}
	}
	return wc, nil
}

// latReadAtomic is run_iter_lat: one READ or atomic at a time, each waited
// for; only the client takes part.
func (t *ptTraffic) latReadAtomic(size uint64) (latRun, error) {
	x := t.c.qps[0]
	iters := t.cfg.Iters
	duration := t.cfg.TestType == Duration
	run := latRun{s: latSamples{size: size, iters: iters, reportCycles: t.cfg.Cycles}}
	if !duration {
		run.s.posted = make([]int64, iters)
	}
	wr := t.latWR(size, true)
	var ph ptPhases
	if duration {
		ph = newPhases(t.cfg, cycles())
	}
	var scnt, counted uint64
	for duration && ph.at(cycles()) != phaseEnd || !duration && scnt < iters {
		t.gap()
		if !duration {
			run.s.posted[scnt] = cycles()
		}
		scnt++
		if err := x.PostSend(&wr); err != nil {
			return run, fmt.Errorf("Couldn't post send: scnt=%d: %w", scnt, err)
		}
		if _, err := t.waitSend(scnt, scnt); err != nil {
			return run, err
		}
		t.progress()
		if duration && ph.at(cycles()) == phaseSample {
			counted++
		}
	}
	if duration {
		run.s.iters, run.window = counted, ph.stop-ph.sample
	}
	return run, nil
}
