package interop

import (
	"os"
	"strings"
	"testing"

	"github.com/goroce/goroce/conform"
)

// TestConformTableReadme: the README's table parses, and lists exactly
// the cases of roced conform's catalogue, each with a verdict per guest.
func TestConformTableReadme(t *testing.T) {
	f, err := os.Open("README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tab, err := ParseConformTable(f)
	if err != nil {
		t.Fatal(err)
	}
	cat := conform.Catalogue()
	if len(tab) != len(cat) {
		t.Errorf("%d rows in the table, %d cases in the catalogue", len(tab), len(cat))
	}
	for _, c := range cat {
		row, ok := tab[c.ID]
		if !ok {
			t.Errorf("%s: not in the table", c.ID)
			continue
		}
		for _, s := range ConformSuites {
			if len(row[s]) == 0 {
				t.Errorf("%s: no verdict for %s", c.ID, s)
			}
		}
	}
}

// TestCheckConform: a run as published passes; a changed verdict, an
// error where the table has a verdict, a case the table lacks and one
// the run lacks each fail.
func TestCheckConform(t *testing.T) {
	readme := "## rxe's conformance table\n\n| case | rule | verdict (6.1 / 6.12) |\n|---|---|---|\n" +
		"| `a` | r | pass / pass |\n| `b` | r | deviation / pass |\n| `c` | r | error / error |\n| `d` | r | pass or deviation / pass |\n\n## next\n| `z` | not | a row |\n"
	tab, err := ParseConformTable(strings.NewReader(readme))
	if err != nil {
		t.Fatal(err)
	}
	good := []ConformResult{{ID: "a", Verdict: "pass"}, {ID: "b", Verdict: "deviation"}, {ID: "c", Verdict: "error"}, {ID: "d", Verdict: "deviation"}}
	if p := CheckConform(tab, "bookworm", good); len(p) != 0 {
		t.Errorf("as published: %v", p)
	}
	good[3].Verdict = "pass"
	if p := CheckConform(tab, "bookworm", good); len(p) != 0 {
		t.Errorf("as published, the other verdict seen: %v", p)
	}
	good[3].Verdict = "deviation"
	if p := CheckConform(tab, "trixie", good); len(p) != 2 || !strings.HasPrefix(p[0], "b: deviation, the table says pass") ||
		!strings.HasPrefix(p[1], "d: deviation, the table says pass") {
		t.Errorf("trixie: %v", p)
	}
	bad := []ConformResult{{ID: "a", Verdict: "error", Observed: "the peer sent nothing"}, {ID: "b", Verdict: "deviation"}, {ID: "new", Verdict: "pass"}}
	p := CheckConform(tab, "bookworm", bad)
	want := []string{"a: error, the table says pass", "new: pass, and not in the published table", "c: in the published table, not in the run",
		"d: in the published table, not in the run"}
	if len(p) != len(want) {
		t.Fatalf("%v", p)
	}
	for i := range want {
		if !strings.HasPrefix(p[i], want[i]) {
			t.Errorf("%q, want %q...", p[i], want[i])
		}
	}
	for _, r := range []string{
		"## rxe's conformance table\n| `a` | r | pass |\n",
		"## rxe's conformance table\n| `a` | r | pass / maybe |\n",
		"## rxe's conformance table\n| `a` | r | pass / pass |\n| `a` | r | pass / pass |\n",
		"## other\n| `a` | r | pass / pass |\n",
	} {
		if _, err := ParseConformTable(strings.NewReader(r)); err == nil {
			t.Errorf("%q: no error", r)
		}
	}
}
