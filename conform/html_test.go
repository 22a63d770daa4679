package conform

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
)

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func hasClass(n *html.Node, class string) bool {
	return n.Type == html.ElementNode && strings.Contains(" "+attr(n, "class")+" ", " "+class+" ")
}

// find returns the nodes under n that match.
func find(n *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	for c := range n.Descendants() {
		if match(c) {
			out = append(out, c)
		}
	}
	return out
}

func text(n *html.Node) string {
	var b strings.Builder
	for c := range n.Descendants() {
		if c.Type == html.TextNode {
			b.WriteString(c.Data)
		}
	}
	return b.String()
}

// TestHTML writes the whole suite's page and parses it: one table row per
// case with the columns, and one section per case with its rule
// beside an inline SVG ladder that has one arrow per packet the case
// exchanged; nothing in it is fetched from elsewhere.
func TestHTML(t *testing.T) {
	rs := RunSelf(Catalogue(), nil)
	var b bytes.Buffer
	if err := WriteHTML(&b, rs); err != nil {
		t.Fatal(err)
	}
	doc, err := html.Parse(&b)
	if err != nil {
		t.Fatal(err)
	}
	var head []string
	for _, th := range find(doc, func(n *html.Node) bool { return n.Type == html.ElementNode && n.Data == "th" }) {
		head = append(head, text(th))
	}
	if got := strings.Join(head, ","); got != "id,rule,role,expected,observed,verdict,peer_alive" {
		t.Errorf("table columns %s", got)
	}
	rows := find(doc, func(n *html.Node) bool {
		return n.Type == html.ElementNode && n.Data == "tr" && n.Parent.Data == "tbody"
	})
	if len(rows) != len(rs) {
		t.Fatalf("%d rows for %d cases", len(rows), len(rs))
	}
	sections := map[string]*html.Node{}
	for _, s := range find(doc, func(n *html.Node) bool { return hasClass(n, "case") }) {
		sections[attr(s, "id")] = s
	}
	for _, r := range rs {
		s := sections[r.ID]
		if s == nil {
			t.Errorf("%s: no section", r.ID)
			continue
		}
		if rule := find(s, func(n *html.Node) bool { return hasClass(n, "rule") }); len(rule) != 1 || !strings.Contains(text(rule[0]), r.Rule) {
			t.Errorf("%s: the rule %q is not beside the ladder", r.ID, r.Rule)
		}
		svgs := find(s, func(n *html.Node) bool { return n.Type == html.ElementNode && n.Data == "svg" })
		if len(svgs) != 1 || r.Ladder == nil || len(r.Ladder.Arrows) == 0 {
			t.Errorf("%s: %d ladders, want one with packets", r.ID, len(svgs))
			continue
		}
		arrows := find(svgs[0], func(n *html.Node) bool { return hasClass(n, "arrow") })
		if len(arrows) != len(r.Ladder.Arrows) {
			t.Errorf("%s: %d arrows, want %d", r.ID, len(arrows), len(r.Ladder.Arrows))
		}
		// Each arrow has its line (or loop) and arrowhead.
		for _, a := range arrows {
			n, _ := strconv.Atoi(attr(a, "data-num"))
			lines := find(a, func(n *html.Node) bool { return n.Data == "line" || n.Data == "path" })
			heads := find(a, func(n *html.Node) bool { return n.Data == "polygon" })
			if n < 1 || len(lines) != 1 || len(heads) != 1 {
				t.Errorf("%s: arrow %q has %d lines and %d heads", r.ID, attr(a, "data-num"), len(lines), len(heads))
			}
		}
	}
	// resp-psn-ahead: the stimulus and the NAK, the fence twice and its
	// two ACKs, on four columns (the suite's two QPs, the peer's two).
	for _, r := range rs {
		if r.ID == "resp-psn-ahead" && (len(r.Ladder.Arrows) != 6 || len(r.Ladder.Columns) != 4) {
			t.Errorf("resp-psn-ahead: %d arrows on %d columns, want 6 on 4", len(r.Ladder.Arrows), len(r.Ladder.Columns))
		}
		if r.ID == "req-read-response-short" && !strings.Contains(notes(r), "the response carries 32 bytes, READ #1 asked for 64") {
			t.Errorf("req-read-response-short: the ladder does not say the response is short:\n%s", notes(r))
		}
	}
	for _, n := range find(doc, func(n *html.Node) bool { return n.Type == html.ElementNode }) {
		switch n.Data {
		case "script", "link", "img", "iframe", "object", "embed":
			t.Errorf("the page has a <%s>", n.Data)
		case "style":
			if s := text(n); strings.Contains(s, "url(") || strings.Contains(s, "@import") {
				t.Error("the style fetches something")
			}
		}
		for _, a := range n.Attr {
			if (a.Key == "href" || a.Key == "src" || strings.HasSuffix(a.Key, ":href")) && !strings.HasPrefix(a.Val, "#") {
				t.Errorf("<%s %s=%q> points outside the page", n.Data, a.Key, a.Val)
			}
		}
	}
}

// TestHTMLChromium renders a page of a few cases in headless Chromium,
// where it is installed (it is not part of CI), and checks the screenshot
// shows the ladders: the colours of their requests (navy), responses
// (green) and NAKs (red) are there. The screenshot is kept under
// $CONFORM_SCREENSHOT_DIR when set, for a person to look at.
func TestHTMLChromium(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("no chromium on PATH")
	}
	var sel []Case
	for _, c := range Catalogue() {
		switch c.ID {
		case "resp-psn-ahead", "resp-dup-read", "resp-truncated-reth", "req-rnr-retry-exhausted":
			sel = append(sel, c)
		}
	}
	dir := t.TempDir()
	if d := os.Getenv("CONFORM_SCREENSHOT_DIR"); d != "" {
		dir = d
	}
	page := filepath.Join(dir, "conform.html")
	shot := filepath.Join(dir, "conform.png")
	var b bytes.Buffer
	if err := WriteHTML(&b, RunSelf(sel, nil)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(page, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // a backstop: a screenshot takes seconds
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--user-data-dir="+filepath.Join(t.TempDir(), "profile"),
		"--window-size=1600,2400", "--screenshot="+shot, "file://"+page)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, out)
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	want := map[[3]uint32]string{
		{0x1a, 0x23, 0x7e}: "navy (requests)",
		{0x2e, 0x7d, 0x32}: "green (responses)",
		{0xc6, 0x28, 0x28}: "red (NAKs)",
	}
	count := map[[3]uint32]int{}
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			count[[3]uint32{r >> 8, g >> 8, b >> 8}]++
		}
	}
	for c, name := range want {
		if count[c] < 100 {
			t.Errorf("the screenshot has %d pixels of %s: the ladders did not render", count[c], name)
		}
	}
}

// notes joins the notes of a case's ladder, one a line.
func notes(r Result) string {
	var b strings.Builder
	for _, a := range r.Ladder.Arrows {
		for _, n := range a.Notes {
			b.WriteString(n.Text + "\n")
		}
	}
	return b.String()
}
