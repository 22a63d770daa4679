package ladder

import (
	"bytes"
	"encoding/xml"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/bth"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

const captures = "../bth/testdata/captures/"

// readCapture reads name from bookworm's captures, or from the path
// given when it has a directory.
func readCapture(t testing.TB, name string) *Ladder {
	t.Helper()
	if !strings.Contains(name, "/") {
		name = captures + name
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var l Ladder
	if err := l.ReadPcap(f); err != nil {
		t.Fatal(err)
	}
	return &l
}

// TestGolden draws real rxe captures and compares the text with golden
// files (go test ./ladder -run Golden -update rewrites them).
// send_bw_rnr_s64 holds an RNR NAK, a sequence NAK and a run of
// retransmissions; rping_c5 the CM's UD QP1 next to an RC QP with SENDs,
// READs and WRITEs; read_bw_s8192 multi-packet READ responses; trixie's
// rping_c5 the same as bookworm's, its timestamps on two clocks;
// rping_rej28 a CM REQ rejected. The CM messages on QP1 are named, with
// the IDs that tie a connection's messages together.
func TestGolden(t *testing.T) {
	for _, name := range []string{"send_bw_rnr_s64", "rping_c5", "read_bw_s8192", "rping_c5_trixie", "rping_rej28"} {
		file := name + ".pcap"
		if base, ok := strings.CutSuffix(name, "_trixie"); ok {
			file = "../bth/testdata/captures-trixie/" + base + ".pcap"
		}
		var b bytes.Buffer
		if err := readCapture(t, file).Diagram().WriteText(&b); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("testdata", name+".txt")
		if *update {
			if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := b.String(); got != string(want) {
			gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
			for i := range min(len(gl), len(wl)) {
				if gl[i] != wl[i] {
					t.Fatalf("%s: line %d differs:\n got %q\nwant %q", name, i+1, gl[i], wl[i])
				}
			}
			t.Fatalf("%s: %d lines, want %d", name, len(gl), len(wl))
		}
	}
}

func arrowNum(t *testing.T, d *Diagram, num int) *Arrow {
	t.Helper()
	for i := range d.Arrows {
		if d.Arrows[i].Num == num {
			return &d.Arrows[i]
		}
	}
	t.Fatalf("no arrow #%d", num)
	return nil
}

func hasNote(a *Arrow, kind, text string) bool {
	for _, n := range a.Notes {
		if n.Kind == kind && strings.Contains(n.Text, text) {
			return true
		}
	}
	return false
}

// TestRNRCapture checks the model behind the golden text: the columns, the
// NAKs' causes, the retransmissions' and what each answer answers.
func TestRNRCapture(t *testing.T) {
	d := readCapture(t, "send_bw_rnr_s64.pcap").Diagram()
	if len(d.Columns) != 2 || d.Columns[0].String() != "198.51.100.1 QP 0x000011" || d.Columns[1].String() != "198.51.100.2 QP 0x000011" {
		t.Fatalf("columns %v", d.Columns)
	}
	for _, c := range []struct {
		num        int
		kind, text string
	}{
		{25, NoteInfo, "acknowledges #24"},
		{27, NoteNAK, "receiver not ready for #26"},
		{29, NoteNAK, "refused with the RNR NAK #27; #28 (psn 0xa05bf9) came out of sequence"},
		{58, NoteRetransmit, "retransmission of psn 0xa05bf8 (first sent #26): go back after the NAK #29"},
		{62, NoteRetransmit, "in the run of retransmissions from #58"},
	} {
		if a := arrowNum(t, d, c.num); !hasNote(a, c.kind, c.text) {
			t.Errorf("#%d: notes %v, want a %s note with %q", c.num, a.Notes, c.kind, c.text)
		}
	}
	if a := arrowNum(t, d, 25); len(a.Answers) != 1 || d.Arrows[a.Answers[0]].Num != 24 {
		t.Errorf("#25 answers %v, want #24", a.Answers)
	}
	if a := arrowNum(t, d, 30); len(a.Notes) != 0 {
		t.Errorf("#30, a first transmission in sequence, has notes %v", a.Notes)
	}
}

// TestPipelinedNAK: on trixie's rxe the requester had sent 30 SENDs
// before the RNR NAK and the sequence NAK came back; the sequence NAK
// answers the SEND right after the refused one, not the latest.
func TestPipelinedNAK(t *testing.T) {
	d := readCapture(t, "../bth/testdata/captures-trixie/send_bw_rnr_s64.pcap").Diagram()
	a := arrowNum(t, d, 57)
	if !hasNote(a, NoteNAK, "#24 had it but was refused with the RNR NAK #56; #25 (psn 0x7c1fdf) came out of sequence") {
		t.Errorf("#57: notes %v", a.Notes)
	}
	if len(a.Answers) != 1 || d.Arrows[a.Answers[0]].Num != 25 {
		t.Errorf("#57 answers %v, want #25", a.Answers)
	}
}

// TestGhostAndComment: an ACK past every PSN sent is a ghost and
// acknowledges nothing; a packet sent again with a comment of its own is
// explained by it, not called a duplicate.
func TestGhostAndComment(t *testing.T) {
	src := readCapture(t, "send_bw_s64.pcap")
	req, ack := src.pkts[0], src.pkts[1]
	if p, err := bth.Parse(ack.Frame.RoCE()); err != nil || p.OpCode() != bth.RCAcknowledge {
		t.Fatalf("the capture's second RoCEv2 packet is not an ACK")
	}
	ghost := ack
	b := append([]byte(nil), ack.Frame.Bytes()...)
	fr, err := bth.DecodeLink(ack.Frame.LinkType(), b)
	if err != nil {
		t.Fatal(err)
	}
	bth.BTH(fr.RoCE()).SetPSN(bth.BTH(fr.RoCE()).PSN().Add(5))
	fr.PutICRC()
	ghost.Frame = fr
	again := req
	again.Comments = []string{"the fence"}
	var l Ladder
	l.Add(req)
	l.Add(ghost)
	l.Add(again)
	d := l.Diagram()
	if a := &d.Arrows[1]; !hasNote(a, NoteError, "ghost ACK") || len(a.Answers) != 0 || len(a.Notes) != 1 {
		t.Errorf("ghost: notes %v, answers %v", a.Notes, a.Answers)
	}
	if a := &d.Arrows[2]; len(a.Notes) != 1 || a.Notes[0] != (Note{NoteComment, "the fence"}) {
		t.Errorf("commented resend: notes %v", a.Notes)
	}
}

// TestMarks changes a real exchange the way faults and captures do: a
// packet lost, one sent twice, one with its ICRC spoiled, one cut by the
// snap length, one with a fault comment, one malformed.
func TestMarks(t *testing.T) {
	src := readCapture(t, "send_bw_s64.pcap")
	var reqs []Packet
	for _, p := range src.pkts {
		if pk, err := bth.Parse(p.Frame.RoCE()); err == nil && pk.Info().IsRequest() {
			reqs = append(reqs, p)
		}
	}
	if len(reqs) < 10 {
		t.Fatalf("%d requests", len(reqs))
	}
	clone := func(p Packet) Packet {
		b := append([]byte(nil), p.Frame.Bytes()...)
		fr, err := bth.DecodeLink(p.Frame.LinkType(), b)
		if err != nil {
			t.Fatal(err)
		}
		p.Frame = fr
		return p
	}
	var l Ladder
	l.Add(reqs[0])
	l.Add(reqs[1])
	l.Add(reqs[1]) // sent twice in a row
	// reqs[2] lost
	bad := clone(reqs[3])
	bad.Frame.RoCE()[bth.BTHLen] ^= 1 // a payload bit: the ICRC no longer matches
	l.Add(bad)
	cut := clone(reqs[4])
	cut.Cut = true
	l.Add(cut)
	faulty := reqs[5]
	faulty.Comments = []string{"goroce fault: rule 1 (tx opcode=SEND_ONLY delay=2ms)"}
	l.Add(faulty)
	short := clone(reqs[6])
	bth.BTH(short.Frame.RoCE()).SetOpCode(0x1f) // reserved
	l.Add(short)
	d := l.Diagram()
	want := []struct {
		kind, text string
	}{
		{},
		{},
		{NoteDuplicate, "the same bytes as #" + strconv.Itoa(reqs[1].Num)},
		{NoteGap, "1 PSN missing"},
		{NoteCut, "cut by the capture's snap length"},
		{NoteFault, "goroce fault: rule 1"},
		{NoteError, "malformed"},
	}
	for i, w := range want {
		a := &d.Arrows[i]
		if w.kind == "" {
			if len(a.Notes) != 0 {
				t.Errorf("arrow %d: notes %v, want none", i, a.Notes)
			}
			continue
		}
		if !hasNote(a, w.kind, w.text) {
			t.Errorf("arrow %d: notes %v, want a %s note with %q", i, a.Notes, w.kind, w.text)
		}
	}
	if !hasNote(&d.Arrows[3], NoteError, "ICRC BAD") {
		t.Errorf("arrow 3: notes %v, want ICRC BAD", d.Arrows[3].Notes)
	}
	if !d.Arrows[6].Malformed {
		t.Error("arrow 6 not malformed")
	}
}

// TestSVG parses the SVG of a real capture as XML: one <g class="arrow">
// per packet, in order, with its number, and one column per endpoint.
func TestSVG(t *testing.T) {
	d := readCapture(t, "send_bw_rnr_s64.pcap").Diagram()
	var b bytes.Buffer
	if err := d.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	type text struct {
		Class string   `xml:"class,attr"`
		Lines []string `xml:"tspan"`
	}
	type group struct {
		Class string     `xml:"class,attr"`
		Num   int        `xml:"data-num,attr"`
		Texts []text     `xml:"text"`
		Lines []struct{} `xml:"line"`
	}
	var svg struct {
		XMLName xml.Name
		Groups  []group `xml:"g"`
	}
	if err := xml.Unmarshal(b.Bytes(), &svg); err != nil {
		t.Fatalf("the SVG is not well-formed XML: %v", err)
	}
	if svg.XMLName.Local != "svg" || svg.XMLName.Space != "http://www.w3.org/2000/svg" {
		t.Fatalf("root element %v", svg.XMLName)
	}
	var cols, arrows []group
	for _, g := range svg.Groups {
		switch g.Class {
		case "column":
			cols = append(cols, g)
		case "arrow":
			arrows = append(arrows, g)
		}
	}
	if len(cols) != len(d.Columns) || len(arrows) != len(d.Arrows) {
		t.Fatalf("%d columns and %d arrows, want %d and %d", len(cols), len(arrows), len(d.Columns), len(d.Arrows))
	}
	notes, rnr := 0, false
	for i, g := range arrows {
		if g.Num != d.Arrows[i].Num || len(g.Lines) != 1 {
			t.Fatalf("arrow %d: num %d with %d lines, want num %d and a line", i, g.Num, len(g.Lines), d.Arrows[i].Num)
		}
		for _, tx := range g.Texts {
			if !strings.HasPrefix(tx.Class, "note ") {
				continue
			}
			notes++
			for k, l := range tx.Lines {
				if len(l) > svgNoteLen {
					t.Errorf("#%d: note line %q longer than %d", g.Num, l, svgNoteLen)
				}
				tx.Lines[k] = strings.TrimSpace(l)
			}
			if strings.Join(tx.Lines, " ") == "* receiver not ready for #26: no receive buffer posted; the requester waits 640µs, then sends psn 0xa05bf8 again" {
				rnr = g.Num == 27
			}
		}
	}
	if !rnr {
		t.Error("no RNR NAK note on #27")
	}
	want := 0
	for _, a := range d.Arrows {
		want += len(a.Notes)
	}
	if notes != want || notes == 0 {
		t.Errorf("%d notes drawn, want %d", notes, want)
	}
}

// TestEmpty: a capture without RoCEv2 packets, or a selection of none,
// draws a line that says so.
func TestEmpty(t *testing.T) {
	for _, d := range []*Diagram{
		(&Ladder{}).Diagram(),
		readCapture(t, "rc_pingpong_s64.pcap").Diagram().Select(func(Arrow) bool { return false }),
	} {
		var b, s bytes.Buffer
		if err := d.WriteText(&b); err != nil || b.String() != "(no RoCEv2 packets)\n" {
			t.Errorf("WriteText: %q, %v", b.String(), err)
		}
		if err := d.WriteSVG(&s); err != nil || !strings.HasPrefix(s.String(), "<svg ") {
			t.Errorf("WriteSVG: %q, %v", s.String(), err)
		}
	}
}

// FuzzDiagram puts an arbitrary RoCE part, from either side, among a real
// exchange's packets and draws the result: no input may panic, and every
// arrow must stay between the columns.
func FuzzDiagram(f *testing.F) {
	src := readCapture(f, "rc_pingpong_s64.pcap")
	base := src.pkts[:6]
	for _, p := range base {
		f.Add(p.Frame.RoCE(), false, 3)
	}
	f.Add([]byte{0x11}, true, 0)
	f.Fuzz(func(t *testing.T, roce []byte, reverse bool, at int) {
		a, b := base[0].Frame.SrcAddr(), base[0].Frame.DstAddr()
		if reverse {
			a, b = b, a
		}
		o := bth.Outer{Src: a, Dst: b, SrcPort: 0xc0de}
		buf := make([]byte, o.Len()+len(roce))
		o.Put(buf, len(roce))
		copy(buf[o.Len():], roce)
		fr, err := bth.DecodeIP(buf)
		if err != nil {
			return
		}
		var l Ladder
		at = max(0, min(at, len(base)))
		for i, p := range base {
			if i == at {
				l.Add(Packet{Frame: fr, Comments: []string{"fuzz"}})
			}
			l.Add(p)
		}
		if at == len(base) {
			l.Add(Packet{Frame: fr, Cut: reverse})
		}
		d := l.Diagram()
		for _, ar := range d.Arrows {
			if ar.From < 0 || ar.From >= len(d.Columns) || ar.To < 0 || ar.To >= len(d.Columns) {
				t.Fatalf("arrow #%d from %d to %d, %d columns", ar.Num, ar.From, ar.To, len(d.Columns))
			}
			for _, j := range ar.Answers {
				if j < 0 || j >= len(d.Arrows) {
					t.Fatalf("arrow #%d answers %d", ar.Num, j)
				}
			}
		}
		var out bytes.Buffer
		if err := d.WriteText(&out); err != nil {
			t.Fatal(err)
		}
		if err := d.WriteSVG(&out); err != nil {
			t.Fatal(err)
		}
	})
}
