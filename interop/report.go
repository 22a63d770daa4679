package interop

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

const lineFormat = "%-34s %-13s %-7s %s"

func progressLine(r Result) string {
	s := tableRow(r)
	if r.Result != Pass && len(r.Reasons) > 0 {
		s += "  <- " + mainReason(r.Reasons)
	}
	return strings.TrimRight(s, " ")
}

// mainReason picks the reason for a one-line summary: a side stopped by the
// harness is a consequence, the other side's fault is the news.
func mainReason(reasons []string) string {
	for _, r := range reasons {
		if !strings.Contains(r, stoppedReason) {
			return r
		}
	}
	return reasons[0]
}

// WriteText writes the run as text: the environment, one line per case
// (case, direction, result, figure), the totals, then for every case that
// did not pass its reasons, both command lines and both sides' output.
func (rep *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "interop matrix against %s (%d cases, %.0fs)\n", rep.Peer, len(rep.Results), rep.Seconds)
	keys := make([]string, 0, len(rep.Info))
	for k := range rep.Info {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if rep.Info[k] != "" {
			fmt.Fprintf(w, "  %s: %s\n", k, rep.Info[k])
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf(lineFormat, "CASE", "DIRECTION", "RESULT", "FIGURE"), " "))
	for _, r := range rep.Results {
		fmt.Fprintln(w, tableRow(r))
	}
	fmt.Fprintf(w, "\n%d passed, %d failed, %d not run\n", rep.Passed, rep.Failed, rep.NotRun)
	if t := rep.Impair; t != nil {
		fmt.Fprintf(w, "impaired path, all cases: roced->guest %d packets, %d lost, %d reordered; guest->roced %d packets, %d lost, %d reordered\n",
			t.ToGuest.Packets, t.ToGuest.Lost, t.ToGuest.Reordered, t.ToRoced.Packets, t.ToRoced.Lost, t.ToRoced.Reordered)
	}
	first := true
	for _, r := range rep.Results {
		if r.Result == Pass {
			continue
		}
		if first {
			fmt.Fprintln(w, "\nFailures:")
			first = false
		}
		fmt.Fprintln(w)
		writeDetail(w, r)
	}
}

// tableRow is a case's line: case, direction, result, figure and, on an
// impaired path, what the forwarder did to it.
func tableRow(r Result) string {
	s := fmt.Sprintf(lineFormat, r.Case, r.Direction, r.Result, FigureText(r.Figures))
	if r.Impair != nil {
		s = fmt.Sprintf("%-70s %s", strings.TrimRight(s, " "), r.Impair.Short())
	}
	return strings.TrimRight(s, " ")
}

// writeDetail writes one case in full: verdict, then each side's command,
// status and output.
func writeDetail(w io.Writer, r Result) {
	fmt.Fprintf(w, "%s %s %s (%.1fs)\n", r.Result, r.Case, r.Direction, r.Seconds)
	for _, s := range r.Reasons {
		fmt.Fprintf(w, "  reason: %s\n", s)
	}
	for _, s := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", s)
	}
	if len(r.Figures) > 0 {
		fmt.Fprintf(w, "  figure: %s\n", FigureText(r.Figures))
	}
	for _, s := range r.sides() {
		o := s.sr.Output
		fmt.Fprintf(w, "  %s (%s, %s): %s\n", s.role, s.sr.Who, o.Where, ShellJoin(o.Argv))
		switch {
		case o.NotCaptured:
			fmt.Fprintln(w, "    run by hand, output not captured")
			continue
		case o.StartErr != "":
			fmt.Fprintf(w, "    %s\n", o.StartErr)
		default:
			st := fmt.Sprintf("exit %d", o.Exit)
			if o.TimedOut {
				st += ", timed out"
			}
			if o.Stopped {
				st += ", stopped by the harness"
			}
			fmt.Fprintf(w, "    %s after %.1fs\n", st, o.Seconds)
		}
		indent(w, "    stdout| ", o.Stdout)
		indent(w, "    stderr| ", o.Stderr)
		for _, l := range o.Hung {
			fmt.Fprintf(w, "    hung| %s\n", l)
		}
	}
	if r.Pcap != "" {
		fmt.Fprintf(w, "  pcap: %s\n", r.Pcap)
	}
	if r.Dir != "" {
		fmt.Fprintf(w, "  artifacts: %s\n", r.Dir)
	}
}

func indent(w io.Writer, prefix, s string) {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return
	}
	for _, l := range strings.Split(s, "\n") {
		fmt.Fprintln(w, strings.TrimRight(prefix+l, " "))
	}
}

// WriteJSON writes the report as indented JSON to file.
func (rep *Report) WriteJSON(file string) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(b, '\n'), 0o644)
}
