package ladder

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// Select returns a diagram with the arrows keep accepts, and only the
// columns they use. Answers pointing at arrows left out are dropped.
func (d *Diagram) Select(keep func(Arrow) bool) *Diagram {
	out := &Diagram{}
	colMap := map[int]int{}
	col := func(c int) int {
		if n, ok := colMap[c]; ok {
			return n
		}
		colMap[c] = len(out.Columns)
		out.Columns = append(out.Columns, d.Columns[c])
		return colMap[c]
	}
	arrowMap := map[int]int{}
	for i, a := range d.Arrows {
		if !keep(a) {
			continue
		}
		arrowMap[i] = len(out.Arrows)
		a.From, a.To = col(a.From), col(a.To)
		var ans []int
		for _, j := range a.Answers {
			if n, ok := arrowMap[j]; ok {
				ans = append(ans, n)
			}
		}
		a.Answers = ans
		out.Arrows = append(out.Arrows, a)
	}
	return out
}

// OnQP reports whether the arrow goes to or comes from QP number qpn.
func (d *Diagram) OnQP(a Arrow, qpn uint32) bool {
	if a.DestQP == qpn {
		return true
	}
	e := d.Columns[a.From]
	return e.Known && e.QPN == qpn
}

// textLayout places the lanes of a diagram for WriteText.
type textLayout struct {
	lane  []int // each column's character position
	width int   // through the last lane
}

const textPrefix = 18 // "NNNNNN TTTT.TTTTTT "

func (d *Diagram) layout() textLayout {
	n := len(d.Columns)
	l := textLayout{}
	if n == 0 {
		return l
	}
	head := 0
	for _, c := range d.Columns {
		head = max(head, len(c.Addr.String())+2, len("QP 0x000000")+2)
	}
	gaps := laneGaps(d, float64(head), func(a Arrow) float64 { return float64(len(a.Label) + 8) })
	pos := textPrefix + head/2
	for c := range d.Columns {
		l.lane = append(l.lane, pos)
		if c < len(gaps) {
			pos += int(math.Ceil(gaps[c]))
		}
	}
	l.width = l.lane[n-1] + 1
	return l
}

// lanes returns a line of the diagram's width with each lane drawn.
func (l textLayout) lanes() []byte {
	b := []byte(strings.Repeat(" ", l.width))
	for _, x := range l.lane {
		b[x] = '|'
	}
	return b
}

// WriteText draws the diagram for a terminal: a header naming each
// column's endpoint, then per packet a line with its number, the time since
// the first packet in seconds, the arrow captioned with the opcode and PSN,
// and the other key fields; each note follows on a line of its own,
// starting with "*". A time shown as "?" is on another clock than the
// first packet's (a line at the end says so). A diagram without packets is
// one line saying so.
func (d *Diagram) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	if len(d.Columns) == 0 {
		bw.WriteString("(no RoCEv2 packets)\n")
		return bw.Flush()
	}
	l := d.layout()
	head := func(text func(c int) string) {
		b := []byte(strings.Repeat(" ", l.width+20))
		for c, x := range l.lane {
			t := text(c)
			s := max(0, x-len(t)/2)
			copy(b[s:], t)
		}
		bw.WriteString(strings.TrimRight(string(b), " ") + "\n")
	}
	head(func(c int) string { return d.Columns[c].Addr.String() })
	head(func(c int) string {
		if !d.Columns[c].Known {
			return "QP ?"
		}
		return fmt.Sprintf("QP 0x%06x", d.Columns[c].QPN)
	})
	fmt.Fprintf(bw, "%6s %11s%s\n", "#", "time", strings.TrimRight(string(l.lanes()[textPrefix:]), " "))
	for _, a := range d.Arrows {
		b := l.lanes()
		from, to := l.lane[a.From], l.lane[a.To]
		lo, hi := min(from, to), max(from, to)
		for x := lo + 1; x < hi; x++ {
			b[x] = '-'
		}
		switch {
		case from < to:
			b[to-1] = '>'
		case from > to:
			b[to+1] = '<'
		}
		label := " " + a.Label + " "
		if hi-lo-5 >= len(label) {
			s := lo + 1 + (hi-lo-1-len(label))/2
			copy(b[s:], label)
		}
		line := fmt.Sprintf("%6d %11s%s", a.Num, a.clock(), b[textPrefix:])
		if hi-lo-5 < len(label) {
			line += " " + a.Label
		}
		if a.Fields != "" {
			line += "  " + a.Fields
		}
		bw.WriteString(line + "\n")
		for _, n := range a.Notes {
			bw.WriteString(fmt.Sprintf("%18s%s  * %s\n", "", l.lanes()[textPrefix:], n.Text))
		}
	}
	if d.mixedClocks() {
		bw.WriteString(clockNote + "\n")
	}
	return bw.Flush()
}

// laneGaps returns the distances between neighbouring columns: no less
// than least, and wide enough for each arrow's caption (need). Arrows between
// neighbours go first, then those that span more columns, each widening
// the gaps it spans evenly.
func laneGaps(d *Diagram, least float64, need func(Arrow) float64) []float64 {
	n := len(d.Columns)
	gaps := make([]float64, max(n-1, 0))
	for i := range gaps {
		gaps[i] = least
	}
	for span := 1; span < n; span++ {
		for _, a := range d.Arrows {
			lo, hi := min(a.From, a.To), max(a.From, a.To)
			if hi-lo != span {
				continue
			}
			have := 0.0
			for _, g := range gaps[lo:hi] {
				have += g
			}
			if w := need(a); have < w {
				for k := lo; k < hi; k++ {
					gaps[k] += (w - have) / float64(span)
				}
			}
		}
	}
	return gaps
}

// clockNote explains the times shown as "?".
const clockNote = "time ?: the packet's timestamp is more than a day from the first packet's: the capture mixes clocks"

// clock is the arrow's time since the first packet in seconds, or "?"
// when the capture stamped it with another clock (more than a day away:
// some captures mix the epoch and a monotonic clock).
func (a *Arrow) clock() string {
	if a.Time < -24*time.Hour || a.Time > 24*time.Hour {
		return "?"
	}
	return fmt.Sprintf("%.6f", a.Time.Seconds())
}

// mixedClocks reports whether some arrow's time is shown as "?".
func (d *Diagram) mixedClocks() bool {
	for i := range d.Arrows {
		if d.Arrows[i].clock() == "?" {
			return true
		}
	}
	return false
}
