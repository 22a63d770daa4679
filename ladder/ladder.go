package ladder

import (
	"bytes"
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/goroce/goroce/bth"
)

// Packet is one RoCEv2 packet to place on a ladder: the datagram as it was
// seen, where it was seen in its capture, and what the capture says about
// it.
type Packet struct {
	// Num numbers the packet: its frame number in a capture, from 1.
	// Zero numbers it by the order of Add.
	Num int
	// Time is when the packet was seen.
	Time time.Time
	// Frame is the decoded frame: addresses, UDP and the RoCE part.
	Frame bth.Frame
	// Cut says that the capture kept only the start of the packet (a
	// snap length): the bytes past what it kept are zeros in Frame, the
	// headers are whole and the ICRC is not checked.
	Cut bool
	// Comments are the packet's capture comments, such as the faults
	// roced injected into it ("goroce fault: rule 1 (...)"). Each is a
	// note; any other comment says why the packet was sent, in place of
	// a retransmission, duplicate or gap note.
	Comments []string
}

// Endpoint is one column of a ladder: a QP at an address. The address is
// the RoCEv2 GID (an IPv4 or IPv6 address). A packet names only its
// destination QP; the sender's QPN is known from a DETH (UD), or inferred
// from the opposite direction of the connection, else it is unknown.
type Endpoint struct {
	// Addr is the endpoint's IP address.
	Addr netip.Addr
	// QPN is the QP number, when Known.
	QPN uint32
	// Known says whether QPN is known.
	Known bool
}

// String returns "198.51.100.1 QP 0x000011", or "198.51.100.1 QP ?".
func (e Endpoint) String() string {
	if !e.Known {
		return e.Addr.String() + " QP ?"
	}
	return fmt.Sprintf("%v QP 0x%06x", e.Addr, e.QPN)
}

// Note kinds: what an annotation explains. Renderers may colour them.
const (
	NoteInfo       = "info"       // a correlation: what a response answers
	NoteRetransmit = "retransmit" // a request sent again
	NoteDuplicate  = "duplicate"  // the same packet twice in a row
	NoteGap        = "gap"        // PSNs skipped
	NoteNAK        = "nak"        // a NAK or RNR NAK and its cause
	NoteError      = "error"      // a bad ICRC, a malformed packet
	NoteCut        = "cut"        // cut by the snap length
	NoteFault      = "fault"      // a fault roced injected (capture comment)
	NoteComment    = "comment"    // any other comment on the packet
)

// Note is one annotation of an arrow: why the packet was sent or what it
// means.
type Note struct {
	// Kind is one of the Note constants (NoteRetransmit, ...).
	Kind string
	// Text explains.
	Text string
}

// Arrow is one packet on the ladder.
type Arrow struct {
	// Num is the packet's number (its frame number in a capture).
	Num int
	// Time is the time since the ladder's first packet.
	Time time.Duration
	// From and To index the ladder's Columns.
	From, To int
	// OpCode is the packet's opcode; PSN its PSN.
	OpCode bth.OpCode
	// PSN is the packet's PSN.
	PSN bth.PSN
	// DestQP is the BTH's destination QP.
	DestQP uint32
	// Label is the arrow's caption: the opcode and the PSN.
	Label string
	// Fields are the other key fields: AckReq, the AETH (ACK, NAK code,
	// RNR timer) and MSN, the RETH, the payload length, and so on.
	Fields string
	// Notes explain the packet.
	Notes []Note
	// Answers are the indexes in Arrows of the requests this packet
	// answers (an ACK, a READ response, an atomic ACK, a NAK).
	Answers []int
	// Malformed says the packet could not be parsed (Fields says why).
	Malformed bool
}

// Diagram is a ladder: the endpoints and the packets between them, in the
// order they were seen.
type Diagram struct {
	// Columns are the endpoints, in the order they first appear.
	Columns []Endpoint
	// Arrows are the packets.
	Arrows []Arrow
}

// Ladder collects packets and lays them out as a Diagram.
type Ladder struct {
	pkts  []Packet
	conns [][2]Endpoint
}

// Connect says that two endpoints are the two QPs of one connection, for
// code that knows it (a capture has to be read for it: see Endpoint).
func (l *Ladder) Connect(a, b Endpoint) {
	a.Known, b.Known = true, true
	l.conns = append(l.conns, [2]Endpoint{a, b})
}

// Add appends a packet. The Frame's bytes must stay unchanged.
func (l *Ladder) Add(p Packet) {
	if p.Num == 0 {
		p.Num = len(l.pkts) + 1
	}
	l.pkts = append(l.pkts, p)
}

// Len returns the number of packets added.
func (l *Ladder) Len() int { return len(l.pkts) }

// flowKey is one direction of traffic to one QP.
type flowKey struct {
	src, dst netip.Addr
	qpn      uint32 // destination QP
}

// sent is one transmission of a request.
type sent struct {
	arrow int
	psn   bth.PSN
}

// flow is the state of one direction: the requests it carried and the
// responses to them from the other direction.
type flow struct {
	reqs     []sent          // every request, in order
	first    map[bth.PSN]int // PSN -> arrow of its first transmission
	last     map[bth.PSN]int // PSN -> arrow of its latest transmission
	hasNext  bool
	next     bth.PSN // the next PSN in sequence
	slack    int     // after a READ: how many more PSNs its responses may use
	acked    bth.PSN // the last PSN an ACK covered
	hasAcked bool
	prevReq  int             // arrow of the previous request, -1
	backoff  int             // arrow of the latest NAK or RNR NAK to this flow's requests, -1
	icrcBad  []int           // arrows of requests with a bad ICRC
	rnr      map[bth.PSN]int // PSN -> the latest RNR NAK for it
	// A run of retransmissions (go-back-N): its cause and the PSN that
	// continues it.
	resendWhy  string
	resendNext bth.PSN
	resending  bool
	resendFrom int         // the arrow that began the run
	reads      []sent      // READ requests
	readLen    map[int]int // READ request arrow -> its DMA length
	readGot    map[int]int // READ request arrow -> the bytes of its response so far
	srcQPN     uint32
	srcKnown   bool
	pair       *flowKey // the opposite direction of the connection
}

type parsed struct {
	key   flowKey
	p     bth.Packet
	ok    bool   // p parsed
	err   error  // why not
	bthOK bool   // at least a BTH
	deth  bool   // the sender's QPN came in a DETH
	src   uint32 // the DETH's source QP
	icrc  bool   // the ICRC matches (not checked when cut)
}

// Diagram lays out the packets added so far.
func (l *Ladder) Diagram() *Diagram {
	ps := make([]parsed, len(l.pkts))
	flows := map[flowKey]*flow{}
	var order []flowKey
	for i, pk := range l.pkts {
		fr := pk.Frame
		r := &ps[i]
		r.key = flowKey{src: fr.SrcAddr(), dst: fr.DstAddr()}
		roce := fr.RoCE()
		if len(roce) >= bth.BTHLen {
			r.bthOK = true
			r.key.qpn = bth.BTH(roce).DestQP()
		}
		r.p, r.err = bth.Parse(roce)
		r.ok = r.err == nil
		r.icrc = pk.Cut || fr.VerifyICRC()
		if r.ok {
			if d := r.p.DETH(); d != nil {
				r.deth, r.src = true, d.SrcQP()
			}
		}
		if _, ok := flows[r.key]; !ok && r.bthOK {
			flows[r.key] = &flow{first: map[bth.PSN]int{}, last: map[bth.PSN]int{}, rnr: map[bth.PSN]int{}, prevReq: -1, backoff: -1}
			order = append(order, r.key)
		}
		if r.deth {
			f := flows[r.key]
			f.srcQPN, f.srcKnown = r.src, true
		}
	}
	for _, c := range l.conns {
		ab := flowKey{src: c[0].Addr, dst: c[1].Addr, qpn: c[1].QPN}
		ba := flowKey{src: c[1].Addr, dst: c[0].Addr, qpn: c[0].QPN}
		fa, fb := flows[ab], flows[ba]
		if fa != nil {
			fa.srcQPN, fa.srcKnown = c[0].QPN, true
		}
		if fb != nil {
			fb.srcQPN, fb.srcKnown = c[1].QPN, true
		}
		if fa != nil && fb != nil {
			fa.pair, fb.pair = &ba, &ab
		}
	}
	pairFlows(ps, flows, order)

	d := &Diagram{}
	col := map[Endpoint]int{}
	column := func(e Endpoint) int {
		if !e.Known {
			// An address with a single known QP: that is the one.
			only, n := 0, 0
			for c, ce := range d.Columns {
				if ce.Addr == e.Addr && ce.Known {
					only, n = c, n+1
				}
			}
			if n == 1 {
				return only
			}
		}
		if c, ok := col[e]; ok {
			return c
		}
		col[e] = len(d.Columns)
		d.Columns = append(d.Columns, e)
		return col[e]
	}
	// Known endpoints first, in order of appearance, so that a packet
	// whose sender is unknown can still land on its address's only QP.
	for i := range ps {
		r := &ps[i]
		if !r.bthOK {
			continue
		}
		f := flows[r.key]
		if f.srcKnown {
			column(Endpoint{Addr: r.key.src, QPN: f.srcQPN, Known: true})
		}
		column(Endpoint{Addr: r.key.dst, QPN: r.key.qpn, Known: true})
	}
	var t0 time.Time
	if len(l.pkts) > 0 {
		t0 = l.pkts[0].Time
	}
	a := annotator{d: d, flows: flows}
	for i, pk := range l.pkts {
		r := &ps[i]
		ar := Arrow{Num: pk.Num, Time: pk.Time.Sub(t0), DestQP: r.key.qpn}
		src := Endpoint{Addr: r.key.src}
		if f := flows[r.key]; f != nil && f.srcKnown {
			src.QPN, src.Known = f.srcQPN, true
		}
		ar.From = column(src)
		ar.To = column(Endpoint{Addr: r.key.dst, QPN: r.key.qpn, Known: r.bthOK})
		d.Arrows = append(d.Arrows, ar)
		a.roceOf = append(a.roceOf, pk.Frame.RoCE())
		a.annotate(len(d.Arrows)-1, r, pk)
	}
	d.groupColumns()
	return d
}

// groupColumns puts the columns of one address next to each other, the
// addresses in the order they first appear.
func (d *Diagram) groupColumns() {
	rank := map[netip.Addr]int{}
	for _, c := range d.Columns {
		if _, ok := rank[c.Addr]; !ok {
			rank[c.Addr] = len(rank)
		}
	}
	idx := make([]int, len(d.Columns))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(x, y int) int {
		return cmp.Compare(rank[d.Columns[x].Addr], rank[d.Columns[y].Addr])
	})
	where := make([]int, len(idx))
	cols := make([]Endpoint, len(idx))
	for n, i := range idx {
		where[i] = n
		cols[n] = d.Columns[i]
	}
	d.Columns = cols
	for i := range d.Arrows {
		a := &d.Arrows[i]
		a.From, a.To = where[a.From], where[a.To]
	}
}

// pairFlows finds, for each flow without a DETH, the opposite direction of
// its connection: the sender's QPN is that direction's destination QP.
// Flows pair by the responses that match the other's requests by PSN, or
// when one is the only candidate of the other.
func pairFlows(ps []parsed, flows map[flowKey]*flow, order []flowKey) {
	reqPSN := map[flowKey]map[bth.PSN]bool{}
	for _, r := range ps {
		if r.ok && r.p.Info().IsRequest() && !r.deth {
			m := reqPSN[r.key]
			if m == nil {
				m = map[bth.PSN]bool{}
				reqPSN[r.key] = m
			}
			m[r.p.BTH().PSN()] = true
		}
	}
	type cand struct {
		a, b  flowKey
		score int
	}
	var cs []cand
	candidates := map[flowKey]int{}
	for i, a := range order {
		if flows[a].srcKnown {
			continue
		}
		for _, b := range order[i+1:] {
			if b.src != a.dst || b.dst != a.src || flows[b].srcKnown {
				continue
			}
			cs = append(cs, cand{a: a, b: b})
			candidates[a]++
			candidates[b]++
		}
	}
	// A response whose PSN is a request's of the other flow scores 2; a
	// response that comes right after a request the other way (its
	// answer, in a lockstep exchange) scores 1.
	lastReq := map[[2]netip.Addr]flowKey{} // by source and destination
	answered := map[[2]flowKey]int{}       // response flow, request flow
	for _, r := range ps {
		if !r.ok || r.deth {
			continue
		}
		if r.p.Info().IsRequest() {
			lastReq[[2]netip.Addr{r.key.src, r.key.dst}] = r.key
		} else if q, ok := lastReq[[2]netip.Addr{r.key.dst, r.key.src}]; ok {
			answered[[2]flowKey{r.key, q}]++
		}
	}
	for i := range cs {
		c := &cs[i]
		for _, r := range ps {
			if !r.ok || r.p.Info().IsRequest() {
				continue
			}
			psn := r.p.BTH().PSN()
			if r.key == c.a && reqPSN[c.b][psn] || r.key == c.b && reqPSN[c.a][psn] {
				c.score += 2
			}
		}
		c.score += answered[[2]flowKey{c.a, c.b}] + answered[[2]flowKey{c.b, c.a}]
	}
	slices.SortStableFunc(cs, func(x, y cand) int { return cmp.Compare(y.score, x.score) })
	for _, c := range cs {
		fa, fb := flows[c.a], flows[c.b]
		if fa.pair != nil || fb.pair != nil {
			continue
		}
		if c.score == 0 && (candidates[c.a] > 1 || candidates[c.b] > 1) {
			continue
		}
		a, b := c.a, c.b
		fa.pair, fb.pair = &b, &a
		fa.srcQPN, fa.srcKnown = b.qpn, true
		fb.srcQPN, fb.srcKnown = a.qpn, true
	}
}

type annotator struct {
	d      *Diagram
	flows  map[flowKey]*flow
	roceOf [][]byte // each arrow's RoCE bytes
	// explained marks the arrows whose comments (other than roced's
	// fault marks) say why they were sent: they get no retransmission,
	// duplicate or gap notes.
	explained map[int]bool
}

func (a *annotator) note(i int, kind, format string, args ...any) {
	ar := &a.d.Arrows[i]
	ar.Notes = append(ar.Notes, Note{Kind: kind, Text: fmt.Sprintf(format, args...)})
}

// ref names an arrow in a note: "#27".
func (a *annotator) ref(i int) string { return fmt.Sprintf("#%d", a.d.Arrows[i].Num) }

// refs names a run of arrows: "#3", "#3, #5", "#3 .. #41 (20 packets)".
func (a *annotator) refs(is []int) string {
	switch {
	case len(is) == 0:
		return "nothing"
	case len(is) <= 3:
		s := make([]string, len(is))
		for k, i := range is {
			s[k] = a.ref(i)
		}
		return strings.Join(s, ", ")
	}
	return fmt.Sprintf("%s .. %s (%d packets)", a.ref(is[0]), a.ref(is[len(is)-1]), len(is))
}

func (a *annotator) annotate(i int, r *parsed, pk Packet) {
	ar := &a.d.Arrows[i]
	if !r.ok {
		ar.Malformed = true
		ar.Label = "malformed"
		if r.bthOK {
			b := bth.BTH(pk.Frame.RoCE())
			ar.OpCode, ar.PSN = b.OpCode(), b.PSN()
			ar.Label = fmt.Sprintf("%v psn=0x%06x", b.OpCode(), uint32(b.PSN()))
		}
		ar.Fields = fmt.Sprintf("%d bytes", len(pk.Frame.RoCE()))
		a.note(i, NoteError, "malformed: %v: the receiver must drop it", r.err)
		a.marks(i, r, pk)
		return
	}
	p := r.p
	h := p.BTH()
	info := p.Info()
	ar.OpCode, ar.PSN = p.OpCode(), h.PSN()
	ar.Label = fmt.Sprintf("%s psn=0x%06x", info.Name, uint32(h.PSN()))
	ar.Fields = p.KeyFields() // the one packet format (roced decode's line)
	a.marks(i, r, pk)
	f := a.flows[r.key]
	if r.deth || info.Transport == bth.TransportCNP {
		if r.deth {
			if n := cmNote(p); n != "" {
				a.note(i, NoteInfo, "%s", n)
			}
		}
		return // UD and CNPs: no sequence to follow
	}
	if info.IsRequest() {
		a.request(i, r, f)
		return
	}
	if f.pair == nil {
		return
	}
	a.response(i, r, f, a.flows[*f.pair])
}

// marks notes what the capture says about the packet itself.
func (a *annotator) marks(i int, r *parsed, pk Packet) {
	switch {
	case pk.Cut:
		a.note(i, NoteCut, "cut by the capture's snap length: ICRC not checked")
	case !r.icrc:
		a.note(i, NoteError, "ICRC BAD: the receiver must drop it silently")
	}
	for _, c := range pk.Comments {
		kind := NoteComment
		if strings.HasPrefix(c, "goroce fault") {
			kind = NoteFault
		} else {
			if a.explained == nil {
				a.explained = map[int]bool{}
			}
			a.explained[i] = true
		}
		a.note(i, kind, "%s", strings.ReplaceAll(c, "\n", " "))
	}
}

func (a *annotator) request(i int, r *parsed, f *flow) {
	p := r.p
	psn := p.BTH().PSN()
	info := p.Info()
	if !r.icrc {
		f.icrcBad = append(f.icrcBad, i)
	}
	first, seen := f.first[psn]
	behind := !seen && f.hasNext && psn.Diff(f.next) < 0
	switch {
	case a.explained[i]:
		// Its own comment says why it was sent.
	case seen && f.prevReq == f.last[psn] && f.backoff < f.last[psn] && bytes.Equal(a.roce(f.last[psn]), p.Bytes()):
		prev := f.last[psn]
		a.note(i, NoteDuplicate, "the same bytes as %s again, %v later, with no answer in between: a retransmission after the local ACK timeout, or a duplicate made on the way",
			a.ref(prev), (a.d.Arrows[i].Time - a.d.Arrows[prev].Time).Round(time.Microsecond))
	case seen || behind:
		nakd := f.backoff >= 0 && a.d.Arrows[f.backoff].PSN.Diff(psn) <= 0
		var why string
		switch {
		case f.resending && psn == f.resendNext && f.backoff < f.resendFrom:
			why = f.resendWhy + ", in the run of retransmissions from " + a.ref(f.resendFrom)
		case nakd && (!seen || f.backoff > first):
			why = "go back after " + a.d.Arrows[f.backoff].backoffName() + " " + a.ref(f.backoff)
		case seen:
			why = fmt.Sprintf("no ACK for %v: the local ACK timeout ran out", (a.d.Arrows[i].Time - a.d.Arrows[f.last[psn]].Time).Round(time.Microsecond))
		default:
			why = "what caused it is not in this capture"
		}
		if !f.resending || psn != f.resendNext || f.backoff > f.resendFrom {
			f.resendFrom, f.resendWhy = i, why
		}
		f.resending, f.resendNext = true, psn.Next()
		orig := "its first transmission is not in this capture: lost before the capture point"
		if seen {
			orig = "first sent " + a.ref(first)
			if f.last[psn] != first {
				orig += ", last " + a.ref(f.last[psn])
			}
		}
		a.note(i, NoteRetransmit, "retransmission of psn 0x%06x (%s): %s", uint32(psn), orig, why)
	case f.hasNext && psn.Diff(f.next) > int32(f.slack):
		d := int(psn.Diff(f.next)) - f.slack
		a.note(i, NoteGap, "PSN gap: 0x%06x expected, %d PSN%s missing before this one (lost before the capture point, or never sent)", uint32(f.next), d, plural(d))
	}
	if !seen {
		f.first[psn] = i
		if !behind {
			f.resending = false // a new PSN ends a run of retransmissions
		}
	}
	f.last[psn] = i
	f.reqs = append(f.reqs, sent{arrow: i, psn: psn})
	f.prevReq = i
	n, slack := 1, 0
	if info.Kind == bth.KindReadRequest {
		f.reads = append(f.reads, sent{arrow: i, psn: psn})
		if f.readLen == nil {
			f.readLen, f.readGot = map[int]int{}, map[int]int{}
		}
		f.readLen[i] = int(p.RETH().DMALen())
		// The responses use one PSN per packet: at least one, at most
		// one per 256 bytes (the smallest MTU).
		if l := int(p.RETH().DMALen()); l > 256 {
			slack = (l+255)/256 - 1
		}
	}
	if !f.hasNext || psn.Add(n).Diff(f.next) > 0 || psn.Add(n) == f.next {
		f.next, f.slack, f.hasNext = psn.Add(n), slack, true
	}
}

// roce returns the RoCE bytes of arrow i's packet.
func (a *annotator) roce(i int) []byte { return a.roceOf[i] }

func (a *annotator) response(i int, r *parsed, rf, f *flow) {
	p := r.p
	psn := p.BTH().PSN()
	info := p.Info()
	ar := &a.d.Arrows[i]
	switch info.Kind {
	case bth.KindReadResponse:
		// The READ whose PSN range holds this PSN: the latest READ
		// request at or before it.
		best := -1
		for k, rd := range f.reads {
			if d := psn.Diff(rd.psn); d >= 0 && (best < 0 || d < psn.Diff(f.reads[best].psn)) {
				best = k
			}
		}
		if best < 0 {
			a.note(i, NoteError, "no READ request for psn 0x%06x in this capture", uint32(psn))
			return
		}
		rd := f.reads[best]
		ar.Answers = append(ar.Answers, rd.arrow)
		k := int(psn.Diff(rd.psn))
		switch info.Pos {
		case bth.PosOnly, bth.PosFirst:
			a.note(i, NoteInfo, "response to READ %s", a.ref(rd.arrow))
		case bth.PosLast:
			a.note(i, NoteInfo, "the last of the %d packets of READ %s's response", k+1, a.ref(rd.arrow))
		}
		if info.Pos == bth.PosFirst || info.Pos == bth.PosOnly {
			f.readGot[rd.arrow] = 0
		}
		f.readGot[rd.arrow] += p.PayloadLen()
		if info.Pos == bth.PosLast || info.Pos == bth.PosOnly {
			if got, want := f.readGot[rd.arrow], f.readLen[rd.arrow]; got != want {
				a.note(i, NoteError, "the response carries %d bytes, READ %s asked for %d: the requester must not complete it successfully", got, a.ref(rd.arrow), want)
			}
			a.covers(i, f, psn, false)
		}
		return
	case bth.KindAtomicAcknowledge:
		if j, ok := f.last[psn]; ok {
			ar.Answers = append(ar.Answers, j)
			a.note(i, NoteInfo, "answers atomic %s", a.ref(j))
		}
		a.covers(i, f, psn, false)
		return
	case bth.KindAcknowledge:
	default:
		return
	}
	syn := p.AETH().Syndrome()
	// The last PSN the requests so far (and a READ's responses) use: an
	// acknowledgement a little past it is for nothing that was sent.
	// Far past it, the capture more likely lacks the requests it answers
	// (it began mid-connection, or the request was a duplicate long
	// behind, answered with the responder's latest PSN).
	if last := f.next.Add(f.slack - 1); f.hasNext && psn.Diff(last) > 0 && psn.Diff(last) <= ghostWindow {
		a.note(i, NoteError, "ghost %s: psn 0x%06x is past every request sent (the last 0x%06x): the requester must ignore it", ackName(syn), uint32(psn), uint32(last))
		return
	}
	switch {
	case syn.IsACK():
		a.covers(i, f, psn, true)
	case syn.IsRNRNAK():
		f.backoff = i
		f.rnr[psn] = i
		if j, ok := f.last[psn]; ok {
			ar.Answers = append(ar.Answers, j)
			a.note(i, NoteNAK, "receiver not ready for %s: no receive buffer posted; the requester waits %v, then sends psn 0x%06x again", a.ref(j), bth.RNRTimer(syn.Value()), uint32(psn))
		} else {
			a.note(i, NoteNAK, "receiver not ready for psn 0x%06x, a request not in this capture", uint32(psn))
		}
		a.coversBefore(i, f, psn)
	case syn.IsNAK():
		f.backoff = i
		a.coversBefore(i, f, psn)
		if syn.NAKCode() != bth.NAKPSNSequenceError {
			if j, ok := f.last[psn]; ok {
				ar.Answers = append(ar.Answers, j)
				a.note(i, NoteNAK, "%s refused %s: the requester's work request fails and its QP enters the error state", syn.NAKCode(), a.ref(j))
			} else {
				a.note(i, NoteNAK, "%s for psn 0x%06x, a request not in this capture", syn.NAKCode(), uint32(psn))
			}
			return
		}
		// A sequence error: the responder still expects psn and got a
		// later one. Say what became of psn and what came instead.
		why := "no packet with that PSN in this capture (lost before the capture point, or never sent)"
		if j, ok := f.last[psn]; ok {
			why = fmt.Sprintf("%s had it", a.ref(j))
			switch {
			case f.rnr[psn] > j:
				why += fmt.Sprintf(" but was refused with the RNR NAK %s", a.ref(f.rnr[psn]))
			case slices.Contains(f.icrcBad, j):
				why += " but its ICRC was bad, so it was dropped"
			default:
				why += " but the responder did not take it (lost after the capture point?)"
			}
		}
		// The packet that drew the NAK: the first one past psn sent after
		// psn's latest transmission (or, when psn never showed, after
		// the latest request before it).
		after := -1
		if j, ok := f.last[psn]; ok {
			after = j
		} else {
			for _, s := range f.reqs {
				if s.psn.Diff(psn) < 0 {
					after = s.arrow
				}
			}
		}
		instead := ""
		for _, s := range f.reqs {
			if s.arrow > after && s.psn.Diff(psn) > 0 {
				instead = fmt.Sprintf("; %s (psn 0x%06x) came out of sequence", a.ref(s.arrow), uint32(s.psn))
				ar.Answers = append(ar.Answers, s.arrow)
				break
			}
		}
		a.note(i, NoteNAK, "sequence error: the responder expects psn 0x%06x; %s%s; the requester goes back to 0x%06x", uint32(psn), why, instead, uint32(psn))
	default:
		a.note(i, NoteError, "reserved AETH syndrome")
	}
}

// covers notes which requests of f an ACK (or a response ending at psn)
// acknowledges: those after the last PSN acknowledged, up to psn.
func (a *annotator) covers(i int, f *flow, psn bth.PSN, ack bool) {
	var is []int
	for _, s := range f.reqs {
		if s.psn.Diff(psn) <= 0 && (!f.hasAcked || s.psn.Diff(f.acked) > 0) && f.last[s.psn] == s.arrow {
			is = append(is, s.arrow)
		}
	}
	if ack {
		ar := &a.d.Arrows[i]
		ar.Answers = append(ar.Answers, is...)
		switch {
		case len(is) > 0:
			a.note(i, NoteInfo, "acknowledges %s", a.refs(is))
		case f.hasAcked && psn.Diff(f.acked) <= 0:
			a.note(i, NoteInfo, "acknowledges nothing new: psn 0x%06x was acknowledged already (the answer to a duplicate request)", uint32(psn))
		}
	}
	if !f.hasAcked || psn.Diff(f.acked) > 0 {
		f.acked, f.hasAcked = psn, true
	}
}

// coversBefore: a NAK or RNR NAK for psn acknowledges the PSNs before it.
func (a *annotator) coversBefore(i int, f *flow, psn bth.PSN) {
	prev := psn.Add(-1)
	if !f.hasAcked || prev.Diff(f.acked) > 0 {
		a.covers(i, f, prev, false)
	}
}

// ghostWindow is how far past the last PSN sent an acknowledgement is
// called a ghost.
const ghostWindow = 1 << 16

// ackName names an AETH's class: "ACK", "RNR NAK" or "NAK".
func ackName(s bth.Syndrome) string {
	switch {
	case s.IsACK():
		return "ACK"
	case s.IsRNRNAK():
		return "RNR NAK"
	}
	return "NAK"
}

func (ar *Arrow) backoffName() string {
	if strings.Contains(ar.Fields, "RNR NAK") {
		return "the RNR NAK"
	}
	return "the NAK"
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
