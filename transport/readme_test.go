package transport_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestReadmeExample: the Go code block of the README's tour ("A Go
// program") is Example's body (its statements, one tab of indentation
// less, without the Output comment), so the copy a newcomer pastes is the
// one go test runs.
func TestReadmeExample(t *testing.T) {
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "example_test.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var body *ast.BlockStmt
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "Example" {
			body = fn.Body
		}
	}
	if body == nil || len(body.List) == 0 {
		t.Fatal("example_test.go has no func Example")
	}
	// From the first statement's line to the last's end.
	first := fset.Position(body.List[0].Pos())
	last := fset.Position(body.List[len(body.List)-1].End())
	text := string(src[first.Offset-(first.Column-1) : last.Offset])
	var want strings.Builder
	for _, l := range strings.Split(text, "\n") {
		want.WriteString(strings.TrimPrefix(l, "\t") + "\n")
	}

	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "### A Go program\n")
	if !ok {
		t.Fatal("README has no \"### A Go program\" section")
	}
	_, block, ok := strings.Cut(after, "```go\n")
	if !ok {
		t.Fatal("README's \"A Go program\" section has no ```go block")
	}
	block, _, ok = strings.Cut(block, "```\n")
	if !ok {
		t.Fatal("README's ```go block is not closed")
	}
	if block != want.String() {
		t.Errorf("README's Go block differs from Example's body; README:\n%s\nExample:\n%s", block, want.String())
	}
}
