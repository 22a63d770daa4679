package pingpong

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/goroce/goroce/internal/endpoint"
	"github.com/goroce/goroce/transport"
)

// The verbs side of the four tools: what their pp_init_ctx, pp_connect_ctx,
// pp_post_recv, pp_post_send and main loop do, with goroce's engine in
// place of libibverbs.

// Work request IDs: the tools' PINGPONG_RECV_WRID and PINGPONG_SEND_WRID,
// also the bits of their "pending" masks.
const (
	ppRecvWRID = 1
	ppSendWRID = 2
)

const (
	// ppQKey is ud_pingpong's fixed Q_Key.
	ppQKey = 0x11111111
	// ppGRH is the room for the GRH in front of every UD receive; the UD
	// tool sends from buf+40 and receives into buf.
	ppGRH = 40
	// ppInline is the max_inline_data the tools get back from rxe for a
	// one-SGE send queue: rxe sizes a WQE's data area as the larger of the
	// SGE list (16 bytes per SGE) and the inline data asked for (none), and
	// reports all of it as inline room. The tools send inline when the
	// message fits, so on rxe messages of up to 16 bytes go inline.
	ppInline = 16
)

// ppRun holds one run's objects and counters, as the tools' struct
// pingpong_context and main's locals.
type ppRun struct {
	cfg            Config
	stdout, stderr io.Writer

	ep        *endpoint.Endpoint
	dev       *transport.Device
	pd        *transport.PD
	buf       []byte
	mr        *transport.MR
	cq        *transport.CQ
	srq       *transport.SRQ
	qps       []*transport.QP
	ah        *transport.AH
	sendFlags transport.SendFlags
	rng       lrand48

	local, remote []Dest

	routs      int      // receives posted and not yet completed
	pending    []uint64 // per QP: PINGPONG_*_WRID bits still to complete before the next send
	scnt, rcnt int
	wc         []transport.WC // how many completions one poll takes: 2, srq num_qp + rx_depth
}

// dataOff is where a received message's data starts in the buffer: ud
// receives the GRH first.
func (r *ppRun) dataOff() int {
	if r.cfg.Tool == UD {
		return ppGRH
	}
	return 0
}

// sendOff is where the messages sent are taken from. rc, uc and ud send
// from where they receive, so the server echoes what it got. srq_pingpong
// does too, but its QPs share that buffer: one QP's message lands in it
// while another QP's send reads it, which in Go is a data race. So roced's
// srq sends from a second, zeroed area behind the first. The bytes on the
// wire are the same: the srq buffer starts zeroed and -c only writes
// zeros, so the real tool sends zeros both ways too.
func (r *ppRun) sendOff() int {
	if r.cfg.Tool == SRQ {
		return int(r.cfg.Size)
	}
	return r.dataOff()
}

// initCtx is pp_init_ctx: refuse what rxe refuses, then the buffer, PD,
// MR, CQ, SRQ and QPs, and every QP to INIT.
func (r *ppRun) initCtx() error {
	cfg := &r.cfg
	switch cfg.Tool {
	case RC:
		// goroce, like rxe, has no on-demand paging, no completion
		// timestamps and no device memory; these are rxe's answers.
		if cfg.ODP || cfg.ImplicitOD {
			return r.failf("The device isn't ODP capable or does not support RC send and receive with ODP")
		}
		if cfg.Timestamps {
			return r.failf("The device isn't completion timestamp capable")
		}
		if cfg.DM {
			return r.failf("Device doesn't support dm allocation")
		}
	case SRQ:
		if cfg.ODP {
			return r.failf("The device isn't ODP capable or does not support RC send, receive and srq with ODP")
		}
	case UD:
		if mtu := r.dev.ActiveMTU().Bytes(); int64(cfg.Size) > int64(mtu) {
			return r.failf("Requested size larger than port MTU (%d)", mtu)
		}
	}
	n := int(cfg.Size) + r.dataOff()
	if cfg.Tool == SRQ {
		n = 2 * int(cfg.Size) // receive area, send area
	}
	// A zero-size run still needs a region to register; its SGEs are empty.
	r.buf = make([]byte, max(n, 1))
	if cfg.Tool != SRQ {
		// The tools' "FIXME memset(ctx->buf, 0, size)": rc, uc and ud fill
		// with 0x7b, srq with zeros. -c relies on it: a page that no
		// message reached still holds 0x7b.
		for i := range r.buf {
			r.buf[i] = 0x7b
		}
	}
	r.pd = r.dev.AllocPD()
	var err error
	if r.mr, err = r.pd.Register(r.buf, transport.LocalWrite); err != nil {
		return r.failf("Couldn't register MR (%v)", err)
	}
	numQP, extra := 1, 1
	if cfg.Tool == SRQ {
		numQP, extra = int(cfg.NumQP), int(cfg.NumQP)
	}
	if uint64(cfg.RxDepth)+uint64(extra) > transport.MaxWR {
		return r.failf("Couldn't create CQ")
	}
	rxDepth := int(cfg.RxDepth)
	r.cq = r.dev.CreateCQ(rxDepth + extra)
	r.wc = make([]transport.WC, 2)
	typ := transport.RC
	switch cfg.Tool {
	case UC:
		typ = transport.UC
	case UD:
		typ = transport.UD
	case SRQ:
		if r.srq, err = r.dev.CreateSRQ(r.pd, transport.SRQAttr{MaxWR: cfg.RxDepth, MaxSGE: 1}); err != nil {
			return r.failf("Couldn't create SRQ (%v)", err)
		}
		r.wc = make([]transport.WC, numQP+rxDepth)
	}
	for i := range numQP {
		ia := transport.QPInitAttr{Type: typ, SendCQ: r.cq, RecvCQ: r.cq, SRQ: r.srq,
			Cap: transport.QPCap{MaxSendWR: 1, MaxSendSGE: 1, MaxInlineData: ppInline}}
		if r.srq == nil {
			ia.Cap.MaxRecvWR, ia.Cap.MaxRecvSGE = cfg.RxDepth, 1
		}
		q, err := r.dev.CreateQP(r.pd, ia)
		if err != nil {
			if cfg.Tool == SRQ {
				return r.failf("Couldn't create QP[%d] (%v)", i, err)
			}
			return r.failf("Couldn't create QP (%v)", err)
		}
		r.qps = append(r.qps, q)
		if _, got := q.Query(); got.Cap.MaxInlineData >= cfg.Size {
			r.sendFlags |= transport.Inline
		}
	}
	r.sendFlags |= transport.Signaled
	r.pending = make([]uint64, numQP)
	for i, q := range r.qps {
		a := transport.QPAttr{State: transport.Init, PKeyIndex: 0, PortNum: uint8(cfg.IBPort)}
		mask := transport.AttrState | transport.AttrPKeyIndex | transport.AttrPort
		if cfg.Tool == UD {
			a.QKey = ppQKey
			mask |= transport.AttrQKey
		} else {
			mask |= transport.AttrAccessFlags // qp_access_flags 0: SEND needs none
		}
		if err := q.Modify(&a, mask); err != nil {
			if cfg.Tool == SRQ {
				return r.failf("Failed to modify QP[%d] to INIT", i)
			}
			return r.failf("Failed to modify QP to INIT")
		}
	}
	return nil
}

// postRecvs posts rx_depth receives up front, as main does before the
// exchange.
func (r *ppRun) postRecvs() error {
	want := int(r.cfg.RxDepth)
	if r.routs = r.postRecv(want); r.routs < want {
		return r.failf("Couldn't post receive (%d)", r.routs)
	}
	return nil
}

// postRecv is pp_post_recv: n receives of the whole buffer, stopping at the
// first that fails; it returns how many were posted.
func (r *ppRun) postRecv(n int) int {
	wr := transport.RecvWR{WRID: ppRecvWRID, SGL: []transport.SGE{r.mr.SGE(0, int(r.cfg.Size)+r.dataOff())}}
	for i := range n {
		var err error
		if r.srq != nil {
			err = r.srq.PostRecv(&wr)
		} else {
			err = r.qps[0].PostRecv(&wr)
		}
		if err != nil {
			return i
		}
	}
	return n
}

// postSend is pp_post_send on QP i.
func (r *ppRun) postSend(i int) error {
	wr := transport.SendWR{WRID: ppSendWRID, Opcode: transport.WRSend, Flags: r.sendFlags,
		SGL: []transport.SGE{r.mr.SGE(r.sendOff(), int(r.cfg.Size))}}
	if r.cfg.Tool == UD {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = r.ah, r.remote[0].QPN, ppQKey
	}
	return r.qps[i].PostSend(&wr)
}

// makeLocal fills the addresses this side sends: LID 0 (RoCE has none),
// the QPN, a random 24-bit PSN and, with -g, the GID at that index; without
// -g the GID is zero and the tools cannot connect over RoCE.
func (r *ppRun) makeLocal() {
	// main's srand48(getpid() * time(NULL)).
	r.rng.seed(int64(os.Getpid()) * time.Now().Unix())
	for _, q := range r.qps {
		d := Dest{QPN: q.QPN(), PSN: uint32(r.rng.next()) & 0xffffff}
		if r.cfg.GIDIndex >= 0 {
			d.GID = r.ep.GID
		}
		r.local = append(r.local, d)
	}
}

// addressVector is the tools' ah_attr: a global route (the peer's GID, our
// GID index) only when the peer's GID has an interface ID; otherwise none,
// which RoCE cannot use. The tools ask for hop limit 1, but on RoCE the
// kernel replaces it with the route's (ib_resolve_eth_dmac in ib_core's
// verbs.c: 64 for a default IPv4 route), so rxe's packets carry TTL 64.
// Honouring the 1 made every roced packet die at the first router; the
// engine's default (0) is the kernel's 64.
func (r *ppRun) addressVector(dest Dest) transport.AHAttr {
	ah := transport.AHAttr{SL: uint8(r.cfg.SL), PortNum: uint8(r.cfg.IBPort)}
	var zero [8]byte
	if [8]byte(dest.GID[8:]) != zero {
		// sgid_index is a uint8_t: -1 becomes 255, as in C.
		ah.DGID, ah.SGIDIndex = dest.GID, uint8(r.cfg.GIDIndex)
	}
	return ah
}

// ibMTU is pp_mtu_to_enum for the -m values ParseFlags accepts.
func ibMTU(bytes int) transport.MTU {
	for m := transport.MTU256; m <= transport.MTU4096; m++ {
		if m.Bytes() == bytes {
			return m
		}
	}
	return 0
}

// connect is pp_connect_ctx: each QP to RTR and RTS with the tool's
// attributes and masks; ud creates its address handle instead.
func (r *ppRun) connect(remote []Dest) error {
	cfg := &r.cfg
	if cfg.Tool == UD {
		q := r.qps[0]
		if err := q.Modify(&transport.QPAttr{State: transport.RTR}, transport.AttrState); err != nil {
			return r.failf("Failed to modify QP to RTR")
		}
		if err := q.Modify(&transport.QPAttr{State: transport.RTS, SQPSN: r.local[0].PSN}, transport.AttrState|transport.AttrSQPSN); err != nil {
			return r.failf("Failed to modify QP to RTS")
		}
		ah, err := r.dev.CreateAH(r.pd, r.addressVector(remote[0]))
		if err != nil {
			return r.failf("Failed to create AH")
		}
		r.ah = ah
		return nil
	}
	qpErr := func(i int, state string) error {
		if cfg.Tool == SRQ {
			return r.failf("Failed to modify QP[%d] to %s", i, state)
		}
		return r.failf("Failed to modify QP to %s", state)
	}
	for i, q := range r.qps {
		// srq_pingpong routes every QP by the first record's GID.
		av := r.addressVector(Dest{LID: remote[i].LID, GID: remote[0].GID})
		a := transport.QPAttr{State: transport.RTR, PathMTU: ibMTU(cfg.MTU), DestQPN: remote[i].QPN, RQPSN: remote[i].PSN,
			MaxDestRdAtomic: 1, MinRNRTimer: 12, AH: av}
		mask := transport.AttrState | transport.AttrAV | transport.AttrPathMTU | transport.AttrDestQPN | transport.AttrRQPSN
		if cfg.Tool != UC {
			mask |= transport.AttrMaxDestRdAtomic | transport.AttrMinRNRTimer
		}
		if err := q.Modify(&a, mask); err != nil {
			return qpErr(i, "RTR")
		}
		a.State, a.Timeout, a.RetryCnt, a.RNRRetry, a.SQPSN, a.MaxRdAtomic = transport.RTS, 14, 7, 7, r.local[i].PSN, 1
		if cfg.QPTimeout != 0 {
			a.Timeout = uint8(cfg.QPTimeout)
		}
		mask = transport.AttrState | transport.AttrSQPSN
		if cfg.Tool != UC {
			mask |= transport.AttrTimeout | transport.AttrRetryCnt | transport.AttrRNRRetry | transport.AttrMaxQPRdAtomic
		}
		if err := q.Modify(&a, mask); err != nil {
			return qpErr(i, "RTS")
		}
	}
	return nil
}

// start is what main does between connecting and taking the time: the
// client marks its pages for -c and sends first; the server only waits.
func (r *ppRun) start() error {
	client := !r.cfg.IsServer()
	if client && r.cfg.Check {
		r.markPages()
	}
	for i := range r.qps {
		r.pending[i] = ppRecvWRID
		if client {
			if err := r.postSend(i); err != nil {
				return r.failf("Couldn't post send")
			}
			r.pending[i] |= ppSendWRID
		}
	}
	return nil
}

// markPages writes the -c pattern: the first byte of every page of the
// message gets i / page_size % sizeof(char), which is always 0.
func (r *ppRun) markPages() {
	page, off := os.Getpagesize(), r.sendOff()
	for i := 0; i < int(r.cfg.Size); i += page {
		r.buf[off+i] = 0
	}
}

// checkBuffer is the server's -c check after the run: every page of the
// last message received must start with the client's pattern. roced runs
// it once the QPs are destroyed: srq's surplus messages may still be
// landing when the counts are reached.
func (r *ppRun) checkBuffer() []string {
	page, off := os.Getpagesize(), r.dataOff()
	var out []string
	for i := 0; i < int(r.cfg.Size); i += page {
		if r.buf[off+i] != 0 {
			out = append(out, fmt.Sprintf("invalid data in page %d", i/page))
		}
	}
	return out
}

// loop is the tools' main loop: until both counts reach -n, take
// completions (sleeping on the completion channel with -e), repost
// receives when they run low, and send again once a QP's send and receive
// have both completed.
func (r *ppRun) loop(ctx context.Context) error {
	iters := int64(r.cfg.Iters)
	for int64(r.rcnt) < iters || int64(r.scnt) < iters {
		var n int
		var err error
		if r.cfg.Events {
			select {
			case <-r.cq.Events():
			case <-ctx.Done():
				return r.failf("Failed to get cq_event (%v)", ctx.Err())
			}
			r.cq.ReqNotify(false)
			n, err = r.cq.Poll(r.wc)
		} else if r.dev.PollMode() {
			n, err = r.spin(ctx)
		} else {
			// The tools spin on ibv_poll_cq; waiting for the CQ returns the
			// same completions in the same order without burning a core.
			n, err = r.cq.PollWait(ctx, r.wc)
		}
		if err != nil {
			return r.failf("poll CQ failed (%v)", err)
		}
		for i := range n {
			if err := r.parseWC(&r.wc[i]); err != nil {
				if r.cfg.Tool == RC {
					return r.failf("parse WC failed %d", n)
				}
				return err
			}
		}
	}
	return nil
}

// ppSpins is how many empty polls spin passes between looks at the
// context.
const ppSpins = 64

// spin polls the CQ until it has completions, as the tools spin on
// ibv_poll_cq: in poll mode the polls are what moves the device, and
// PollWait, which sleeps after 200 µs, would sleep through every round
// trip longer than that (in the lab's emulated guest, all of them).
func (r *ppRun) spin(ctx context.Context) (int, error) {
	for i := 1; ; i++ {
		n, err := r.cq.Poll(r.wc)
		if n > 0 || err != nil {
			return n, err
		}
		if i%ppSpins == 0 {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
		}
		r.cq.Yield(i)
	}
}

// parseWC is the body of the tools' completion loop (rc's
// parse_single_wc).
func (r *ppRun) parseWC(wc *transport.WC) error {
	if wc.Status != transport.Success {
		return r.failf("Failed status %s (%d) for wr_id %d", wc.Status, wc.Status, int(wc.WRID))
	}
	qi := 0
	if r.cfg.Tool == SRQ {
		qi = -1
		for i, q := range r.qps {
			if q.QPN() == wc.QPNum {
				qi = i
			}
		}
		if qi < 0 {
			return r.failf("Couldn't find QPN %06x", wc.QPNum)
		}
	}
	switch wc.WRID {
	case ppSendWRID:
		r.scnt++
	case ppRecvWRID:
		// Repost when down to one receive (srq: one per QP).
		low := 1
		if r.cfg.Tool == SRQ {
			low = len(r.qps)
		}
		if r.routs--; r.routs <= low {
			r.routs += r.postRecv(int(r.cfg.RxDepth) - r.routs)
			if r.routs < int(r.cfg.RxDepth) {
				return r.failf("Couldn't post receive (%d)", r.routs)
			}
		}
		r.rcnt++
	default:
		return r.failf("Completion for unknown wr_id %d", int(wc.WRID))
	}
	r.pending[qi] &^= wc.WRID
	if int64(r.scnt) < int64(r.cfg.Iters) && r.pending[qi] == 0 {
		if err := r.postSend(qi); err != nil {
			return r.failf("Couldn't post send")
		}
		r.pending[qi] = ppRecvWRID | ppSendWRID
	}
	return nil
}

// close is pp_close_ctx: QPs, SRQ, address handle, MR, then the device.
func (r *ppRun) close() {
	for _, q := range r.qps {
		r.dev.DestroyQP(q)
	}
	if r.srq != nil {
		r.srq.Destroy()
	}
	if r.ah != nil {
		r.ah.Destroy()
	}
	if r.mr != nil {
		r.mr.Dereg()
	}
	if r.ep != nil {
		if l := r.ep.FaultSummary(); l != "" {
			fmt.Fprintln(r.stderr, l)
		}
		r.ep.Close()
	}
}

// lrand48 is glibc's drand48 family generator (srand48/lrand48), which
// the tools draw their PSNs from: X' = (0x5DEECE66D X + 0xB) mod 2^48.
type lrand48 struct{ x uint64 }

// seed is srand48: the low 32 bits of the seed above 0x330E.
func (l *lrand48) seed(s int64) { l.x = uint64(uint32(s))<<16 | 0x330e }

// next is lrand48: the top 31 of the 48 bits.
func (l *lrand48) next() int64 {
	l.x = (0x5deece66d*l.x + 0xb) & (1<<48 - 1)
	return int64(l.x >> 17)
}
