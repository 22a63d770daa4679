package ladder

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"strings"
)

// SVG geometry, in pixels, for a 12 px monospace font.
const (
	svgChar    = 7.3 // the width of a character, a little generous
	svgLeft    = 170 // the number and time columns, left of the first lane
	svgTop     = 44  // the header: address and QP
	svgRow     = 30  // an arrow
	svgNoteRow = 15  // each note under it
	svgNoteLen = 72  // a note's line wraps after so many characters
	svgFields  = 16  // from the last lane to the fields
)

// svgColors are the colours of the notes and arrows of each kind.
var svgColors = map[string]string{
	NoteInfo:       "#555555",
	NoteRetransmit: "#b35900",
	NoteDuplicate:  "#b35900",
	NoteGap:        "#7a1fa2",
	NoteNAK:        "#c62828",
	NoteError:      "#c62828",
	NoteCut:        "#616161",
	NoteFault:      "#1565c0",
	NoteComment:    "#00695c",
}

// arrowColor picks the colour of an arrow: the first of its notes that
// is a problem, else a request's or a response's colour.
func (a *Arrow) color() string {
	for _, k := range []string{NoteError, NoteNAK, NoteRetransmit, NoteDuplicate, NoteGap, NoteFault} {
		for _, n := range a.Notes {
			if n.Kind == k {
				return svgColors[k]
			}
		}
	}
	if info, ok := lookupRequest(a); ok && !info {
		return "#2e7d32" // a response
	}
	return "#1a237e"
}

// lookupRequest reports whether the arrow's opcode is a response (false)
// or a request (true); ok is false for a malformed packet.
func lookupRequest(a *Arrow) (request, ok bool) {
	if a.Malformed {
		return false, false
	}
	return a.OpCode.Info().IsRequest(), true
}

// WriteSVG draws the diagram as one self-contained <svg> element, fit to
// be placed inline in an HTML page: a header naming each column's
// endpoint, then per packet its number and time on the left, the arrow
// captioned with the opcode and PSN, the other key fields right of the
// last column and each note under them, coloured by kind. Each arrow is a
// <g class="arrow"> with its packet number in data-num.
func (d *Diagram) WriteSVG(w io.Writer) error {
	bw := bufio.NewWriter(w)
	n := len(d.Columns)
	head := float64(len("QP 0x000000"))
	for _, c := range d.Columns {
		head = max(head, float64(len(c.Addr.String())))
	}
	gaps := laneGaps(d, head*svgChar+24, func(a Arrow) float64 { return float64(len(a.Label))*svgChar + 40 })
	lane := make([]float64, n)
	x := float64(svgLeft)
	for c := range lane {
		lane[c] = x
		if c < len(gaps) {
			x += gaps[c]
		}
	}
	right := x + svgFields
	textW := 0
	height := float64(svgTop + 10)
	for _, a := range d.Arrows {
		textW = max(textW, len(a.Fields))
		height += svgRow + float64(noteLines(a))*svgNoteRow
		for _, nt := range a.Notes {
			for _, l := range wrap("* "+nt.Text, svgNoteLen) {
				textW = max(textW, len(l))
			}
		}
	}
	width := right + float64(textW)*svgChar + 10
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" class="ladder" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="monospace" font-size="12">`+"\n",
		width, height, width, height)
	esc := html.EscapeString
	for c, e := range d.Columns {
		qp := "QP ?"
		if e.Known {
			qp = fmt.Sprintf("QP 0x%06x", e.QPN)
		}
		fmt.Fprintf(bw, `<g class="column"><text x="%.1f" y="16" text-anchor="middle" font-weight="bold">%s</text><text x="%.1f" y="31" text-anchor="middle">%s</text>`+
			`<line x1="%.1f" y1="38" x2="%.1f" y2="%.0f" stroke="#9e9e9e" stroke-width="1.5"/></g>`+"\n",
			lane[c], esc(e.Addr.String()), lane[c], esc(qp), lane[c], lane[c], height-4)
	}
	fmt.Fprintf(bw, `<text x="8" y="31" fill="#555555">#</text><text x="112" y="31" text-anchor="end" fill="#555555">time (s)</text>`+"\n")
	y := float64(svgTop) + 20
	for _, a := range d.Arrows {
		col := a.color()
		x1, x2 := lane[a.From], lane[a.To]
		fmt.Fprintf(bw, `<g class="arrow" data-num="%d">`, a.Num)
		fmt.Fprintf(bw, `<text x="8" y="%.0f">#%d</text><text x="112" y="%.0f" text-anchor="end" fill="#555555">%s</text>`,
			y+4, a.Num, y+4, a.clock())
		dash := ""
		if a.Malformed {
			dash = ` stroke-dasharray="5,3"`
		}
		if x1 == x2 { // to itself: a short loop
			fmt.Fprintf(bw, `<path d="M%.1f %.0f h30 v8 h-26" fill="none" stroke="%s" stroke-width="1.5"%s/>`, x1, y-4, col, dash)
			fmt.Fprintf(bw, `<polygon points="%.1f,%.0f %.1f,%.0f %.1f,%.0f" fill="%s"/>`, x1, y+4, x1+8, y, x1+8, y+8, col)
		} else {
			dir := 1.0
			if x2 < x1 {
				dir = -1
			}
			fmt.Fprintf(bw, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="%s" stroke-width="1.5"%s/>`, x1, y, x2-dir*8, y, col, dash)
			fmt.Fprintf(bw, `<polygon points="%.1f,%.0f %.1f,%.0f %.1f,%.0f" fill="%s"/>`, x2, y, x2-dir*9, y-4.5, x2-dir*9, y+4.5, col)
			fmt.Fprintf(bw, `<text x="%.1f" y="%.0f" text-anchor="middle" fill="%s" stroke="#ffffff" stroke-width="4" paint-order="stroke">%s</text>`, (x1+x2)/2, y-5, col, esc(a.Label))
		}
		if a.Fields != "" {
			fmt.Fprintf(bw, `<text x="%.1f" y="%.0f">%s</text>`, right, y+4, esc(a.Fields))
		}
		ny := y + 4
		for _, nt := range a.Notes {
			fmt.Fprintf(bw, `<text class="note %s" fill="%s">`, nt.Kind, svgColors[nt.Kind])
			for _, l := range wrap("* "+nt.Text, svgNoteLen) {
				ny += svgNoteRow
				fmt.Fprintf(bw, `<tspan x="%.1f" y="%.0f">%s</tspan>`, right, ny, esc(l))
			}
			bw.WriteString("</text>")
		}
		bw.WriteString("</g>\n")
		y += svgRow + float64(noteLines(a))*svgNoteRow
	}
	bw.WriteString("</svg>\n")
	return bw.Flush()
}

// noteLines counts the lines an arrow's notes take.
func noteLines(a Arrow) int {
	n := 0
	for _, nt := range a.Notes {
		n += len(wrap("* "+nt.Text, svgNoteLen))
	}
	return n
}

// wrap breaks s into lines of at most width characters at spaces (a
// longer word keeps its own line); lines after the first are indented by
// two spaces.
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		switch {
		case line == "":
			line = w
		case len(line)+1+len(w) <= width:
			line += " " + w
		default:
			lines = append(lines, line)
			line = "  " + w
		}
	}
	return append(lines, line)
}
