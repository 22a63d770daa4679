package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// goTestCmd finds each `go test ...` the README shows in backquotes,
// across line breaks (Markdown lets a code span wrap).
var goTestCmd = regexp.MustCompile("`(?:[A-Z_]+=\\S+\\s+)*(go\\s+test\\s[^`]*)`")

// shellFields splits a command line as sh would for these commands:
// blanks separate words, single quotes keep theirs.
func shellFields(s string) []string {
	var out []string
	var w strings.Builder
	in, quoted := false, false
	for _, r := range s {
		switch {
		case r == '\'':
			quoted = !quoted
			in = true
		case (r == ' ' || r == '\t' || r == '\n') && !quoted:
			if in {
				out = append(out, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteRune(r)
			in = true
		}
	}
	if in {
		out = append(out, w.String())
	}
	return out
}

// testFuncs returns the names of the Test, Benchmark, Example and Fuzz
// functions in the test files of the package in dir.
func testFuncs(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no test files in %s", dir)
	}
	var names []string
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range af.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil {
				names = append(names, fn.Name.Name)
			}
		}
	}
	return names, nil
}

// checkGoTests checks that each go test command line in text (the
// README, from the module's root) names packages that exist and -run and
// -bench patterns that select something in them: a renamed package or
// benchmark leaves no command a reader copies that runs nothing.
func checkGoTests(root, text string) (n int, errs []string) {
	for _, m := range goTestCmd.FindAllStringSubmatch(text, -1) {
		n++
		cmd := strings.Join(strings.Fields(m[1]), " ")
		var pkgs []string
		pats := map[string]string{} // flag: pattern
		args := shellFields(m[1])[2:]
		for i := 0; i < len(args); i++ {
			switch a := args[i]; {
			case strings.HasPrefix(a, "./"):
				pkgs = append(pkgs, a)
			case (a == "-run" || a == "-bench") && i+1 < len(args):
				pats[a] = args[i+1]
				i++
			}
		}
		if len(pkgs) == 0 {
			errs = append(errs, fmt.Sprintf("%q names no package", cmd))
		}
		for _, p := range pkgs {
			names, err := testFuncs(filepath.Join(root, p))
			if err != nil {
				errs = append(errs, fmt.Sprintf("%q: %v", cmd, err))
				continue
			}
			for flag, pat := range pats {
				if pat == "^$" {
					continue
				}
				// go test matches a pattern's first element against the
				// top-level names.
				re, err := regexp.Compile(strings.SplitN(pat, "/", 2)[0])
				if err != nil {
					errs = append(errs, fmt.Sprintf("%q: %s %q: %v", cmd, flag, pat, err))
					continue
				}
				found := false
				for _, name := range names {
					bench := strings.HasPrefix(name, "Benchmark")
					if bench == (flag == "-bench") && re.MatchString(name) {
						found = true
						break
					}
				}
				if !found {
					errs = append(errs, fmt.Sprintf("%q: %s %q selects nothing in %s", cmd, flag, pat, p))
				}
			}
		}
	}
	return n, errs
}

// docFiles are the user's documents, from the module's root: the README
// and every page of docs/.
func docFiles(tb testing.TB, root string) []string {
	tb.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		tb.Fatal(err)
	}
	if len(pages) == 0 {
		tb.Fatal("no docs/*.md")
	}
	return append([]string{filepath.Join(root, "README.md")}, pages...)
}

// TestReadmeGoTests: every go test command the README and the pages of
// docs/ show names a package that exists and selects a test or benchmark
// in it.
func TestReadmeGoTests(t *testing.T) {
	root := filepath.Join("..", "..")
	total := 0
	for _, f := range docFiles(t, root) {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n, errs := checkGoTests(root, string(text))
		t.Logf("%s: %d go test commands", f, n)
		total += n
		for _, e := range errs {
			t.Errorf("%s: %s", f, e)
		}
	}
	if total < 20 {
		t.Fatalf("found %d go test commands in the README and docs/; the pattern no longer finds them", total)
	}
}

// TestCheckGoTests: the check finds a package that does not exist and
// patterns that select nothing, and passes a command that is right.
func TestCheckGoTests(t *testing.T) {
	root := filepath.Join("..", "..")
	text := "`go test -run '^$' -bench 'CRCUpdate/crcUpdate' ./bth` `GOMAXPROCS=1 go test\n-bench NoSuchBench ./bth` " +
		"`go test -run NoSuchTest ./bth` `go test -bench Engine ./nosuchdir` `go test -run Example ./transport`"
	n, errs := checkGoTests(root, text)
	if n != 5 || len(errs) != 3 {
		t.Fatalf("%d commands, errors %q; want 5 and three errors", n, errs)
	}
	for i, want := range []string{"NoSuchBench", "NoSuchTest", "./nosuchdir"} {
		if !strings.Contains(errs[i], want) {
			t.Errorf("error %d %q does not name %s", i, errs[i], want)
		}
	}
}

// TestReadmeShape: the README stays a page a newcomer reads in minutes
// (issue 45): at most 400 lines, none over 300 characters; the rest
// belongs in docs/.
func TestReadmeShape(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(text), "\n"), "\n")
	if len(lines) > 400 {
		t.Errorf("README.md has %d lines; at most 400, the rest in docs/", len(lines))
	}
	for i, l := range lines {
		if n := len([]rune(l)); n > 300 {
			t.Errorf("README.md:%d: %d characters; at most 300", i+1, n)
		}
	}
}

// testLink is a link to a test in the README's feature table:
// [`TestName`](path/to/file_test.go).
var testLink = regexp.MustCompile("\\[`((?:Test|Fuzz|Example)\\w*)`\\]\\(([^)#]+)\\)")

// checkFeatureTable checks each row of the table under "## What it
// supports" in text: it links at least one test, and each linked file
// (from root) declares the test it names.
func checkFeatureTable(root, text string) (rows int, errs []string) {
	_, sec, ok := strings.Cut(text, "\n## What it supports\n")
	if !ok {
		return 0, []string{"no \"## What it supports\" section"}
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	for _, line := range strings.Split(sec, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| area ") {
			continue
		}
		rows++
		links := testLink.FindAllStringSubmatch(line, -1)
		if len(links) == 0 {
			errs = append(errs, fmt.Sprintf("row %q links no test", line))
		}
		for _, l := range links {
			src, err := os.ReadFile(filepath.Join(root, l[2]))
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", l[1], err))
				continue
			}
			if !regexp.MustCompile(`(?m)^func ` + l[1] + `\(`).Match(src) {
				errs = append(errs, fmt.Sprintf("%s declares no %s", l[2], l[1]))
			}
		}
	}
	if rows == 0 {
		errs = append(errs, "the feature table has no rows")
	}
	return rows, errs
}

// TestReadmeFeatureTable: every row of the README's feature table links
// a test that exists where the link points.
func TestReadmeFeatureTable(t *testing.T) {
	root := filepath.Join("..", "..")
	text, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows, errs := checkFeatureTable(root, string(text))
	t.Logf("%d rows", rows)
	for _, e := range errs {
		t.Error(e)
	}
	// The check fails a moved test, a renamed one and a row without one.
	bad := "\n## What it supports\n\n| area | supported | proven by |\n|---|---|---|\n" +
		"| a | b | [`TestSmokeRC`](transport/ops_test.go) |\n| c | d | [`TestNoSuchTest`](transport/smoke_test.go) |\n| e | f | none |\n"
	if _, errs := checkFeatureTable(root, bad); len(errs) != 3 {
		t.Errorf("a table with three bad rows: errors %q", errs)
	}
}

// localLink is a Markdown link to a file of the repository.
var localLink = regexp.MustCompile(`\]\(([^)#:]+)(#[^)]*)?\)`)

// TestDocLinks: every link of the README and of docs/ to a file of the
// repository names one that exists.
func TestDocLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, f := range docFiles(t, root) {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range localLink.FindAllStringSubmatch(string(text), -1) {
			if _, err := os.Stat(filepath.Join(filepath.Dir(f), m[1])); err != nil {
				t.Errorf("%s: link to %s: %v", f, m[1], err)
			}
		}
	}
}

// layoutDirs returns the directories the README's layout section draws,
// one a line (a line that starts with spaces continues the one before),
// and the errors of lines that are not one directory.
func layoutDirs(text string) (dirs []string, errs []string) {
	_, sec, ok := strings.Cut(text, "\n## Layout\n")
	if !ok {
		return nil, []string{"no \"## Layout\" section"}
	}
	_, block, ok := strings.Cut(sec, "\n```\n")
	if !ok {
		return nil, []string{"the layout section draws no tree (no ``` block)"}
	}
	block, _, _ = strings.Cut(block, "\n```")
	for _, l := range strings.Split(block, "\n") {
		if l == "" || strings.HasPrefix(l, " ") {
			continue
		}
		d, _, _ := strings.Cut(l, " ")
		if !strings.HasSuffix(d, "/") {
			errs = append(errs, fmt.Sprintf("layout line %q does not start with a directory (dir/)", l))
			continue
		}
		dirs = append(dirs, strings.TrimSuffix(d, "/"))
	}
	return dirs, errs
}

// goPackageDirs returns the directories under root that hold a Go
// package (a .go file other than a test), outside testdata and hidden
// directories.
func goPackageDirs(root string) (map[string]bool, error) {
	pkgs := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			pkgs[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	return pkgs, err
}

// checkLayout compares the layout's lines with the packages: each
// package has exactly one line, and each line names a directory that
// exists (a package, or one such as lab/ that holds no Go).
func checkLayout(root, text string) (n int, errs []string) {
	dirs, errs := layoutDirs(text)
	pkgs, err := goPackageDirs(root)
	if err != nil {
		return 0, append(errs, err.Error())
	}
	seen := map[string]bool{}
	for _, d := range dirs {
		if seen[d] {
			errs = append(errs, fmt.Sprintf("layout draws %s/ twice", d))
		}
		seen[d] = true
		if fi, err := os.Stat(filepath.Join(root, d)); err != nil || !fi.IsDir() {
			errs = append(errs, fmt.Sprintf("layout draws %s/, which is not a directory", d))
		}
	}
	for p := range pkgs {
		if p != "." && !seen[p] {
			errs = append(errs, fmt.Sprintf("package %s/ has no line in the layout", p))
		}
	}
	slices.Sort(errs)
	return len(dirs), errs
}

// TestReadmeLayout: the README's layout section draws the tree one line a
// package, and it is the real tree: a package added, moved or removed
// without its line fails here (issue 45).
func TestReadmeLayout(t *testing.T) {
	root := filepath.Join("..", "..")
	text, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	n, errs := checkLayout(root, string(text))
	for _, e := range errs {
		t.Error(e)
	}
	if n < 20 {
		t.Fatalf("found %d layout lines; the section's pattern no longer finds them", n)
	}
}

// TestCheckLayout: checkLayout sees a package without a line, a line
// without a directory, and a line drawn twice.
func TestCheckLayout(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"a", "b/c", "b/c/testdata/x", "lab"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"a/a.go", "b/c/c.go", "b/c/testdata/x/x.go", "b/b_test.go"} {
		if err := os.WriteFile(filepath.Join(root, f), []byte("package x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	good := "# x\n\n## Layout\n\n```\na/    one\nb/c/  two\n      more of two\nlab/  no Go\n```\n"
	if _, errs := checkLayout(root, good); len(errs) != 0 {
		t.Fatalf("good layout: %q", errs)
	}
	bad := "# x\n\n## Layout\n\n```\na/    one\na/    again\ngone/ no such\nlab/  no Go\n```\n"
	_, errs := checkLayout(root, bad)
	want := []string{"layout draws a/ twice", "layout draws gone/, which is not a directory", "package b/c/ has no line in the layout"}
	if !slices.Equal(errs, want) {
		t.Fatalf("bad layout: %q, want %q", errs, want)
	}
}
