// Command doclint fails if an exported identifier of the module has no doc
// comment: every exported function, method (of an exported type), type,
// constant and variable, every exported field of an exported struct type
// and every method of an exported interface type, in every package but
// package main (a command exports nothing to a user) and outside test
// files, testdata and hidden directories. A group's doc comment covers the
// constants and variables of the group; a trailing line comment documents
// a field or a value as go doc shows it.
//
// Usage: go run ./internal/doclint [DIR...] (default: the current
// directory, walked recursively). It prints one line per identifier,
// "file:line: Name has no doc comment", and exits 1 if there is any, 2 if a
// file does not parse.
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// missing is one exported identifier without a doc comment.
type missing struct {
	pos  token.Position
	name string // Func, Type, Type.Method, Type.Field, Const
}

func (m missing) String() string {
	return fmt.Sprintf("%s:%d: %s has no doc comment", m.pos.Filename, m.pos.Line, m.name)
}

// checkDir parses the non-test Go files of one directory and returns its
// undocumented exported identifiers, in file and line order.
func checkDir(dir string) ([]missing, error) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	var out []missing
	for _, p := range pkgs {
		if p.Name == "main" {
			continue
		}
		for _, f := range p.Files {
			out = append(out, checkFile(fset, f)...)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].pos, out[j].pos
		if a.Filename != b.Filename {
			return a.Filename < b.Filename
		}
		return a.Line < b.Line
	})
	return out, nil
}

func checkFile(fset *token.FileSet, f *ast.File) []missing {
	var out []missing
	miss := func(id *ast.Ident, name string) {
		out = append(out, missing{pos: fset.Position(id.Pos()), name: name})
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() || d.Doc != nil {
				continue
			}
			name := d.Name.Name
			if d.Recv != nil && len(d.Recv.List) > 0 {
				recv := recvName(d.Recv.List[0].Type)
				if !ast.IsExported(recv) {
					continue // go doc does not show it
				}
				name = recv + "." + name
			}
			miss(d.Name, name)
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					if s.Doc == nil && d.Doc == nil {
						miss(s.Name, s.Name.Name)
					}
					out = append(out, checkMembers(fset, s)...)
				case *ast.ValueSpec:
					if s.Doc != nil || s.Comment != nil || d.Doc != nil {
						continue
					}
					for _, n := range s.Names {
						if n.IsExported() {
							miss(n, n.Name)
						}
					}
				}
			}
		}
	}
	return out
}

// checkMembers returns the undocumented exported fields of a struct type
// or methods of an interface type. Embedded fields are documented by their
// own type.
func checkMembers(fset *token.FileSet, s *ast.TypeSpec) []missing {
	var list *ast.FieldList
	switch t := s.Type.(type) {
	case *ast.StructType:
		list = t.Fields
	case *ast.InterfaceType:
		list = t.Methods
	default:
		return nil
	}
	var out []missing
	for _, fl := range list.List {
		if fl.Doc != nil || fl.Comment != nil {
			continue
		}
		for _, n := range fl.Names {
			if n.IsExported() {
				out = append(out, missing{pos: fset.Position(n.Pos()), name: s.Name.Name + "." + n.Name})
			}
		}
	}
	return out
}

// recvName returns the type name of a method receiver (T, *T, T[P]).
func recvName(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.ParenExpr:
			e = t.X
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}

// walk checks every package directory under root, skipping testdata and
// directories whose names start with "." or "_", as the go command does.
func walk(root string) ([]missing, error) {
	var out []missing
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.IsDir() {
			return nil
		}
		name := e.Name()
		if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		m, err := checkDir(path)
		if err != nil {
			return err
		}
		out = append(out, m...)
		return nil
	})
	return out, err
}

func main() {
	roots := os.Args[1:]
	if len(roots) == 0 {
		roots = []string{"."}
	}
	n := 0
	for _, r := range roots {
		if strings.HasPrefix(r, "-") {
			fmt.Fprintf(os.Stderr, "doclint: no flags; usage: doclint [DIR...]\n")
			os.Exit(2)
		}
		m, err := walk(r)
		if err != nil {
			fmt.Fprintln(os.Stderr, "doclint:", err)
			os.Exit(2)
		}
		for _, x := range m {
			fmt.Println(x)
		}
		n += len(m)
	}
	if n > 0 {
		fmt.Fprintf(os.Stderr, "doclint: %d exported identifiers without a doc comment\n", n)
		os.Exit(1)
	}
}
