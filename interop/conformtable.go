package interop

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
)

// The README's "rxe's conformance table" publishes, for each case of
// roced conform, its verdict against rxe on each guest ("pass /
// deviation": bookworm's 6.1, then trixie's 6.12). CI runs roced conform
// against each guest and holds the run to the table (CheckConform), so
// that the table stays true: a case whose verdict changed, a case the
// table does not know, and a case the table has and the run lacks all
// fail.

// ConformSection is the README heading of the table.
const ConformSection = "## rxe's conformance table"

// ConformSuites are the guests in the order of the table's verdict column.
var ConformSuites = []string{"bookworm", "trixie"}

// ConformTable is the published verdict of each case per guest: one, or
// several where rxe was seen to vary between runs ("pass or deviation"
// in the README, the row saying how).
type ConformTable map[string]map[string][]string

// ParseConformTable reads the table from the README: the rows of the
// section's table whose first cell is a case id in backquotes and whose
// last cell is "VERDICT / VERDICT".
func ParseConformTable(r io.Reader) (ConformTable, error) {
	t := ConformTable{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	in := false
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == ConformSection
			continue
		}
		if !in || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		id := strings.Trim(strings.TrimSpace(cells[0]), "`")
		vs := strings.Split(strings.TrimSpace(cells[len(cells)-1]), "/")
		if len(cells) < 3 || len(vs) != len(ConformSuites) {
			return nil, fmt.Errorf("README line %d: a table row whose last cell is not %d verdicts: %q", n, len(ConformSuites), line)
		}
		if _, dup := t[id]; dup {
			return nil, fmt.Errorf("README line %d: %s twice in the table", n, id)
		}
		t[id] = map[string][]string{}
		for i, cell := range vs {
			for _, v := range strings.Split(cell, " or ") {
				v = strings.TrimSpace(v)
				switch v {
				case "pass", "deviation", "error":
				default:
					return nil, fmt.Errorf("README line %d: %s: verdict %q (want pass, deviation or error, or two joined by \"or\")", n, id, v)
				}
				t[id][ConformSuites[i]] = append(t[id][ConformSuites[i]], v)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(t) == 0 {
		return nil, fmt.Errorf("no table under %q", ConformSection)
	}
	return t, nil
}

// ConformResult is one case of roced conform's JSON report, the fields
// the check reads.
type ConformResult struct {
	// ID is the case's id.
	ID string `json:"id"`
	// Verdict is pass, deviation or error.
	Verdict string `json:"verdict"`
	// Observed is what the peer did, or why the case was not judged.
	Observed string `json:"observed"`
}

// ReadConformJSON reads roced conform --json's report.
func ReadConformJSON(path string) ([]ConformResult, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d struct {
		Cases []ConformResult `json:"cases"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(d.Cases) == 0 {
		return nil, fmt.Errorf("%s: no cases", path)
	}
	return d.Cases, nil
}

// CheckConform holds a run against suite's guest to the table: one
// problem per case whose verdict is not the published one (an error
// where the table says the case is judged fails the same way), and per
// case only one of them has.
func CheckConform(t ConformTable, suite string, rs []ConformResult) []string {
	var probs []string
	seen := map[string]bool{}
	for _, r := range rs {
		seen[r.ID] = true
		row, ok := t[r.ID]
		switch {
		case !ok:
			probs = append(probs, fmt.Sprintf("%s: %s, and not in the published table", r.ID, r.Verdict))
		case len(row[suite]) == 0:
			probs = append(probs, fmt.Sprintf("%s: the table has no verdict for %s", r.ID, suite))
		case !slices.Contains(row[suite], r.Verdict):
			probs = append(probs, fmt.Sprintf("%s: %s, the table says %s (observed: %s)", r.ID, r.Verdict, strings.Join(row[suite], " or "), r.Observed))
		}
	}
	var missing []string
	for id := range t {
		if !seen[id] {
			missing = append(missing, id)
		}
	}
	sort.Strings(missing)
	for _, id := range missing {
		probs = append(probs, fmt.Sprintf("%s: in the published table, not in the run", id))
	}
	return probs
}
