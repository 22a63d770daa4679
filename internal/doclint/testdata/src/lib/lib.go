// Package lib is doclint's test input: each identifier named Bad... lacks
// a doc comment, each other one has one (or needs none).
package lib

// Good is documented.
func Good() {}

func Bad() {}

func unexported() {}

// T is documented.
type T struct {
	Field  int // documented by a line comment
	BadF   int
	hidden int
	// A, B share a doc comment.
	A, B int
	T2   // embedded: documented by its own type
}

type BadT int

// T2 is documented.
type T2 struct{}

// Method is documented.
func (T) Method() {}

func (*T) BadM() {}

func (T2) BadGeneric() {}

type unexp struct{ Exported int }

func (unexp) Exported2() {}

// I is documented.
type I interface {
	// M is documented.
	M()
	BadIM()
}

// Consts in a documented group.
const (
	C1 = 1
	C2 = 2
)

const (
	C3      = 3 // line comment
	BadC4   = 4
	unexpC5 = 5
)

const BadC6 = 6

// V is documented.
var V = 1

var BadV, unexpV = 1, 2

// Grouped types: the group's comment documents them.
type (
	G1 int
	G2 int
)

type (
	BadG3 int
)
