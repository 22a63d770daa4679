package conform

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Catalogue returns every case of the suite, the peer as responder first.
func Catalogue() []Case {
	return append(responderCases(), requesterCases()...)
}

// RunSelf runs cases with goroce as the peer: for each case a fresh device
// over the in-memory link, its timers on a clock the case moves, and a
// fresh QP afterwards to check that the device still serves. progress, if
// not nil, is called with each result as it comes.
func RunSelf(cases []Case, progress func(Result)) []Result {
	var rs []Result
	for i := range cases {
		r := runSelf(&cases[i])
		if progress != nil {
			progress(r)
		}
		rs = append(rs, r)
	}
	return rs
}

func runSelf(c *Case) Result {
	s, err := newSelfSession(c.setup)
	if err != nil {
		return judge(c, Outcome{}, fmt.Errorf("setting up the peer: %w", err), false)
	}
	defer s.close()
	got, err := c.run(s)
	lad := s.raw.diagram()
	aerr := s.alive()
	r := judge(c, got, err, aerr == nil)
	r.Ladder = lad
	if aerr != nil {
		r.Observed += "; then the peer failed a fresh QP: " + aerr.Error()
		if r.Verdict == Pass {
			r.Verdict = Deviation
		}
	}
	return r
}

// Deviations counts the results that are not a pass.
func Deviations(rs []Result) (deviations, errors int) {
	for _, r := range rs {
		switch r.Verdict {
		case Deviation:
			deviations++
		case Error:
			errors++
		}
	}
	return
}

// WriteText writes results as a table: case, rule, role, expected,
// observed, verdict.
func WriteText(w io.Writer, rs []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	tools := false
	for _, r := range rs {
		tools = tools || r.PeerTool != ""
	}
	if tools {
		fmt.Fprintln(tw, "CASE\tRULE\tROLE\tPEER TOOL\tEXPECTED\tOBSERVED\tVERDICT")
	} else {
		fmt.Fprintln(tw, "CASE\tRULE\tROLE\tEXPECTED\tOBSERVED\tVERDICT")
	}
	for _, r := range rs {
		v := r.Verdict
		if !r.PeerAlive && r.PeerTool != "none" { // "none": the case never reached the peer
			v += " (peer dead)"
		}
		if tools {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Rule, r.Role, r.PeerTool, r.Expected, oneLine(r.Observed), v)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Rule, r.Role, r.Expected, oneLine(r.Observed), v)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	d, e := Deviations(rs)
	_, err := fmt.Fprintf(w, "%d cases: %d pass, %d deviation, %d error\n", len(rs), len(rs)-d-e, d, e)
	return err
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

// WriteJSON writes results as {"cases": [...]}.
func WriteJSON(w io.Writer, rs []Result) error {
	if rs == nil {
		rs = []Result{}
	}
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(struct {
		Cases []Result `json:"cases"`
	}{rs})
}
