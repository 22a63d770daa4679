package conform

import (
	"bytes"
	"html/template"
	"io"
)

// htmlCase is one case as the page shows it.
type htmlCase struct {
	Result
	Packets int
	SVG     template.HTML
}

var htmlPage = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>roced conform: {{.Pass}} of {{len .Cases}} cases pass</title>
<style>
body { font-family: sans-serif; font-size: 14px; margin: 1.5em; color: #212121; }
h1 { font-size: 1.5em; }
h2 { font-size: 1.15em; margin: 0 0 0.4em 0; font-family: monospace; }
table { border-collapse: collapse; margin-bottom: 2em; }
th, td { border: 1px solid #bdbdbd; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #eeeeee; }
td.id { font-family: monospace; white-space: nowrap; }
.pass { color: #2e7d32; font-weight: bold; }
.deviation { color: #c62828; font-weight: bold; }
.error { color: #b35900; font-weight: bold; }
section.case { display: flex; flex-wrap: wrap; gap: 1.5em; align-items: flex-start; border-top: 1px solid #bdbdbd; padding: 1em 0; }
.rule { flex: 0 0 22em; }
.rule dt { font-weight: bold; margin-top: 0.4em; }
.rule dd { margin: 0; }
.ladder { flex: 1 1 auto; max-width: 100%; overflow-x: auto; }
.none { color: #757575; font-style: italic; }
</style>
</head>
<body>
<h1>roced conform</h1>
<p>{{len .Cases}} cases: {{.Pass}} pass, {{.Deviations}} deviation, {{.Errors}} error.
Each case names the rule of the InfiniBand Architecture Specification it checks; "role" is the peer's.
Below the table, each case's packets between the suite and the peer, as a ladder diagram.</p>
<table>
<thead><tr><th>id</th><th>rule</th><th>role</th><th>expected</th><th>observed</th><th>verdict</th><th>peer_alive</th></tr></thead>
<tbody>
{{range .Cases}}<tr><td class="id"><a href="#{{.ID}}">{{.ID}}</a></td><td>{{.Rule}}</td><td>{{.Role}}</td><td>{{.Expected}}</td><td>{{.Observed}}</td><td class="{{.Verdict}}">{{.Verdict}}</td><td>{{.PeerAlive}}</td></tr>
{{end}}</tbody>
</table>
{{range .Cases}}<section class="case" id="{{.ID}}">
<div class="rule">
<h2>{{.ID}}</h2>
<dl>
<dt>rule</dt><dd>{{.Rule}}</dd>
<dt>peer's role</dt><dd>{{.Role}}</dd>
<dt>expected</dt><dd>{{.Expected}}</dd>
<dt>observed</dt><dd>{{.Observed}}</dd>
<dt>verdict</dt><dd class="{{.Verdict}}">{{.Verdict}}{{if not .PeerAlive}} (peer dead afterwards){{end}}</dd>
<dt>packets</dt><dd>{{.Packets}}</dd>
</dl>
</div>
<div class="ladder">{{if .SVG}}{{.SVG}}{{else}}<p class="none">no packets exchanged</p>{{end}}</div>
</section>
{{end}}</body>
</html>
`))

// WriteHTML writes results as a self-contained HTML page: the table (id,
// rule, role, expected, observed, verdict, peer_alive), then for each case
// its rule beside the packets it exchanged, drawn as an inline SVG ladder
// diagram. The page fetches nothing: no external style, script or font.
func WriteHTML(w io.Writer, rs []Result) error {
	d, e := Deviations(rs)
	page := struct {
		Cases                    []htmlCase
		Pass, Deviations, Errors int
	}{Pass: len(rs) - d - e, Deviations: d, Errors: e}
	for _, r := range rs {
		c := htmlCase{Result: r}
		if r.Ladder != nil && len(r.Ladder.Arrows) > 0 {
			var b bytes.Buffer
			if err := r.Ladder.WriteSVG(&b); err != nil {
				return err
			}
			c.SVG = template.HTML(b.String()) // WriteSVG escapes its text
			c.Packets = len(r.Ladder.Arrows)
		}
		page.Cases = append(page.Cases, c)
	}
	return htmlPage.Execute(w, page)
}
